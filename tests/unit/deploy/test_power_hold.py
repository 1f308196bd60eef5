"""A power variant's limit is held for its launch and each card's own limit comes back on every way out (issue 39).

No GPU or driver here, so nvidia-smi is a stand-in (as in test_deploy.py's `probe --apply` tests): a small program
on PATH that records each call and keeps each card's limit in a file, answering the queries ninferkit sends in
nvidia-smi's `--format=csv,noheader,nounits` shape. What is tested is ninferkit's side: the commands planned, their
order, and the restore on every exit path. The stand-in's answers are held byte for byte to what a real nvidia-smi
printed for the same queries (tests/data/host_evidence_h100, an H100). Not tested (the GPU machine's settings are not
ours to change): that a real card takes `-pl` and that the limits nvidia-smi reports are those the card applies.

Profile: params/ninfer-rtx3090-groupwise.yaml's `w350` variant (seed 003: 350 W against the profile's 300 W), on
GPU 0 as the profile serves; a second card is selected by `serve.gpu_devices: [0, 1]` to show each card gets its own
limit back.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from ninferkit.deploy.actions import Host
from ninferkit.deploy.power import held_limit, read_limits, restore_argv
from ninferkit.errors import HostActionFailed, ToolMissing
from ninferkit.params import load_profile
from ninferkit.params.profile import Profile
from ninferkit.rundir.identity import variant_profile
from tests.conftest import REPO

PROFILE = REPO / "params" / "ninfer-rtx3090-groupwise.yaml"
STUB = '''#!{python}
import json, sys
state_path, calls_path = {state!r}, {calls!r}
args = sys.argv[1:]
open(calls_path, "a").write(" ".join(args) + "\\n")
state = json.load(open(state_path))
cards = args[args.index("-i") + 1].split(",") if "-i" in args else sorted(state["limits"])
if "-pl" in args:
    watts = float(args[args.index("-pl") + 1])
    if watts in state.get("refuse", []):
        print("Provided power limit %.2f W is not a valid power limit" % watts)
        sys.exit(4)
    for card in cards:
        state["limits"][card] = min(watts, state.get("max", 1e9))
    json.dump(state, open(state_path, "w"))
elif "--query-gpu=index,power.limit" in args:
    print("\\n".join("%s, %.2f" % (card, state["limits"][card]) for card in cards))
elif "--query-gpu=power.limit" in args:
    print("\\n".join("%.2f" % state["limits"][card] for card in cards))
'''


def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limits: dict[str, float], **rules: object) -> Path:
    """nvidia-smi's stand-in on PATH, its cards at `limits`; returns its state file."""
    bin_dir, state, calls = tmp_path / "bin", tmp_path / "state.json", tmp_path / "calls"
    bin_dir.mkdir()
    state.write_text(json.dumps({"limits": limits, **rules}))
    stub = bin_dir / "nvidia-smi"
    stub.write_text(STUB.format(python=sys.executable, state=str(state), calls=str(calls)))
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return state


def w350(devices: str = "[0]") -> Profile:
    profile = load_profile(PROFILE, [f"serve.gpu_devices={devices}"]).profile
    return variant_profile(profile, next(each for each in profile.variants if each.name == "w350"))


def limits(state: Path) -> dict[str, float]:
    return dict(json.loads(state.read_text())["limits"])


