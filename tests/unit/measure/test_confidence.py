"""The bootstrap interval of a median (ninferkit/measure/confidence.py): its bounds where they can be worked out by
hand, its seed, and how often it covers the true median where the sample is large enough to ask."""

from __future__ import annotations

import numpy as np
import pytest

from ninferkit.measure.confidence import FEW, LEVEL, difference_interval, median_interval


def test_two_repeats_bound_the_interval_by_their_two_values() -> None:
    """With 2 values a resample's median is the lower (1/4), their mean (1/2) or the upper (1/4), so the 2.5%
    and 97.5% quantiles are the two values themselves."""
    interval = median_interval([10.0, 14.0])
    assert interval is not None
    assert (interval.low, interval.high) == (10.0, 14.0)
    assert interval.level == LEVEL and interval.n == (2,)


def test_the_interval_is_seeded_and_a_constant_sample_has_no_width() -> None:
    values = [3.1, 2.7, 3.9, 3.3, 2.8, 3.0, 4.4]
    assert median_interval(values) == median_interval(values)
    assert median_interval(values, seed=1) == median_interval(list(values), seed=1)
    constant = median_interval([5.0, 5.0, 5.0])
    assert constant is not None and (constant.low, constant.high) == (5.0, 5.0)


def test_one_value_has_no_interval_and_a_value_that_is_no_number_is_refused() -> None:
    assert median_interval([1.0]) is None and median_interval([]) is None
    assert difference_interval([1.0, 2.0], [3.0]) is None
    with pytest.raises(ValueError, match="not a finite number"):
        median_interval([1.0, float("nan")])
    with pytest.raises(ValueError, match="level"):
        median_interval([1.0, 2.0], level=1.5)


def test_the_interval_covers_the_true_median_about_as_often_as_its_level() -> None:
    """400 samples of 40 from an exponential distribution (skewed, as latencies are): the 95% interval holds
    the true median (ln 2) in 90-99% of them (the percentile interval of a median runs a little under its
    level; a broken one lands far outside)."""
    generator = np.random.default_rng(7)
    covered = 0
    for trial in range(400):
        sample = generator.exponential(size=40)
        interval = median_interval(list(sample), resamples=2000, seed=trial)
        assert interval is not None
        covered += interval.holds(float(np.log(2)))
    assert 0.90 <= covered / 400 <= 0.99


def test_the_difference_interval_leaves_out_zero_only_for_a_real_shift() -> None:
    generator = np.random.default_rng(3)
    baseline = list(generator.normal(100, 5, size=8))
    same = list(generator.normal(100, 5, size=8))
    slower = list(generator.normal(80, 5, size=8))
    unchanged = difference_interval(baseline, same)
    shifted = difference_interval(baseline, slower)
    assert unchanged is not None and unchanged.holds(0.0)
    assert shifted is not None and not shifted.holds(0.0) and shifted.high < 0
    assert shifted.n == (8, 8)


def test_the_method_and_level_are_said_with_the_warning_for_few_repeats() -> None:
    few = median_interval([1.0, 2.0, 3.0])
    many = median_interval([float(v) for v in range(FEW)])
    assert few is not None and many is not None
    assert few.describe().startswith("95% percentile bootstrap interval of the median (10,000 resamples of 3 "
                                     "repeats, seed 0)")
    assert "covers less often than its level" in few.describe()
    assert "covers less often" not in many.describe()
    difference = difference_interval([1.0, 2.0], [2.0, 3.0])
    assert difference is not None and "of the difference of the medians" in difference.describe()
