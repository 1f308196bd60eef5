"""The secrets this process knows (API keys, the hub token), and the scrubbing of every text it stores.

A key is read from the environment where it is needed (`server.api_key`, the hub token, a run's
profile when it is opened); reading it remembers its value here. Every writer of the run directory
(`runs.write_json_atomic`, `runs.append_jsonl`, `runs.write_text_atomic`) and the write-up pass what
they store through `scrub`, so a server answer, an error or a log line that echoes a key cannot carry
it into a file: its value is replaced by REDACTED wherever it appears.
"""

from __future__ import annotations

import os
from typing import Any

REDACTED = "<redacted>"

_known: set[str] = set()


def remember(value: str | None) -> str | None:
    """Note a secret value (None and empty strings are ignored); returns it unchanged."""
    if value:
        _known.add(value)
    return value


def remember_env(name: str | None) -> str | None:
    """The value of environment variable `name` (None when unset or no name), remembered as a secret."""
    return remember(os.environ.get(name)) if name else None


def scrub(text: str) -> str:
    """`text` with every known secret replaced by REDACTED (longest first, so no key is left half-shown
    when one key contains another)."""
    for secret in sorted(_known, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def scrub_data(data: Any) -> Any:
    """A JSON-like value with every string in it (keys included) scrubbed; other values as they are."""
    if not _known:
        return data
    if isinstance(data, str):
        return scrub(data)
    if isinstance(data, dict):
        return {scrub_data(key): scrub_data(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [scrub_data(value) for value in data]
    return data
