"""Real daemons the fleet tests drive: a two-node Slurm cluster (munged, slurmctld and two slurmd from Debian's
slurm-wlm and munge, each slurmd in a network namespace of its own) and an sshd on loopback with a key made for
the test (openssh-server). scripts/test installs the packages; nothing of them runs as a service in CI, so each
is started here, in a folder of its own, and stopped by its process id at the end."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import free_port

GRES_FILES = ("/dev/null", "/dev/zero", "/dev/full")
"""Three stand-in devices behind each node's typed GRES (gpu:fakea, gpu:fakeb): Slurm counts and hands them out
by type as it would GPUs (TaskPlugin=task/none: nothing is fenced off, so any file that exists serves)."""


def missing(*programs: str) -> list[str]:
    return [program for program in programs if shutil.which(program) is None
            and not Path("/usr/sbin", program).exists()]


def _wait(check: object, what: str, log: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.2)
    text = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
    raise RuntimeError(f"{what} did not come up within {timeout_s:.0f} s; {log}:\n{text}")


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in reversed(processes):
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


NODES = (("nodea", "fakea", "ib,fast"), ("nodeb", "fakeb", "ib,big"))
"""The test cluster's nodes, the GPU type each offers (gpu:<type>:3) and its features (for --constraint): a
fleet's hosts that ask for different types must land on different nodes, and `fast&big` names features of the
cluster that no one node has (the pair together would satisfy it, which Slurm never counts)."""


def namespaces_missing() -> str | None:
    """Why this machine cannot give each slurmd a network namespace of its own (None: it can). Each node needs
    its own address: Debian's slurmd is built without --enable-multiple-slurmd, so two on one network stack
    are not an option, and a lost node is only real when its slurmd is cut off alone."""
    if os.geteuid() != 0:
        return "network namespaces for the two Slurm nodes need root"
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        return "network namespaces for the two Slurm nodes need `ip` (iproute2) and `nsenter` (util-linux)"
    probe = f"nkprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class SlurmCluster:
    """A running cluster: its conf, the environment a Slurm command needs (SLURM_CONF), and its nodes' slurmd,
    which a test may kill (a lost node) and start again (the node returns)."""

    def __init__(self, folder: Path, conf: Path, namespaces: dict[str, str]) -> None:
        self.folder, self.conf, self.namespaces = folder, conf, namespaces
        self.env = {"SLURM_CONF": str(conf)}
        self.slurmd: dict[str, subprocess.Popen[bytes]] = {}

    def log(self, node: str) -> Path:
        return self.folder / f"slurmd-{node}.log"

    def start_node(self, node: str) -> None:
        """Start `node`'s slurmd in its namespace and wait until Slurm has it back in service."""
        self.slurmd[node] = subprocess.Popen(
            # nsenter, not `ip netns exec`: that one mounts a fresh /sys, without the cgroup tree slurmd reads
            ["nsenter", f"--net=/run/netns/{self.namespaces[node]}", "slurmd", "-D", "-N", node, "-f", str(self.conf)],
            env={**os.environ, **self.env}, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

        def in_service() -> bool:
            now = self.node_state(node)
            if now == "down":  # answering, but set down by hand (a lost node declared): returned as an admin does
                subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                               env={**os.environ, **self.env}, capture_output=True)
            return now in ("idle", "mix", "alloc")

        _wait(in_service, f"slurmd of {node} (node in service)", self.log(node), 60)

    def kill_node(self, node: str) -> None:
        """SIGKILL `node`'s slurmd: the node stops answering; the job steps it started run on (slurmstepd)."""
        process = self.slurmd.pop(node)
        process.kill()
        process.wait()

    def node_state(self, node: str) -> str:
        return subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t"], env={**os.environ, **self.env},
                              capture_output=True, text=True).stdout.strip()


