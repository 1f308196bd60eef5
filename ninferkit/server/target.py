"""The server a `--url` command names: reached, its key checked, its engine recognised, before anything is written."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ninferkit.bounded import LOG_FILE_BYTES, regular_file
from ninferkit.errors import BadInput
from ninferkit.server import process as server
from ninferkit.server.detect import Answers, Detection, ask, checked_url, detect


@dataclass
class Target:
    """The server a `--url` command talks to, as the user named it."""

    url: str
    api_key_env: str | None = None
    model: str | None = None
    engine: str | None = None
    log: Path | None = None


def reach(target: Target) -> tuple[str, Answers, Detection]:
    """The checked URL, what the server answered and its engine; BadInput before anything is written when the
    URL, the key's variable, the log or the engine is wrong."""
    url = checked_url(target.url)
    if target.log is not None:
        regular_file(target.log, LOG_FILE_BYTES, "reading the server's log (--log)")
    if target.api_key_env is not None and not os.environ.get(target.api_key_env):
        raise BadInput(f"--api-key-env names {target.api_key_env}, but it is not set; export "
                       f"{target.api_key_env}=<key> first")
    headers = server.bearer(server.env_key(target.api_key_env, "--api-key-env"))
    answers = ask(url, headers, target.api_key_env)
    return url, answers, detect(answers, target.engine)
