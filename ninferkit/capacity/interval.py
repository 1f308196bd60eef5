"""Closed intervals of exact rationals: a number printed as "5.10 GiB" is any value within half a unit.

Memory figures carry their rounding through every sum and quotient, so a prediction says how sure
it is. Endpoints are `Fraction`s (exact on bytes up to any size); `None` means unbounded on that side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ninferkit.units import GIB

Number = int | float | Fraction


def _exact(value: Number) -> Fraction:
    return value if isinstance(value, Fraction) else Fraction(value)


@dataclass(frozen=True)
class Interval:
    """[low, high]; either side may be None (unbounded). Arithmetic is outward-exact."""

    low: Fraction | None
    high: Fraction | None

    @classmethod
    def of(cls, low: Number | None, high: Number | None) -> Interval:
        lo = None if low is None else _exact(low)
        hi = None if high is None else _exact(high)
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"empty interval [{lo}, {hi}]")
        return cls(lo, hi)

    @classmethod
    def exact(cls, value: Number) -> Interval:
        return cls.of(value, value)

    @classmethod
    def rounded(cls, value: Number, resolution: Number | None) -> Interval:
        """A printed value whose true value lies within +- half its resolution (0 or None: exact).

        Byte counts are whole numbers, so a resolution of 1 byte (a count printed in full) is exact.
        """
        half = Fraction(0) if resolution is None or resolution <= 1 else _exact(resolution) / 2
        return cls.of(_exact(value) - half, _exact(value) + half)

    @classmethod
    def everything(cls) -> Interval:
        return cls(None, None)

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def width(self) -> Fraction | None:
        return None if self.low is None or self.high is None else self.high - self.low

    def __add__(self, other: Interval | Number) -> Interval:
        o = other if isinstance(other, Interval) else Interval.exact(other)
        low = None if self.low is None or o.low is None else self.low + o.low
        high = None if self.high is None or o.high is None else self.high + o.high
        return Interval(low, high)

    def __neg__(self) -> Interval:
        return Interval(None if self.high is None else -self.high, None if self.low is None else -self.low)

    def __sub__(self, other: Interval | Number) -> Interval:
        o = other if isinstance(other, Interval) else Interval.exact(other)
        return self + (-o)

    def scale(self, factor: Number) -> Interval:
        """Multiply by an exact number (a token count, a slot count)."""
        f = _exact(factor)
        low = None if self.low is None else self.low * f
        high = None if self.high is None else self.high * f
        return Interval(low, high) if f >= 0 else Interval(high, low)

    def divide(self, divisor: Number) -> Interval:
        return self.scale(1 / _exact(divisor))

    def intersect(self, other: Interval) -> Interval | None:
        """The common part, or None when the two disagree (no value satisfies both)."""
        lows = [v for v in (self.low, other.low) if v is not None]
        highs = [v for v in (self.high, other.high) if v is not None]
        low = max(lows) if lows else None
        high = min(highs) if highs else None
        if low is not None and high is not None and low > high:
            return None
        return Interval(low, high)

    def contains(self, other: Interval) -> bool:
        below = self.low is None or (other.low is not None and other.low >= self.low)
        above = self.high is None or (other.high is not None and other.high <= self.high)
        return below and above

    def holds(self, value: Number) -> bool:
        v = _exact(value)
        return (self.low is None or v >= self.low) and (self.high is None or v <= self.high)

    def integers(self) -> tuple[int, int] | None:
        """The smallest and largest integer inside, or None when there is none (or it is unbounded)."""
        if self.low is None or self.high is None:
            return None
        low, high = math.ceil(self.low), math.floor(self.high)
        return (low, high) if low <= high else None

    def as_bytes(self) -> list[int | None]:
        """[low, high] in whole bytes, rounded outward, for JSON."""
        return [None if self.low is None else math.floor(self.low), None if self.high is None else math.ceil(self.high)]

    def as_gib(self, digits: int = 2) -> list[float | None]:
        return [None if v is None else round(float(v) / GIB, digits) for v in (self.low, self.high)]

    def __str__(self) -> str:
        def show(v: Fraction | None) -> str:
            return "?" if v is None else f"{float(v):,.0f}"

        return f"[{show(self.low)}, {show(self.high)}] B"


def hull(intervals: list[Interval]) -> Interval:
    """The smallest interval holding all of them."""
    lows = [i.low for i in intervals]
    highs = [i.high for i in intervals]
    return Interval(None if any(v is None for v in lows) else min(v for v in lows if v is not None),
                    None if any(v is None for v in highs) else max(v for v in highs if v is not None))


def intersect_all(intervals: list[Interval]) -> Interval | None:
    """What every interval holds; None when two of them do not overlap, or there are none."""
    common: Interval | None = intervals[0] if intervals else None
    for value in intervals[1:]:
        common = common.intersect(value) if common is not None else None
    return common
