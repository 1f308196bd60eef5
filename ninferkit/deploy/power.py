"""The GPU settings the reports set by hand, applied when asked: persistence mode, the power limit, the boot unit.

Seed 000 §1.1 runs `nvidia-smi -pm 1 && nvidia-smi -pl 200` and, since `-pl` does not survive a reboot, §3 installs
a script and a oneshot unit that re-apply it at boot (engines/host.py writes both). Nothing here runs unless
asked (`ninferkit probe --apply`, `ninferkit deploy`); each command is printed before it runs (deploy/actions.py),
and each result is read back: the limit nvidia-smi reports, the unit's enabled state.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ninferkit.deploy.actions import Host
from ninferkit.engines.host import SCRIPT, SCRIPT_PATH, UNIT, power_limit_files
from ninferkit.errors import HostActionFailed
from ninferkit.params.profile import Profile

UNITS = Path("/etc/systemd/system")
TOLERANCE_W = 1.0


def refusal(profile: Profile, *, boot_unit: bool) -> str | None:
    """Why the profile's GPU settings cannot be applied here (None: they can); asked before any change."""
    if profile.gpu.power_limit_w is None:
        return "the profile sets no gpu.power_limit_w: there is nothing to apply"
    if os.geteuid() != 0:
        return "setting persistence mode and the power limit needs root: run it with sudo"
    if shutil.which("nvidia-smi") is None:
        return ("nvidia-smi is not installed: install the NVIDIA driver first (seed 000 §1.1: "
                "nvidia-driver-580-server for Volta), then apply")
    if boot_unit and not Path("/run/systemd/system").is_dir():
        return "systemd is not this machine's init (/run/systemd/system is missing): the boot unit cannot be enabled"
    return None


def apply_now(profile: Profile, host: Host) -> list[float]:
    """`nvidia-smi -pm 1` then `-pl WATTS` on the profile's GPUs; the limits nvidia-smi reports afterwards.
    HostActionFailed when one of them is not the profile's."""
    watts = profile.gpu.power_limit_w
    assert watts is not None
    select = ["-i", ",".join(map(str, profile.serve.gpu_devices))] if profile.serve.gpu_devices else []
    host.act("persistence mode on", ["nvidia-smi", *select, "-pm", "1"])
    host.act(f"power limit {watts:g} W", ["nvidia-smi", *select, "-pl", f"{watts:g}"])
    out = host.act("read the limit back", ["nvidia-smi", *select, "--query-gpu=power.limit",
                                           "--format=csv,noheader,nounits"])
    limits = [float(value) for value in out.split()]
    wrong = [limit for limit in limits if abs(limit - watts) > TOLERANCE_W]
    if not limits or wrong:
        raise HostActionFailed(f"nvidia-smi reports power limit(s) {limits} W after -pl {watts:g}; the profile asks "
                               f"{watts:g} W (the card's allowed range: nvidia-smi -q -d POWER)")
    return limits


def install_boot_unit(profile: Profile, folder: Path, host: Host) -> str:
    """Write the report's script and unit into `folder`, install and enable them; the unit's enabled state."""
    files = power_limit_files(profile)
    for name, text in files.items():
        (folder / name).write_text(text)
    host.act("install the power-limit script", ["install", "-m", "0755", str(folder / SCRIPT), SCRIPT_PATH])
    host.act("install the boot unit", ["install", "-m", "0644", str(folder / UNIT), str(UNITS / UNIT)])
    host.act("reload systemd", ["systemctl", "daemon-reload"])
    host.act("enable the boot unit (and run it now)", ["systemctl", "enable", "--now", UNIT])
    code, out = host.ask(["systemctl", "is-enabled", UNIT])
    if code != 0 or out.strip() != "enabled":
        raise HostActionFailed(f"{UNIT} is {out.strip() or 'not enabled'} after `systemctl enable {UNIT}`")
    return out.strip()


@contextmanager
def held_limit(profile: Profile, host: Host) -> Iterator[None]:
    """The profile's power limit for the block (a variant's `gpu.power_limit_w`, issue 39), then the limit the
    cards had before it, as nvidia-smi read it. Needs what `apply_now` needs (preflight asks `refusal` first)."""
    select = ["-i", ",".join(map(str, profile.serve.gpu_devices))] if profile.serve.gpu_devices else []
    before = host.act("read the limit before the variant", ["nvidia-smi", *select, "--query-gpu=power.limit",
                                                           "--format=csv,noheader,nounits"]).split()
    apply_now(profile, host)
    try:
        yield
    finally:
        if before:
            host.act(f"power limit back to {before[0]} W", ["nvidia-smi", *select, "-pl", before[0]])
