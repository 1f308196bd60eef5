"""A recorded run copied to stand for another run of the same profile (another host's, another port's).

`merge` knows a copy of a run by its request ids (a fresh uuid per request measured) and refuses to count it
twice (issue 40), so a copy that stands for a *different* run gets ids of its own: every request_uid of the
copy's rows is replaced, consistently in every file of the copy that names it (the rows, the engine's own
records joined to them). The measurements are the recorded ones: only the pooling is under test."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any


def copy_as_another_run(source: Path, copy: Path, ignore: Callable[[Any, list[str]], set[str]] | None = None) -> Path:
    """`source` copied to `copy`, its request ids made new; `copy`."""
    shutil.copytree(source, copy, ignore=ignore)
    uids = {json.loads(line).get("request_uid") for line in (copy / "requests.jsonl").read_text().splitlines()
            if line.strip()} - {None}
    fresh = {str(uid): uuid.uuid4().hex for uid in uids}
    for path in copy.rglob("*"):
        if path.is_file() and path.suffix in (".jsonl", ".json", ".csv"):
            text = path.read_text(errors="surrogateescape")
            changed = text
            for old, new in fresh.items():
                changed = changed.replace(old, new)
            if changed != text:
                path.write_text(changed, errors="surrogateescape")
    return copy