def _net(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


@contextmanager
def slurm_cluster(folder: Path) -> Iterator[SlurmCluster]:
    """munged + slurmctld on this machine and one slurmd per node of NODES, each in a network namespace of its
    own (its own address, its own loopback: a task's llama-server there is the node's), joined to this
    machine by a veth pair; everything in `folder`, torn down (namespaces and links included) at the end."""
    folder.mkdir(parents=True, exist_ok=True)
    tag = f"nk{os.getpid() % 100_000}"
    subnet = 16 + (os.getpid() % 100) * 2
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_socket = folder / "munge.socket"
    (folder / "state").mkdir(exist_ok=True)
    ctld_port, slurmd_port = free_port(), free_port()
    cpus = os.cpu_count() or 1
    controller = f"10.213.{subnet}.1"  # this machine's end of the first node's link
    namespaces = {node: f"{tag}-{node}" for node, _, _ in NODES}
    addresses = {node: f"10.213.{subnet + place}.2" for place, (node, _, _) in enumerate(NODES)}
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=ninferkit-test",
        f"SlurmctldHost={socket.gethostname()}({controller})",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool-%n'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdTimeout=5",  # a lost node is declared within seconds, not Slurm's default 5 minutes
        "MinJobAge=3600",  # finished jobs stay in scontrol's view (this cluster has no accounting database)
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/backfill",
        *(f"NodeName={node} NodeAddr={addresses[node]} CPUs={cpus} RealMemory=4096 Features={features} "
          f"Gres=gpu:{kind}:{len(GRES_FILES)} State=UNKNOWN" for node, kind, features in NODES),
        f"PartitionName=test Nodes={','.join(node for node, _, _ in NODES)} Default=YES MaxTime=INFINITE State=UP "
        "OverSubscribe=FORCE:4",
        "",
    ]))
    (folder / "gres.conf").write_text("".join(f"NodeName={node} Name=gpu Type={kind} File={','.join(GRES_FILES)}\n"
                                              for node, kind, _ in NODES))
    (folder / "cgroup.conf").write_text("")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    processes: list[subprocess.Popen[bytes]] = []
    cluster = SlurmCluster(folder, conf, namespaces)
    made: list[tuple[str, str]] = []
    try:
        for place, (node, _, _) in enumerate(NODES):
            outside, inside = f"{tag}{place}h", f"{tag}{place}n"
            _net("netns", "add", namespaces[node])
            made.append(("netns", namespaces[node]))
            _net("link", "add", outside, "type", "veth", "peer", "name", inside)
            made.append(("link", outside))
            _net("link", "set", inside, "netns", namespaces[node])
            _net("addr", "add", f"10.213.{subnet + place}.1/24", "dev", outside)
            _net("link", "set", outside, "up")
            for argv in (["addr", "add", f"{addresses[node]}/24", "dev", inside], ["link", "set", inside, "up"],
                         ["link", "set", "lo", "up"], ["route", "add", "default", "via",
                                                      f"10.213.{subnet + place}.1"]):
                _net("-n", namespaces[node], *argv)
        munge_log = folder / "munged.log"
        processes.append(subprocess.Popen(
            ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={munge_socket}",
             f"--pid-file={folder / 'munged.pid'}", f"--log-file={munge_log}", f"--seed-file={folder / 'munge.seed'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        _wait(munge_socket.exists, "munged", munge_log)
        ctld_log = folder / "slurmctld.log"
        processes.append(subprocess.Popen(["slurmctld", "-D", "-c", "-i", "-f", str(conf)], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        _wait(lambda: subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True)
              .stdout.count("UP") > 0, "slurmctld", ctld_log)
        for node, _, _ in NODES:
            cluster.start_node(node)
        yield cluster
    finally:
        _stop(list(cluster.slurmd.values()))
        _stop(processes)
        for kind, name in reversed(made):
            subprocess.run(["ip", kind, "del", name], capture_output=True)


@dataclass(frozen=True)
class SshServer:
    port: int
    user: str
    key: Path
    """The client's private key, made for this test; its public half is the only authorized key."""
    known_hosts: Path


@contextmanager
def ssh_server(folder: Path) -> Iterator[SshServer]:
    """sshd on 127.0.0.1:<free port>, accepting only a key made here, for the current user."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    host_key, client_key = folder / "host_ed25519", folder / "client_ed25519"
    for key in (host_key, client_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    authorized = folder / "authorized_keys"
    shutil.copy(f"{client_key}.pub", authorized)
    authorized.chmod(0o600)
    port = free_port()
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {Path(f'{host_key}.pub').read_text().split(' ', 2)[0]} "
                           f"{Path(f'{host_key}.pub').read_text().split(' ', 2)[1]}\n")
    config = folder / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", f"AuthorizedKeysFile {authorized}",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password", "UsePAM no", "StrictModes no", f"PidFile {folder / 'sshd.pid'}",
        "Subsystem sftp internal-sftp", "",
    ]))
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
    log = folder / "sshd.log"
    with log.open("wb") as output:
        process = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)], stdout=output,
                                   stderr=subprocess.STDOUT)
    try:
        def listening() -> bool:
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", port)) == 0

        _wait(listening, "sshd", log)
        import getpass
        yield SshServer(port, getpass.getuser(), client_key, known_hosts)
    finally:
        _stop([process])
