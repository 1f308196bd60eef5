"""The secrets this process knows (API keys, the hub token), and the scrubbing of every text it stores.

A key is read from the environment where it is needed (`server.api_key`, the hub token, a run's
profile when it is opened); reading it remembers its value here. Every writer of the run directory
(`runs.write_json_atomic`, `runs.append_jsonl`, `runs.write_text_atomic`) and the write-up pass what
they store through `scrub`, so a server answer, an error or a log line that echoes a key cannot carry
it into a file: its value is replaced by REDACTED wherever it appears, in every form a server may echo
it in (as it is, JSON-escaped, URL-encoded, base64 at any of the three alignments).

URL encoding has no one form: encoders differ in which characters they leave as they are (`quote` keeps `/`,
`quote_plus` writes a space as `+`, JavaScript's keeps `~`...) and in the case of the hex (`%2B`, `%2b`), and a
server echoed the key as `Bearer%20sk-...%2B...`, which no listed form matched (issue 40). So each key also has
one pattern matching every character of it either as it is or percent-encoded in either case.

A key shorter than MIN_SECRET_CHARS is refused where it is read: scrubbing `ok` would rewrite every
`ok` a run stores (statuses, field names) while guarding nothing. Field names are never scrubbed:
they are ninferkit's own vocabulary, not a server's text.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.parse
from typing import Any

from ninferkit.errors import BadInput

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 8
"""The shortest key that can be scrubbed without rewriting ordinary words."""

_known: dict[str, None] = {}
"""Every form of every secret (insertion-ordered set)."""
_url_encoded: dict[str, re.Pattern[str]] = {}
"""Each secret's pattern of its URL-encoded forms (`_url_pattern`)."""


def remember(value: str | None, where: str = "a secret") -> str | None:
    """Note a secret value (None and empty strings are ignored); returns it unchanged. BadInput (saying
    `where` it came from and why) for one shorter than MIN_SECRET_CHARS."""
    if not value:
        return value
    if len(value) < MIN_SECRET_CHARS:
        raise BadInput(f"{where} is {len(value)} characters long; ninferkit scrubs a key from everything it "
                       f"stores, and one shorter than {MIN_SECRET_CHARS} characters would rewrite ordinary words "
                       f"(a status 'ok') while guarding nothing: use a key of at least {MIN_SECRET_CHARS} characters")
    for form in _forms(value):
        _known.setdefault(form)
    _url_encoded.setdefault(value, _url_pattern(value))
    return value


def remember_env(name: str | None) -> str | None:
    """The value of environment variable `name` (None when unset or no name), remembered as a secret."""
    return remember(os.environ.get(name), f"the key in environment variable {name}") if name else None


def _forms(secret: str) -> set[str]:
    """The secret as a server may echo it: raw, JSON-escaped, URL-encoded, and the part of its base64 that
    does not depend on the bytes around it (three alignments)."""
    raw = secret.encode()
    escaped = json.dumps(secret)[1:-1]
    forms = {secret, escaped, escaped.replace("/", "\\/"), json.dumps(secret, ensure_ascii=False)[1:-1],
             urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    for lead in range(3):
        encoded = base64.b64encode(b"\0" * lead + raw).decode()
        whole = 4 * ((lead + len(raw)) // 3)  # groups made of this secret's bytes (and the lead) only
        inner = encoded[4 if lead else 0:whole]
        if len(inner) >= MIN_SECRET_CHARS:
            forms.add(inner)
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


def _url_pattern(secret: str) -> re.Pattern[str]:
    """Every URL encoding of `secret`: each character as it is or as its UTF-8 bytes percent-encoded (hex in
    either case), a space also as `+`."""
    def one(char: str) -> str:
        encoded = "".join(f"%{byte:02X}" for byte in char.encode())
        spellings = [re.escape(char), re.escape(encoded), re.escape(encoded.lower()), *(["\\+"] if char == " " else [])]
        return "(?:" + "|".join(spellings) + ")"
    return re.compile("".join(one(char) for char in secret))


def scrub(text: str) -> str:
    """`text` with every known secret replaced by REDACTED (longest first, so no key is left half-shown
    when one key contains another), then any URL encoding of one."""
    for secret in sorted(_known, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    if "%" in text or "+" in text:
        for pattern in _url_encoded.values():
            text = pattern.sub(REDACTED, text)
    return text


def scrub_data(data: Any) -> Any:
    """A JSON-like value with every string value in it scrubbed; dictionary keys (field names) and other
    values as they are."""
    if not _known:
        return data
    if isinstance(data, str):
        return scrub(data)
    if isinstance(data, dict):
        return {key: scrub_data(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [scrub_data(value) for value in data]
    return data
