"""`ninferkit probe`: the setup step's facts and findings without a notebook; `--apply` sets what the profile asks."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser("probe", help=summary)
    parser.add_argument("--profile", help="judge the facts against this profile")
    parser.add_argument("--json", action="store_true", help="print the probe.json object")
    parser.add_argument("--apply", action="store_true",
                        help="set what the profile asks, as seed 000 §1.1 and §3 do by hand: persistence mode, "
                             "gpu.power_limit_w and the boot unit that re-applies it (root; each command is printed "
                             "before it runs and its result read back)")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit.errors import BadInput, NinferkitError
    from ninferkit.params import load_profile
    from ninferkit.steps import probe

    profile = load_profile(args.profile).profile if args.profile else None
    if args.apply:
        from ninferkit.deploy.actions import Host
        from ninferkit.deploy.power import apply_now, install_boot_unit, refusal

        if profile is None:
            raise BadInput("--apply needs --profile: the power limit to set is the profile's gpu.power_limit_w")
        why_not = refusal(profile, boot_unit=True)
        if why_not:
            raise NinferkitError(f"--apply changed nothing: {why_not}")
        host = Host()
        limits = apply_now(profile, host)
        print(f"power limit now {', '.join(f'{limit:g} W' for limit in limits)}")
        with tempfile.TemporaryDirectory(prefix="ninferkit-boot-unit-") as folder:
            print(f"boot unit: {install_boot_unit(profile, Path(folder), host)}")
    record = probe.probe(profile)
    if args.json:
        print(json.dumps(record.model_dump(mode="json", exclude_unset=True), indent=2, sort_keys=True))
    else:
        print(probe.describe(record))
    return 1 if record.blocking() else 0  # an error the profile waives (gpu.waive) does not count
