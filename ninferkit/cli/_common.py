"""Arguments several commands share."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ninferkit.server.target import Target


def add_profile_args(parser: argparse.ArgumentParser, optional: bool = False) -> None:
    if optional:
        parser.add_argument("profile", nargs="?", help="profile YAML, e.g. params/local-cpu.yaml (with --url: "
                            "default params/url.yaml, whose engine, model and context the server's answers replace)")
    else:
        parser.add_argument("profile", help="profile YAML, e.g. params/local-cpu.yaml")
    parser.add_argument("-p", "--param", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a profile field, e.g. -p serve.max_context=8192 (repeatable)")


def add_run_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", help="run directory (default: runs/<timestamp>-<profile name>)")


def add_url_args(parser: argparse.ArgumentParser, log_help: str) -> None:
    """--url and what goes with it: a server someone else started, which ninferkit neither starts nor stops."""
    group = parser.add_argument_group("a server ninferkit did not start")
    group.add_argument("--url", help="the server's base URL, e.g. http://127.0.0.1:8000; ninferkit starts nothing "
                       "and never signals it")
    group.add_argument("--api-key-env", metavar="VAR", help="the environment variable holding the server's API key "
                       "(the key itself never goes on a command line)")
    group.add_argument("--model", help="the model id to request (default: the one the server lists)")
    group.add_argument("--engine", help="the server's engine (default: read from its answers: /v1/models, /props, "
                       "/metrics, the Server header)")
    group.add_argument("--log", type=Path, help=log_help)


def url_target(args: argparse.Namespace) -> Target | None:
    """The --url server the arguments name (None without --url); the other --url options alone are refused."""
    from ninferkit.errors import BadInput
    from ninferkit.server.target import Target

    if args.url is None:
        given = [f"--{name.replace('_', '-')}" for name in ("api_key_env", "model", "engine", "log")
                 if getattr(args, name) is not None]
        if given:
            raise BadInput(f"{', '.join(given)} go with --url (a server ninferkit did not start); add --url URL")
        return None
    return Target(args.url, args.api_key_env, args.model, args.engine, args.log)
