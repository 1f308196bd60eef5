"""Real daemons the fleet tests drive: a one-node Slurm cluster (munged, slurmctld, slurmd from Debian's
slurm-wlm and munge) and an sshd on loopback with a key made for the test (openssh-server). scripts/test
installs the packages; nothing of them runs as a service in CI, so each is started here, in a folder of
its own, and stopped by its process id at the end."""

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
"""Three stand-in devices behind the typed GRES gpu:fake: Slurm counts and hands them out by type as it would
GPUs (TaskPlugin=task/none: nothing is fenced off, so any file that exists serves)."""


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


@dataclass(frozen=True)
class SlurmCluster:
    conf: Path
    env: dict[str, str]
    """What a Slurm command needs to find this cluster: SLURM_CONF."""


@contextmanager
def slurm_cluster(folder: Path, gres_type: str = "fake") -> Iterator[SlurmCluster]:
    """munged + slurmctld + slurmd, one node (this machine) with GRES gpu:<type>:3, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    node = socket.gethostname()
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_socket = folder / "munge.socket"
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    ctld_port, slurmd_port = free_port(), free_port()
    cpus = os.cpu_count() or 1
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=ninferkit-test",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        "MpiDefault=none",
        "ReturnToService=2",
        "MinJobAge=3600",  # finished jobs stay in scontrol's view (this cluster has no accounting database)
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/backfill",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} Gres=gpu:{gres_type}:{len(GRES_FILES)} State=UNKNOWN",
        f"PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4",
        "",
    ]))
    (folder / "gres.conf").write_text(
        f"NodeName={node} Name=gpu Type={gres_type} File={','.join(GRES_FILES)}\n")
    (folder / "cgroup.conf").write_text("")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    processes: list[subprocess.Popen[bytes]] = []
    try:
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
        slurmd_log = folder / "slurmd.log"
        processes.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf)], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout
            return out.strip() in ("idle", "mix", "alloc")

        _wait(idle, "slurmd (node idle)", slurmd_log)
        yield SlurmCluster(conf, {"SLURM_CONF": str(conf)})
    finally:
        _stop(processes)


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
