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
from ninferkit.errors import HostActionFailed, NinferkitError
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
    """The profile's power limit for the block (a variant's `gpu.power_limit_w`, issue 39), then each card's own
    limit from before it, as nvidia-smi read it, on every way out: the block's end, its failure, Ctrl-C, and a
    failure of `apply_now` itself (a `-pl` may have taken on some cards before the read-back refused it). The
    restore is read back; where it fails, the error says the cards are left at the variant's limit and the
    commands that restore them. Needs what `apply_now` needs (preflight asks `refusal` first); nothing is
    changed when the first read fails (ToolMissing where nvidia-smi is not installed)."""
    before = read_limits(profile, host, "read the limits before the variant")
    try:
        apply_now(profile, host)
        yield
    except BaseException as error:
        try:
            restore_limits(before, host)
        except NinferkitError as failed:
            error.add_note(str(failed))
        raise
    restore_limits(before, host)


def _select(profile: Profile) -> list[str]:
    return ["-i", ",".join(map(str, profile.serve.gpu_devices))] if profile.serve.gpu_devices else []


def read_limits(profile: Profile, host: Host, why: str) -> dict[str, str]:
    """Each of the profile's cards' power limit as nvidia-smi prints it (`index, watts`), by index."""
    return _limits(host, why, _select(profile))


def _limits(host: Host, why: str, select: list[str]) -> dict[str, str]:
    out = host.act(why, ["nvidia-smi", *select, "--query-gpu=index,power.limit", "--format=csv,noheader,nounits"])
    found = {}
    for line in out.splitlines():
        index, _, watts = line.partition(",")
        if index.strip() and watts.strip():
            found[index.strip()] = watts.strip()
    if not found:
        raise HostActionFailed(f"nvidia-smi printed no power limit ({out.strip()!r})")
    return found


def restore_argv(before: dict[str, str]) -> list[list[str]]:
    """The commands that put each card back to its limit from before (one per card: their limits may differ)."""
    return [["nvidia-smi", "-i", index, "-pl", watts] for index, watts in before.items()]


def restore_limits(before: dict[str, str], host: Host) -> None:
    """Each card back to its own limit, read back; HostActionFailed (naming the commands to run by hand) when a
    command fails or a card reports another limit afterwards."""
    by_hand = "; ".join(" ".join(argv) for argv in restore_argv(before))
    try:
        for argv in restore_argv(before):
            host.act(f"power limit of GPU {argv[2]} back to {argv[4]} W", argv)
        now = _limits(host, "read the limits back", ["-i", ",".join(before)])
    except NinferkitError as exc:
        raise HostActionFailed(f"the power limit was not restored after the variant ({exc}); the cards may still "
                               f"run at the variant's limit: restore them by hand: {by_hand}") from exc
    wrong = [index for index, watts in before.items()
             if index not in now or abs(float(now[index]) - float(watts)) > TOLERANCE_W]
    if wrong:
        raise HostActionFailed(f"GPU(s) {', '.join(wrong)} report power limit(s) "
                               f"{', '.join(now.get(index, 'none') for index in wrong)} W after the restore; they "
                               f"had {', '.join(before[index] for index in wrong)} W before the variant: {by_hand}")
