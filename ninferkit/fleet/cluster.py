"""What the Slurm cluster offers against what each Slurm host asks, before anything is submitted: sbatch would
find a missing partition, GRES, feature, memory, account or QOS only once an earlier array was queued.

A task runs on one node, so a host's requests are checked node by node: a partition where one node has the GPUs
and another the features runs nothing (each node is named with what it lacks). The constraint is read as Slurm
reads it (`constraint.py`); the account and QOS against Slurm's accounting database where the cluster keeps one
(`sacctmgr`), and where it keeps none the dry run says they cannot be checked: sbatch decides.
"""

from __future__ import annotations

import getpass
from collections.abc import Sequence
from dataclasses import dataclass, field

from ninferkit.fleet.constraint import ConstraintSyntax, Expression, Term, parse, spelled
from ninferkit.fleet.slurm import SlurmError, slurm_command, slurm_config, unreachable
from ninferkit.fleet.spec import Host

SINFO = ["sinfo", "-h", "-N", "-o", "%N|%P|%G|%f|%m"]
"""One line per node and partition: name, partition (`*`: the default), GRES, features, memory in MB."""


@dataclass
class Checked:
    """What refuses the fleet (`problems`) and what the user should know but Slurm decides (`notes`)."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, other: Checked) -> None:
        self.problems += other.problems
        self.notes += other.notes


@dataclass(frozen=True)
class Node:
    gres: dict[str, int]
    features: frozenset[str]
    memory_mb: int


@dataclass(frozen=True)
class Cluster:
    """sinfo's nodes, each partition's members, and the default partition."""

    nodes: dict[str, Node]
    partitions: dict[str, list[str]]
    default: str | None


def read_sinfo(text: str) -> Cluster:
    """The cluster from `SINFO`'s output."""
    nodes: dict[str, Node] = {}
    partitions: dict[str, list[str]] = {}
    default: str | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        node, partition, gres, offered, memory = (line.split("|") + ["", "", "", "", ""])[:5]
        if partition.endswith("*"):
            partition = default = partition[:-1]
        partitions.setdefault(partition, [])
        if node not in partitions[partition]:
            partitions[partition].append(node)
        nodes[node] = Node(gres_counts(gres), frozenset(set(offered.split(",")) - {"(null)", ""}),
                           int(memory) if memory.isdigit() else 0)
    return Cluster(nodes, partitions, default)


def check_cluster(hosts: Sequence[Host]) -> Checked:
    """Every Slurm host against the cluster (sinfo, pyxis, accounting): problems refuse the fleet, notes are said."""
    checked = Checked()
    if not hosts:
        return checked
    try:
        shown = slurm_command(SINFO)
    except SlurmError as exc:
        return Checked([f"hosts {', '.join(host.name for host in hosts)}: {exc}"])
    if shown.returncode != 0:
        return Checked([f"hosts {', '.join(host.name for host in hosts)}: {unreachable(SINFO, shown)}"])
    cluster = read_sinfo(shown.stdout)
    checked.problems += container_problems(hosts)
    for host in hosts:
        checked.add(host_against(host, cluster))
    try:
        checked.add(accounting(hosts))
    except SlurmError as exc:  # slurmdbd down: slurmctld may still take the job on what it cached
        checked.notes.append(f"hosts {', '.join(host.name for host in hosts if host.account or host.qos)}: account "
                             f"and qos could not be checked ({exc}); sbatch decides")
    return checked


def host_against(host: Host, cluster: Cluster) -> Checked:
    """One Slurm host's partition, GRES, constraint and memory against the cluster's nodes; a request no node of
    the partition meets is a problem, and so are requests each met by some node but never all by one."""
    checked = Checked()
    wanted = host.partition or cluster.default
    if wanted is None or wanted not in cluster.partitions:
        checked.problems.append(
            f"host {host.name}: the cluster has no partition {wanted!r} (it has "
            f"{', '.join(sorted(cluster.partitions)) or 'none'})" if host.partition else
            f"host {host.name}: the cluster has no default partition; give the host a partition")
        return checked
    members = cluster.partitions[wanted]
    lacking: dict[str, list[str]] = {node: [] for node in members}
    if host.gres is not None:
        name, kind, count = host.gres.split(":")
        for node in members:
            if cluster.nodes[node].gres.get(f"{name}:{kind}", 0) < int(count):
                lacking[node].append(f"gres {host.gres} (it has {_gres_words(cluster.nodes[node].gres)})")
        if all(lacking.values()):
            have = "; ".join(f"{node}: {_gres_words(cluster.nodes[node].gres)}" for node in members)
            checked.problems.append(f"host {host.name}: gres {host.gres}: no node of partition {wanted} has "
                                    f"{count} {name} of type {kind} ({have})")
    if host.constraint is not None:
        checked.add(constraint_against(host.name, host.constraint, cluster, wanted, lacking))
    if host.mem is not None:
        short = [node for node in members if mem_mb(host.mem) > cluster.nodes[node].memory_mb]
        for node in short:
            lacking[node].append(f"mem {host.mem} (it has {cluster.nodes[node].memory_mb} MB)")
        if members and len(short) == len(members):
            checked.problems.append(f"host {host.name}: mem {host.mem}: no node of partition {wanted} has that much "
                                    f"(the most: {max(cluster.nodes[node].memory_mb for node in members)} MB)")
    if not checked.problems and members and all(lacking.values()):
        checked.problems.append(f"host {host.name}: no one node of partition {wanted} has all the host asks, and a "
                                "task runs on one node: " + "; ".join(f"{node} lacks {' and '.join(lacks)}"
                                                                      for node, lacks in lacking.items()))
    return checked


