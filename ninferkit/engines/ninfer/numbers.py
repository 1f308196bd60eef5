"""Numbers as NInfer prints them: rounded bytes, counts with thousands commas, `2.34k` rates, durations.

Every value printed rounded keeps its resolution (one unit of its last printed digit), so the
capacity fit can treat it as the interval it is rather than as an exact count.
"""

from __future__ import annotations

import re
from typing import Any

from ninferkit.units import GIB, MIB

BYTE_UNITS = {"B": 1, "KiB": 1024, "MiB": MIB, "GiB": GIB}
BYTES = r"(?P<{name}>[\d,]+(?:\.\d+)?)\s*(?P<{name}_unit>B|KiB|MiB|GiB)\b"
"""A printed byte value as a regex with groups `<name>` and `<name>_unit` (format with name=...)."""


def byte_value(number: str, unit: str) -> tuple[int, int]:
    """(bytes, resolution in bytes) of a rounded value such as ('7.12', 'GiB').

    The resolution is one unit of the last printed digit (0.01 GiB for '7.12 GiB'), so the
    true value lies within +- half of it.
    """
    number = number.replace(",", "")
    decimals = len(number.partition(".")[2])
    scale = BYTE_UNITS[unit]
    return round(float(number) * scale), round(scale / 10**decimals)


def put_bytes(out: dict[str, Any], key: str, number: str, unit: str) -> None:
    """out[key] and out[key_resolution_bytes] from a printed value such as ('7.12', 'GiB')."""
    out[key], out[f"{key}_resolution_bytes"] = byte_value(number, unit)


def count(text: str) -> int:
    """'262,144' -> 262144 (G3 prints counts with thousands commas)."""
    return int(text.replace(",", ""))


def rate(text: str) -> float:
    """'2.34k' -> 2340.0; '71.2' -> 71.2 (G3 tok/s)."""
    text = text.replace(",", "")
    return float(text[:-1]) * 1000 if text.endswith("k") else float(text)


_DURATION = re.compile(r"^\s*(?:\d+(?:\.\d+)?\s*(?:us|ms|h|m|s)\s*)+$")
_DURATION_PART = re.compile(r"(?P<v>\d+(?:\.\d+)?)\s*(?P<u>us|ms|h|m|s)")
_DURATION_SECONDS = {"us": (1, 1_000_000), "ms": (1, 1000), "s": (1, 1), "m": (60, 1), "h": (3600, 1)}
"""(multiply, divide): dividing by 1000 gives 0.0314 for '31.4 ms' where multiplying by 1e-3 would not."""


def duration_s(text: str) -> float:
    """G3 durations: '850 us', '12.3 ms', '4.5s', '3m 2.1s', '8m8.7s', '1h 5m' -> seconds.

    Raises ValueError for anything else, so a segment that is not a duration is never read as one.
    """
    if not _DURATION.match(text):
        raise ValueError(f"not a duration: {text!r}")
    total = 0.0
    for part in _DURATION_PART.finditer(text):
        multiply, divide = _DURATION_SECONDS[part["u"]]
        total += float(part["v"]) * multiply / divide
    return total


def is_duration(text: str) -> bool:
    return bool(_DURATION.match(text))


def key_values(text: str) -> tuple[dict[str, str], list[str]]:
    """`key=value key="quoted value"` pairs (G1 and G2 lines), and the words between them that are not pairs."""
    pairs: dict[str, str] = {}
    rest: list[str] = []
    position = 0
    for found in re.finditer(r'(?P<k>[\w.-]+)=(?:"(?P<q>(?:[^"\\]|\\.)*)"|(?P<v>\S*))', text):
        rest += text[position:found.start()].split()
        pairs[found["k"]] = found["q"] if found["q"] is not None else found["v"]
        position = found.end()
    rest += text[position:].split()
    return pairs, rest
