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
    """A count of things (tokens, requests): a whole number ("16", never "16.0"). A median of counts that falls
    between two of them is no count: :func:`counts` shows such a median as the counts it lies between.

    >>> count(16.0), count(32785.0), count(None)
    ('16', '32,785', '—')
    """
    if isinstance(value, float) and not math.isnan(value) and value.is_integer():
        return f"{int(value):,}"
    return number(value)


def counts(median: Any, low: Any = None, high: Any = None) -> str:
    """A cell's count summarised over its requests, as a count: the median where it is one, with the range where
    the requests differ; where the median falls between two counts (an even number of requests that differ: two
    requests of 15 and 16 hit tokens have a median of 15.5) the range alone, which for two requests is both
    their counts.

    >>> counts(16.0), counts(16.0, 15, 17), counts(15.5, 15, 16), counts(15.5), counts(None)
    ('16', '16 (15 – 17)', '15 – 16', 'between 15 and 16', '—')
    """
    if median is None or (isinstance(median, float) and math.isnan(median)):
        return "—"
    known = low is not None and high is not None and not any(isinstance(v, float) and math.isnan(v)
                                                              for v in (low, high))
    if float(median).is_integer():
        shown = count(float(median))
        return f"{shown} ({count(float(low))} – {count(float(high))})" if known and low != high else shown
    if known:
        return f"{count(float(low))} – {count(float(high))}"
    return f"between {math.floor(median):,} and {math.ceil(median):,}"


def seconds(value: Any, unit: bool = False) -> str:
    """A time in seconds as the field reports print it: to 0.01 s (250.27 s, 0.13 s), to 0.001 s below 0.1 s so a
    cache hit's 0.036 s keeps its digits, and a minute or more also in minutes ("67.11 (1 m 7.1 s)"); with `unit`,
    followed by its unit (a table's header carries it otherwise).

    >>> seconds(250.268), seconds(0.1312), seconds(0.0359), seconds(67.1107, unit=True), seconds(None)
    ('250.27 (4 m 10.3 s)', '0.13', '0.036', '67.11 s (1 m 7.1 s)', '—')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    value = float(value)
    shown = number(value, 3 if abs(value) < 0.1 and value != 0 else 2) + (" s" if unit else "")
    if value < 60:
        return shown
    minutes, tenths = divmod(round(10 * value), 600)  # whole tenths first: 119.97 s is 2 m 0.0 s
    return f"{shown} ({minutes} m {tenths / 10:.1f} s)"


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