def constraint_against(host: str, constraint: str, cluster: Cluster, partition: str,
                       lacking: dict[str, list[str]]) -> Checked:
    """Which nodes of the partition satisfy the constraint (each other node gets it in `lacking`); a problem
    when none does, a feature the cluster lacks or a form sbatch refuses; a note for node counts, which Slurm
    meets across several nodes and which are not evaluated node by node."""
    said = f"host {host}: constraint {constraint}"
    try:
        expression = parse(constraint)
    except ConstraintSyntax as exc:
        return Checked([f"host {host}: constraint {exc}; sbatch would refuse it"])
    members = cluster.partitions[partition]
    offered = set().union(*(cluster.nodes[node].features for node in cluster.nodes))
    unknown = sorted(expression.names() - offered)
    if unknown:
        return Checked([f"{said}: no node of the cluster has the feature(s) {', '.join(unknown)} (sbatch refuses "
                        f"it: Invalid feature specification); the nodes of partition {partition} have: "
                        f"{_features(cluster, members)}"])
    reading = spelled(expression)
    read_as = f" (Slurm reads it left to right: {reading})" if reading != constraint.replace(",", "&") else ""
    counted = expression.counted()
    if counted:
        return counts_against(said, expression, counted, cluster, partition)
    fits = [node for node in members if expression.holds(set(cluster.nodes[node].features))]
    if not fits:
        return Checked([f"{said}: no node of partition {partition} satisfies it{read_as}; "
                        f"{_features(cluster, members)}"])
    for node in members:
        if node not in fits:
            lacking[node].append(f"constraint {constraint}{read_as} (it has "
                                 f"{', '.join(sorted(cluster.nodes[node].features)) or 'no features'})")
    return Checked()


def counts_against(said: str, expression: Expression, counted: list[tuple[str, Term]], cluster: Cluster,
                   partition: str) -> Checked:
    """A constraint with node counts (`fast*2`, `[a*1&b*2]`): Slurm gives the job as many nodes as the counts
    ask, and a fleet task runs on the first. Where every count must be met (no OR beside it), a count the
    partition has too few nodes for is a problem; otherwise it is Slurm's to place, and said."""
    members = cluster.partitions[partition]
    if _all_and(expression):
        for text, term in counted:
            bare = Term(term.name, term.group, 0)
            having = [node for node in members if Expression((bare,), ()).holds(set(cluster.nodes[node].features))]
            if len(having) < term.count:
                return Checked([f"{said}: {text} asks for {term.count} node(s) with {spelled(bare)}, and partition "
                                f"{partition} has {len(having)} ({', '.join(having) or 'none'}); "
                                f"{_features(cluster, members)}"])
    return Checked(notes=[f"{said} counts nodes ({', '.join(text for text, _ in counted)}): Slurm gives the job the "
                          "nodes the counts ask for and the task runs on the first of them; which nodes that will be "
                          "is not evaluated here (sbatch decides)"])


def _all_and(expression: Expression) -> bool:
    return all(op == "&" for op in expression.ops) and all(
        _all_and(term) if isinstance(term, Expression) else term.group is None or _all_and(term.group)
        for term in expression.terms)


def _features(cluster: Cluster, members: Sequence[str]) -> str:
    return "; ".join(f"{node} has {', '.join(sorted(cluster.nodes[node].features)) or 'no features'}"
                     for node in members)


def accounting(hosts: Sequence[Host]) -> Checked:
    """The hosts' account and QOS against Slurm's accounting database (`sacctmgr`), where the cluster keeps one
    (`scontrol show config`: AccountingStorageType other than none). Without one they cannot be checked: a note
    says so (sbatch takes the account as given and drops the QOS). With one, an account that is not one of the
    user's associations, or a QOS the database lacks or the association does not allow, is a problem where
    Slurm enforces associations (AccountingStorageEnforce), and a note where it does not."""
    asking = [host for host in hosts if host.account or host.qos]
    if not asking:
        return Checked()
    config = slurm_config()
    storage = config.get("AccountingStorageType", "")
    if not storage or storage.endswith("/none"):
        return Checked(notes=[
            f"host {host.name}: {_asked(host)}: this cluster keeps no accounting database (AccountingStorageType="
            f"{storage or 'unset'}), so they cannot be checked before submitting; sbatch decides (without one, "
            "Slurm keeps the account as given and drops the QOS)" for host in asking])
    user = getpass.getuser()
    associations = _sacctmgr(["show", "assoc", "where", f"users={user}", "format=Account,Partition,QOS"])
    known_qos = {line.split("|")[0] for line in _sacctmgr(["show", "qos", "format=Name"])}
    enforce = config.get("AccountingStorageEnforce", "none")
    checked = Checked()
    for host in asking:
        wrong = account_words(host, user, associations, known_qos)
        if wrong:
            words = f"host {host.name}: {'; '.join(wrong)}"
            if enforces_associations(config):
                checked.problems.append(f"{words} (sacctmgr; sbatch refuses it: AccountingStorageEnforce={enforce})")
            else:
                checked.notes.append(f"{words} (sacctmgr); this cluster does not enforce associations "
                                     f"(AccountingStorageEnforce={enforce or 'none'}), so sbatch will take it")
    return checked


