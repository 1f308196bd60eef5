"""How sure a median over repeated runs is: a seeded bootstrap confidence interval.

A cell rerun N times (`sweeps.repeats`) gives N medians, one per repeat; the tables show the median of those
with the interval it would move in if the whole run were repeated, and `compare` asks whether the interval of
a difference of medians leaves out zero. The method is the percentile bootstrap (Efron): resample the N values
with replacement, take each resample's median, and read the interval from the quantiles of those medians.

Why numpy here and not `scipy.stats.bootstrap`: scipy is not a dependency (a large wheel for one function), and
its default method (BCa) needs a jackknife that is degenerate for the 2-5 repeats a lab runs (it warns and
returns NaN, or a wider interval than the data); the percentile interval of a median is a few lines of numpy,
always defined, and seeded so a table is the same every time it is built. What it cannot do is widen a small
sample: with N repeats its bounds are values the repeats took (with 2, the two values themselves), and below
about 10 repeats it covers the true median less often than its level says. `describe` says so in the caption.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
RESAMPLES = 10_000
SEED = 0
"""The generator's seed: the same values give the same interval."""
METHOD = "percentile bootstrap"
FEW = 10
"""Below this many values the percentile interval covers less often than its level (stated, not corrected)."""


@dataclass(frozen=True)
class Interval:
    """A confidence interval at `level`, from `n` values (per side, for a difference)."""

    low: float
    high: float
    level: float
    n: tuple[int, ...]
    of: str = "the median"

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    def describe(self) -> str:
        """The method and level in words, as a table's caption or column states them."""
        counts = " and ".join(str(n) for n in self.n)
        few = (f"; with fewer than {FEW} values its bounds are values the repeats took and it covers less often "
               "than its level") if min(self.n) < FEW else ""
        return (f"{self.level:.0%} {METHOD} interval of {self.of} ({RESAMPLES:,} resamples of {counts} repeats, "
                f"seed {SEED}){few}")


def _resampled_medians(values: Sequence[float], generator: np.random.Generator, resamples: int) -> np.ndarray:
    data = np.asarray(values, dtype=float)
    picks = generator.integers(0, len(data), size=(resamples, len(data)))
    medians: np.ndarray = np.median(data[picks], axis=1)
    return medians


def _bounds(medians: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2
    low, high = np.quantile(medians, [tail, 1 - tail])
    return float(low), float(high)


def _checked(level: float, *samples: Sequence[float]) -> bool:
    if not 0 < level < 1:
        raise ValueError(f"level must lie between 0 and 1, not {level}")
    if any(not np.all(np.isfinite(np.asarray(sample, dtype=float))) for sample in samples):
        raise ValueError("a value to bootstrap is not a finite number")
    return all(len(sample) >= 2 for sample in samples)


def median_interval(values: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES,
                    seed: int = SEED) -> Interval | None:
    """The interval of the median of `values`; None for fewer than 2 (one repeat has no interval)."""
    if not _checked(level, values):
        return None
    medians = _resampled_medians(values, np.random.default_rng(seed), resamples)
    return Interval(*_bounds(medians, level), level=level, n=(len(values),))


def difference_interval(baseline: Sequence[float], candidate: Sequence[float], level: float = LEVEL,
                        resamples: int = RESAMPLES, seed: int = SEED) -> Interval | None:
    """The interval of median(candidate) - median(baseline), each side resampled on its own; None when
    either side has fewer than 2 values."""
    if not _checked(level, baseline, candidate):
        return None
    generator = np.random.default_rng(seed)
    differences = (_resampled_medians(candidate, generator, resamples)
                   - _resampled_medians(baseline, generator, resamples))
    return Interval(*_bounds(differences, level), level=level, n=(len(baseline), len(candidate)),
                    of="the difference of the medians")
