"""Arguments several commands share."""

from __future__ import annotations

import argparse


def add_profile_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", help="profile YAML, e.g. params/local-cpu.yaml")
    parser.add_argument("-p", "--param", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a profile field, e.g. -p serve.max_context=8192 (repeatable)")


def add_run_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", help="run directory (default: runs/<timestamp>-<profile name>)")