def test_the_limit_is_held_for_the_block_then_each_card_gets_its_own_back(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    state = stand_in(tmp_path, monkeypatch, {"0": 300.0, "1": 250.0})
    said: list[str] = []
    with held_limit(w350("[0, 1]"), Host(said.append)):
        assert limits(state) == {"0": 350.0, "1": 350.0}
    assert limits(state) == {"0": 300.0, "1": 250.0}
    assert (tmp_path / "calls").read_text().splitlines() == [
        "-i 0,1 --query-gpu=index,power.limit --format=csv,noheader,nounits",
        "-i 0,1 -pm 1", "-i 0,1 -pl 350", "-i 0,1 --query-gpu=power.limit --format=csv,noheader,nounits",
        "-i 0 -pl 300.00", "-i 1 -pl 250.00", "-i 0,1 --query-gpu=index,power.limit --format=csv,noheader,nounits"]
    assert said[-3:] == ["power limit of GPU 0 back to 300.00 W: nvidia-smi -i 0 -pl 300.00",
                         "power limit of GPU 1 back to 250.00 W: nvidia-smi -i 1 -pl 250.00",
                         "read the limits back: nvidia-smi -i 0,1 --query-gpu=index,power.limit "
                         "--format=csv,noheader,nounits"]


@pytest.mark.parametrize("raised", [RuntimeError("the variant's cell failed"), KeyboardInterrupt()])
def test_a_block_that_fails_or_is_interrupted_still_gives_the_limit_back(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         raised: BaseException) -> None:
    state = stand_in(tmp_path, monkeypatch, {"0": 300.0})
    with pytest.raises(type(raised)), held_limit(w350(), Host(lambda line: None)):
        assert limits(state) == {"0": 350.0}
        raise raised
    assert limits(state) == {"0": 300.0}


def test_a_limit_the_card_did_not_take_is_refused_and_the_old_one_restored(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The card clamps 350 W to its 320 W maximum: apply_now's read-back refuses, after `-pl` changed the card."""
    state = stand_in(tmp_path, monkeypatch, {"0": 300.0}, max=320.0)
    entered = False
    with pytest.raises(HostActionFailed, match=r"reports power limit\(s\) \[320.0\] W after -pl 350"):
        with held_limit(w350(), Host(lambda line: None)):
            entered = True
    assert not entered and limits(state) == {"0": 300.0}


def test_a_restore_that_fails_says_so_with_the_commands_to_run_by_hand(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    state = stand_in(tmp_path, monkeypatch, {"0": 300.0}, refuse=[300.0])
    with pytest.raises(HostActionFailed) as failed, held_limit(w350(), Host(lambda line: None)):
        pass
    assert "not restored after the variant" in str(failed.value)
    assert "restore them by hand: nvidia-smi -i 0 -pl 300.00" in str(failed.value)
    assert limits(state) == {"0": 350.0}  # what the stand-in was left at: the error is the truth
    state.write_text(json.dumps({"limits": {"0": 300.0}, "refuse": [300.0]}))
    with pytest.raises(RuntimeError) as first, held_limit(w350(), Host(lambda line: None)):
        raise RuntimeError("the cell's own failure")
    assert str(first.value) == "the cell's own failure"  # the block's error stays the error, the restore's a note
    assert any("restore them by hand" in note for note in first.value.__notes__)


def test_without_nvidia_smi_nothing_runs_and_the_error_says_why(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on it (nor on this machine: no driver)
    assert shutil.which("nvidia-smi") is None
    entered = False
    with pytest.raises(ToolMissing, match="nvidia-smi is not installed"), held_limit(w350(), Host(lambda line: None)):
        entered = True
    assert not entered


def test_the_restore_commands_are_one_per_card() -> None:
    assert restore_argv({"0": "300.00", "3": "250.00"}) == [["nvidia-smi", "-i", "0", "-pl", "300.00"],
                                                           ["nvidia-smi", "-i", "3", "-pl", "250.00"]]


H100 = REPO / "tests" / "data" / "host_evidence_h100"


@pytest.mark.parametrize(("query", "recorded"), [
    ("--query-gpu=index,power.limit", "nvidia_smi_query_index_power_limit.txt"),
    ("--query-gpu=power.limit", "nvidia_smi_query_i0_power_limit.txt"),
])
def test_the_stand_in_answers_in_the_shape_a_real_nvidia_smi_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     query: str, recorded: str) -> None:
    """The stand-in's answers are held to a real nvidia-smi's (tests/data/host_evidence_h100: an H100 80GB, driver
    580.159.04, at its 700 W default), byte for byte, so the tests above read the text a card's driver prints."""
    stand_in(tmp_path, monkeypatch, {"0": 700.0})
    select = ["-i", "0"] if recorded == "nvidia_smi_query_i0_power_limit.txt" else []
    out = Host(lambda line: None).act("ask", ["nvidia-smi", *select, query, "--format=csv,noheader,nounits"])
    assert out == (H100 / recorded).read_text()


def test_the_limits_and_their_restore_are_read_from_a_real_nvidia_smis_answer(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The H100's own answer to the query held_limit sends first, replayed: read as card 0 at 700.00 W, and the
    restore command is what nvidia-smi takes back (`-pl` with its own figure)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    replay = bin_dir / "nvidia-smi"
    replay.write_text(f"#!/bin/sh\ncat {H100 / 'nvidia_smi_query_index_power_limit.txt'}\n")
    replay.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    before = read_limits(w350(), Host(lambda line: None), "read the limits before the variant")
    assert before == {"0": "700.00"}
    assert restore_argv(before) == [["nvidia-smi", "-i", "0", "-pl", "700.00"]]
