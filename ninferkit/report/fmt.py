"""Number formatting shared by every renderer, so the Markdown, the HTML and the tests agree digit for digit."""

from __future__ import annotations

import math
from typing import Any

from ninferkit.units import GIB, MIB


def number(value: Any, decimals: int | None = None) -> str:
    """A measured value with the digits that carry meaning: 3 significant, thousands separated; with `decimals`,
    that many places whatever the size, as the field reports print their rates and times (1,019.0 tok/s, 250.27 s).

    >>> number(1019.04), number(53.44), number(0.13012), number(None), number(1019.04, 1), number(250.268, 2)
    ('1,019', '53.4', '0.130', '—', '1,019.0', '250.27')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if not isinstance(value, float):
        return str(value)
    if decimals is not None:
        return f"{value:,.{decimals}f}"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if magnitude == 0:
        return "0"
    return f"{value:.3g}" if magnitude < 0.001 else f"{value:.3f}"


def count(value: Any) -> str:
    """A count of things (tokens, requests) or a median of counts: whole numbers as integers ("16", never "16.0"),
    a median of two counts that differ by one as its half ("15.5").

    >>> count(16.0), count(15.5), count(32785.0), count(None)
    ('16', '15.5', '32,785', '—')
    """
    if isinstance(value, float) and not math.isnan(value) and value.is_integer():
        return f"{int(value):,}"
    if isinstance(value, float) and not math.isnan(value) and (2 * value).is_integer():
        return f"{value:,.1f}"
    return number(value)


def gib(value: Any) -> str:
    """Bytes as GiB with two decimals (or the MiB count for small amounts)."""
    if value is None:
        return "—"
    if abs(value) < GIB / 10:
        return f"{value / MIB:.1f} MiB"
    return f"{value / GIB:.2f} GiB"


def span(low: Any, high: Any) -> str:
    if low is None or high is None:
        return "—"
    return f"{number(low)} – {number(high)}"
