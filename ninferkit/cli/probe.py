"""`ninferkit probe`: the setup step's facts and findings without a notebook."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser("probe", help="GPU, driver, CUDA, Docker, disk facts")
    parser.add_argument("--profile", help="judge the facts against this profile")
    parser.add_argument("--json", action="store_true", help="print the probe.json object")
    return parser


def main(args: argparse.Namespace) -> int:
    from ninferkit import probe
    from ninferkit.params import load_profile

    profile = load_profile(args.profile).profile if args.profile else None
    record = probe.probe(profile)
    if args.json:
        print(json.dumps(record.model_dump(mode="json", exclude_unset=True), indent=2, sort_keys=True))
    else:
        print(probe.describe(record))
    return 1 if record.blocking() else 0  # an error the profile waives (gpu.waive) does not count
