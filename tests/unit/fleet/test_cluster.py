"""A Slurm host's requests against the cluster's nodes, one node at a time, from sinfo's lines: the constraint read
as Slurm 22.05 reads it (left to right, no precedence; each reading below was put to the fleet tests' real
slurmctld with `sbatch -w <node> -C ...`, which ran or refused it alike), and GPUs, features and memory that exist
only on different nodes refused, since a task runs on one; an account and QOS judged from a real slurmdbd's
answers, as sbatch judged them there."""

from __future__ import annotations

from typing import Any

import pytest

from ninferkit.fleet.cluster import (
    Checked,
    account_words,
    enforces_associations,
    host_against,
    read_sinfo,
)
from ninferkit.fleet.constraint import ConstraintSyntax, parse, spelled
from ninferkit.fleet.slurm import config_settings
from ninferkit.fleet.spec import Host
from tests.conftest import REPO

SINFO = "nodea|test*|gpu:fakea:3|ib,fast|4096\nnodeb|test*|gpu:fakeb:3(S:0)|ib,big|8192\nnodec|cpu|(null)|(null)|2048\n"
"""`sinfo -h -N -o '%N|%P|%G|%f|%m'`: the first two lines as the live test cluster prints them (tests/live/daemons.py),
nodeb with a socket binding and more memory, and a featureless node in a second partition."""


def against(**asked: Any) -> Checked:
    host = Host.model_validate({"name": "h", "via": "slurm", "profiles": ["p.yaml"], "run_root": "runs", **asked})
    return host_against(host, read_sinfo(SINFO))


@pytest.mark.parametrize(("written", "read"), [
    ("ib|fast&big", "(ib|fast)&big"),  # refused on nodea (ib, fast) by Slurm: not ib|(fast&big)
    ("fast|ib&big", "(fast|ib)&big"),
    ("big&ib|fast", "(big&ib)|fast"),
    ("(fast|big)&ib", "(fast|big)&ib"),
    ("ib,fast", "ib&fast"),  # Slurm shows it as Features=ib&fast
    ("fast&", "fast"),  # a trailing operator is ignored: Slurm ran it on nodea
    ("[fast|big]", "[fast|big]"),
    ("[fast*1&big*1]", "[fast*1&big*1]"),
])
def test_a_constraint_reads_left_to_right_as_slurm_reads_it(written: str, read: str) -> None:
    assert spelled(parse(written)) == read


@pytest.mark.parametrize("written", ["&fast", "fast&&big", "(fast", "fast)", "[fast&big]", "[fast|big]&[ib|big]",
                                     "fast*0"])
def test_forms_sbatch_refuses_are_refused(written: str) -> None:
    """Each of these, submitted to the live cluster, was refused: "Invalid feature specification"."""
    with pytest.raises(ConstraintSyntax):
        parse(written)
    checked = against(constraint=written)
    assert len(checked.problems) == 1 and "sbatch would refuse it" in checked.problems[0], checked


def test_features_found_only_on_two_different_nodes_are_refused_naming_each_nodes_features() -> None:
    checked = against(constraint="fast&big")
    assert checked.problems == ["host h: constraint fast&big: no node of partition test satisfies it; nodea has "
                                "fast, ib; nodeb has big, ib"]


@pytest.mark.parametrize(("constraint", "gres", "fits"), [
    ("ib|fast&big", None, True),  # nodeb
    ("ib|fast&big", "gpu:fakea:1", False),  # nodea has ib and fast, not big
    ("big&ib|fast", "gpu:fakea:1", True),
    ("(fast|big)&ib", "gpu:fakea:1", True),
    ("[fast|big]", "gpu:fakeb:1", True),  # matching OR: on one node, either
    ("ib,fast", "gpu:fakeb:1", False),
])
def test_the_constraint_and_the_gpus_must_meet_on_one_node(constraint: str, gres: str | None, fits: bool) -> None:
    checked = against(constraint=constraint, gres=gres)
    assert (checked.problems == []) is fits, checked
    if not fits:
        assert checked.problems[0].startswith("host h: no one node of partition test has all the host asks, and a "
                                              "task runs on one node: nodea lacks "), checked