def account_words(host: Host, user: str, associations: list[str], known_qos: set[str]) -> list[str]:
    """What is wrong with a host's account and QOS, from `sacctmgr -nP show assoc` lines (Account|Partition|QOS)
    and the QOS names the database has."""
    rows = [(line.split("|") + ["", "", ""])[:3] for line in associations]
    if host.partition is not None:
        rows = [row for row in rows if row[1] in ("", host.partition)]
    wrong = []
    accounts = sorted({row[0] for row in rows})
    if host.account and host.account not in accounts:
        wrong.append(f"account {host.account} is not one of {user}'s associations"
                     f"{' in partition ' + host.partition if host.partition else ''} (they are: "
                     f"{', '.join(accounts) or 'none'})")
    if host.qos and host.qos not in known_qos:
        wrong.append(f"qos {host.qos} is not a QOS of this cluster (it has: {', '.join(sorted(known_qos)) or 'none'})")
    elif host.qos:
        allowed = {qos for row in rows if not host.account or row[0] == host.account for qos in row[2].split(",")
                   if qos}
        if allowed and host.qos not in allowed:
            wrong.append(f"qos {host.qos} is not allowed to {user}'s association"
                         f"{' with account ' + host.account if host.account else ''} (it allows: "
                         f"{', '.join(sorted(allowed))})")
    return wrong


def _asked(host: Host) -> str:
    return ", ".join(f"{name} {value}" for name, value in (("account", host.account), ("qos", host.qos)) if value)


def _sacctmgr(words: list[str]) -> list[str]:
    argv = ["sacctmgr", "-nP", *words]
    done = slurm_command(argv)
    if done.returncode != 0:
        raise unreachable(argv, done)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def enforces_associations(config: dict[str, str]) -> bool:
    """Whether sbatch refuses an account outside the user's associations and a QOS they do not allow
    (AccountingStorageEnforce with associations, or limits, qos or safe, which imply it)."""
    enforce = set(config.get("AccountingStorageEnforce", "none").lower().split(","))
    return bool(enforce & {"associations", "limits", "qos", "safe"})


def mem_mb(given: str) -> int:
    """sbatch's --mem as megabytes: a bare number is MB; K, M, G, T suffixes (validated by spec.Host)."""
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    unit = given[-1] if given[-1] in scale else "M"
    return int(int(given.rstrip("KMGT")) * scale[unit])


def container_problems(hosts: Sequence[Host]) -> list[str]:
    """Hosts that ask for a container image on a submit host whose srun has no `--container-image` (the option
    pyxis, the enroot SPANK plugin, adds): without it the batch script's srun would refuse the option only once
    the job runs."""
    wanting = [host for host in hosts if host.container_image]
    if not wanting:
        return []
    shown = slurm_command(["srun", "--help"])
    if "--container-image" in shown.stdout + shown.stderr:
        return []
    if shown.returncode != 0:
        said = (shown.stderr.strip() or shown.stdout.strip() or "no output").splitlines()[-1]
        return [f"host {host.name}: container_image: `srun --help` failed here ({said}), so pyxis cannot be "
                "confirmed" for host in wanting]
    return [f"host {host.name}: container_image {host.container_image} needs pyxis (the enroot plugin for "
            "Slurm), and `srun --help` here has no --container-image: install enroot and pyxis on the cluster, or "
            "remove container_image to run the task on the node itself" for host in wanting]


def gres_counts(field: str) -> dict[str, int]:
    """sinfo's %G (`gpu:fakea:3(S:0),gpu:fakeb:1`) as {"gpu:fakea": 3, "gpu:fakeb": 1}."""
    counts: dict[str, int] = {}
    for part in field.split(","):
        pieces = part.split("(")[0].split(":")
        if len(pieces) == 3 and pieces[2].isdigit():
            counts[f"{pieces[0]}:{pieces[1]}"] = counts.get(f"{pieces[0]}:{pieces[1]}", 0) + int(pieces[2])
    return counts


def _gres_words(counts: dict[str, int]) -> str:
    return ", ".join(f"{key}:{value}" for key, value in counts.items()) or "no typed GRES"