def test_the_reading_is_said_where_it_is_not_what_was_written() -> None:
    checked = against(constraint="ib|fast&big", gres="gpu:fakea:1")
    assert "nodea lacks constraint ib|fast&big (Slurm reads it left to right: (ib|fast)&big) (it has fast, ib)" \
        in checked.problems[0]
    assert "nodeb lacks gres gpu:fakea:1 (it has gpu:fakeb:3)" in checked.problems[0]


def test_memory_on_one_node_and_gpus_on_another_are_refused() -> None:
    checked = against(gres="gpu:fakea:1", mem="6G")
    assert checked.problems == ["host h: no one node of partition test has all the host asks, and a task runs on "
                                "one node: nodea lacks mem 6G (it has 4096 MB); nodeb lacks gres gpu:fakea:1 (it has "
                                "gpu:fakeb:3)"]
    assert against(gres="gpu:fakeb:1", mem="6G").problems == []


def test_a_feature_no_node_of_the_cluster_has_is_named() -> None:
    checked = against(constraint="ib&nosuch")
    assert checked.problems == ["host h: constraint ib&nosuch: no node of the cluster has the feature(s) nosuch "
                                "(sbatch refuses it: Invalid feature specification); the nodes of partition test "
                                "have: nodea has fast, ib; nodeb has big, ib"]


def test_a_partition_is_checked_alone() -> None:
    checked = against(partition="cpu", constraint="fast")
    assert checked.problems == ["host h: constraint fast: no node of partition cpu satisfies it; nodec has no "
                                "features"]


def test_counts_the_partition_cannot_meet_are_refused_and_others_left_to_slurm() -> None:
    """`fast*2` was refused by Slurm (one node has fast); `[fast*1&big*1]` ran on nodea and nodeb, two nodes for
    a one-task job: which nodes is Slurm's choice, said, not guessed."""
    assert against(constraint="fast*2").problems == [
        "host h: constraint fast*2: fast*2 asks for 2 node(s) with fast, and partition test has 1 (nodea); nodea "
        "has fast, ib; nodeb has big, ib"]
    for counted in ("[fast*1&big*1]", "fast|big*1", "ib*2"):
        checked = against(constraint=counted)
        assert checked.problems == [] and len(checked.notes) == 1, checked
        assert "which nodes that will be is not evaluated here (sbatch decides)" in checked.notes[0]


ACCOUNTING = REPO / "tests" / "data" / "slurm_accounting"


@pytest.mark.parametrize(("account", "qos", "wrong"), [
    ("labx", "high", ""),
    ("laby", "high", "account laby is not one of root's associations (they are: labx, root)"),
    ("labx", "low", "qos low is not allowed to root's association with account labx (it allows: high, normal)"),
    ("labx", "nosuch", "qos nosuch is not a QOS of this cluster (it has: high, low, normal)"),
    ("nosuch", None, "account nosuch is not one of root's associations (they are: labx, root)"),
])
def test_account_and_qos_are_judged_as_sbatch_judged_them(account: str, qos: str | None, wrong: str) -> None:
    """Against a real slurmdbd's answers (tests/data/slurm_accounting): each pair sbatch refused is named, the
    one it took is not, and the cluster enforces associations, so a wrong one refuses the fleet."""
    config = config_settings((ACCOUNTING / "scontrol-show-config.txt").read_text())
    assert config["AccountingStorageType"] == "accounting_storage/slurmdbd" and enforces_associations(config)
    host = Host.model_validate({"name": "h", "via": "slurm", "profiles": ["p.yaml"], "run_root": "runs",
                                "account": account, "qos": qos})
    associations = (ACCOUNTING / "sacctmgr-show-assoc.txt").read_text().splitlines()
    known_qos = set((ACCOUNTING / "sacctmgr-show-qos.txt").read_text().split())
    assert "; ".join(account_words(host, "root", associations, known_qos)) == wrong
    flags = f" --qos={qos}" if qos else ""
    said = (ACCOUNTING / "sbatch.txt").read_text().split(f"--account={account}{flags} --wrap true\n")[1]
    assert said.startswith("exit 0" if not wrong else "exit 1: sbatch: error: Batch job submission failed: Invalid")


def test_without_enforcement_a_wrong_account_is_not_refused() -> None:
    assert not enforces_associations({"AccountingStorageEnforce": "none"})
    assert not enforces_associations({})
    assert enforces_associations({"AccountingStorageEnforce": "safe"})
