"""Latency metrics as the peer tools define them (ninferkit/measure/latency.py), the rate sweep's arrivals and its
kept-up measure (sweeps/rate.py), and the rate sweep's profile section.

The per-request rows come from tests/data/run_dirs/embedded-1 (a real `ninferkit run params/local-cpu.yaml`
of the embedded default, recorded on the 2-core development VM before the client stamped every text event);
the distributions are checked against values worked out by hand from their definitions.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError
from ninferkit.measure.latency import (
    MS,
    Distribution,
    Targets,
    distribution,
    goodput,
    peak_in_flight,
    requests_per_s,
    samples,
    tpot_s,
)
from ninferkit.params import load_profile
from ninferkit.params.sweeps import MAX_COUNT
from ninferkit.rundir.records import RequestRow
from ninferkit.sweeps.plan import build_plan
from ninferkit.sweeps.rate import backlog_growth, kept_up, poisson_arrivals
from tests.conftest import DATA, REPO

RUNS = DATA / "run_dirs"


def records(rows: list[dict]) -> list[RequestRow]:
    """Rows as requests.jsonl holds them, read as the tables read them."""
    return [RequestRow.model_validate(row) for row in rows]


def test_percentiles_interpolate_and_the_deviation_is_the_populations() -> None:
    """[1, 2, 3, 4]: p50 halfway between 2 and 3, p90 at 0.7 of the way from 3 to 4 (rank 2.7), p99 at
    rank 2.97; the population variance is 1.25 (numpy's default, which vLLM reports)."""
    found = distribution([4.0, 1.0, 3.0, 2.0])
    assert (found.n, found.p50, found.p90, found.p99) == (4, 2.5, pytest.approx(3.7), pytest.approx(3.97))
    assert found.std == pytest.approx(math.sqrt(1.25))
    assert distribution([]) == distribution(()) and distribution([]).p50 is None


def test_one_distribution_serves_the_tables_in_s_and_the_peers_in_ms() -> None:
    """The peers' mean, median, min and max beside the tables' percentiles, from the same samples: scaled to ms
    they are the seconds' figures times 1000, and the peers' `median` is p50."""
    seconds = distribution([0.004, 0.001, 0.003, 0.002])
    ms = distribution([0.004, 0.001, 0.003, 0.002], MS)
    assert (seconds.mean, seconds.min, seconds.max) == (pytest.approx(0.0025), 0.001, 0.004)
    for stat in ("mean", "p50", "p90", "p99", "std", "min", "max"):
        assert ms.value(stat) == pytest.approx(seconds.value(stat) * 1000), stat  # type: ignore[operator]
    assert ms.value("median") == ms.p50 == pytest.approx(2.5) and ms.n == seconds.n == 4
    assert distribution([], MS) == Distribution(0) and Distribution(0).value("median") is None


def test_old_rows_have_tpot_from_their_decode_rate_and_no_itl() -> None:
    rows = [json.loads(line) for line in (RUNS / "embedded-1" / "requests.jsonl").read_text().splitlines()]
    ok = records([r for r in rows if r["status"] == "ok" and r["decode_tok_s_client"]])
    assert ok and all("tpot_client_s" not in r.as_dict() and "itl_client_s" not in r.as_dict() for r in ok)
    for row in ok:
        assert row.t_last_token is not None and row.t_first_token is not None and row.completion_tokens
        expected = (row.t_last_token - row.t_first_token) / (row.completion_tokens - 1)
        assert tpot_s(row) == pytest.approx(expected)
    assert samples(ok, "itl_client_s") == []  # never a confident 0: no gaps recorded, no samples
    assert len(samples(ok, "tpot_client_s")) == len(ok)


def test_itl_pools_the_gaps_of_every_request() -> None:
    rows = records([{"itl_client_s": [0.01, 0.02]}, {"itl_client_s": [0.03]}, {"itl_client_s": []}, {}])
    assert samples(rows, "itl_client_s") == [0.01, 0.02, 0.03]


def test_requests_per_second_and_peak_in_flight_from_send_and_end_times() -> None:
    rows = records([{"t_send": 0.0, "t_done": 2.0}, {"t_send": 1.0, "t_done": 3.0}, {"t_send": 3.0, "t_done": 4.0}])
    assert requests_per_s(rows, rows) == pytest.approx(3 / 4)
    timed_out = RequestRow(status="errored", t_send=0.5, t_done=600.5)
    # vLLM's request throughput: finished requests over the whole run, the one that timed out included
    assert requests_per_s(rows, [*rows, timed_out]) == pytest.approx(3 / 600.5)
    assert peak_in_flight(rows) == 2  # the third starts as the second ends: a slot freed and taken, not three


def test_goodput_counts_requests_meeting_every_target_over_everything_sent() -> None:
    rows = records([
        {"status": "ok", "ttft_client_s": 0.5, "tpot_client_s": 0.02, "itl_client_s": [0.02, 0.03], "t_send": 0.0,
         "t_done": 1.0, "completion_tokens": 40},
        {"status": "ok", "ttft_client_s": 1.5, "tpot_client_s": 0.02, "itl_client_s": [0.02], "t_send": 0.5,
         "t_done": 2.0, "completion_tokens": 30},  # TTFT over
        {"status": "ok", "ttft_client_s": 0.5, "tpot_client_s": 0.02, "itl_client_s": [0.02, 0.4], "t_send": 1.0,
         "t_done": 3.0, "completion_tokens": 20},  # one stall over the ITL target
        {"status": "errored", "t_send": 1.5, "t_done": 4.0},
    ])
    both = Targets(ttft_s=1.0, itl_s=0.1)
    # the good request's 40 output tokens over the 4 s from the first send to the last end
    assert goodput(rows, both) == {"goodput_rps": pytest.approx(1 / 4), "goodput_tok_s": pytest.approx(40 / 4),
                                   "good_fraction": 0.25}
    assert goodput(rows, Targets(ttft_s=1.0))["good_fraction"] == 0.5
    assert goodput(rows, Targets(ttft_s=1.0))["goodput_tok_s"] == pytest.approx(60 / 4)
    assert goodput(rows, Targets()) == {"goodput_rps": None, "goodput_tok_s": None, "good_fraction": None}
    assert not Targets(itl_s=1.0).met(RequestRow(status="ok", ttft_client_s=0.1))  # gaps never recorded: unknown


def test_arrivals_are_seeded_poisson_and_scale_with_the_rate() -> None:
    first = poisson_arrivals(2.0, 2000, None, seed=7)
    assert first == poisson_arrivals(2.0, 2000, None, seed=7) and first[0] == 0.0 and len(first) == 2000
    assert first != poisson_arrivals(2.0, 2000, None, seed=8)
    assert poisson_arrivals(4.0, 2000, None, seed=7) == pytest.approx([t / 2 for t in first])
    gaps = [b - a for a, b in zip(first, first[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    assert mean == pytest.approx(0.5, rel=0.05)  # exponential gaps of mean 1/rate (seeded: the same every run)
    assert sum(g < mean for g in gaps) / len(gaps) == pytest.approx(1 - math.exp(-1), abs=0.03)
    timed = poisson_arrivals(2.0, None, 30.0, seed=7)
    assert timed == [t for t in first if t < 30.0]


def test_backlog_growth_says_how_far_the_offered_rate_outran_the_server() -> None:
    """A server that keeps up: each request takes 1 s whenever it arrives. One that serves a request every
    0.5 s while they arrive every 0.25 s: request i arrives at 0.25 i and ends at 0.5 (i + 1), so its latency
    grows by 0.25 s per 0.25 s of arrivals: a growth of 1 = offered / served - 1 (it served half the rate)."""
    arrivals = [0.25 * i for i in range(20)]
    steady = [{"scheduled_s": t, "t_send": 100 + t, "schedule_lag_s": 0.0, "t_done": 101 + t} for t in arrivals]
    behind = [{"scheduled_s": t, "t_send": 100 + t, "schedule_lag_s": 0.0, "t_done": 100 + 0.5 * (i + 1)}
              for i, t in enumerate(arrivals)]
    assert backlog_growth(records(steady)) == pytest.approx(0.0, abs=1e-9)
    assert backlog_growth(records(behind)) == pytest.approx(1.0)
    assert backlog_growth(records(steady[:2])) is None
    assert kept_up(records([{**row, "status": "ok"} for row in steady])) == (True, pytest.approx(0.0, abs=1e-9))
    assert kept_up(records([{**row, "status": "ok"} for row in behind]))[0] is False


def test_a_cell_with_failed_requests_did_not_keep_up_whatever_the_slope() -> None:
    """Every other request refused at once (a 503): the finished ones alone show a flat latency, which is not
    a server keeping up; nor is one whose requests timed out."""
    arrivals = [0.25 * i for i in range(20)]
    rows = [{"scheduled_s": t, "t_send": 100 + t, "schedule_lag_s": 0.0, "t_done": 101 + t,
             "status": "ok" if i % 2 == 0 else "errored"} for i, t in enumerate(arrivals)]
    verdict, growth = kept_up(records(rows))
    assert verdict is False and growth == pytest.approx(0.0, abs=1e-9)
    refused = records([row for row in rows if row["status"] == "errored"])
    assert kept_up(refused) == (None, None)  # none finished: unknown


def test_a_growth_within_two_standard_errors_of_the_threshold_is_unclear() -> None:
    """Latency that grows 0.12 s per s of arrivals, with +-1 s of alternating noise: the slope's standard error
    (about 0.04) puts 0.1 within reach, so no verdict; the same growth without the noise did not keep up."""
    arrivals = [0.5 * i for i in range(32)]
    noisy = [{"scheduled_s": t, "t_send": 100 + t, "schedule_lag_s": 0.0, "status": "ok",
              "t_done": 101 + t + 0.12 * t + (1.0 if i % 2 else -1.0)} for i, t in enumerate(arrivals)]
    clean = [{**row, "t_done": 101 + row["scheduled_s"] * 1.12} for row in noisy]
    verdict, growth = kept_up(records(noisy))
    assert verdict is None and growth == pytest.approx(0.12, abs=0.02)
    assert kept_up(records(clean)) == (False, pytest.approx(0.12))


def test_rate_section_takes_a_count_or_a_duration_not_both(tmp_path: Path) -> None:
    profile = tmp_path / "rate.yaml"
    base = (REPO / "params" / "local-cpu.yaml").read_text()
    profile.write_text(base)
    with pytest.raises(ProfileError, match="sweeps.rate.*exactly one of requests and duration_s"):
        load_profile(profile, ["sweeps.rate.duration_s=30"])
    loaded = load_profile(profile, ["sweeps.rate.duration_s=30", "sweeps.rate.requests=null",
                                    "sweeps.rate.slo.ttft_s=2"]).profile
    assert loaded.sweeps.rate.duration_s == 30 and loaded.sweeps.rate.slo.ttft_s == 2
    with pytest.raises(ProfileError, match="sweeps.rate.rates"):
        load_profile(profile, ["sweeps.rate.rates=[0]"])


def test_a_rate_plan_too_long_is_refused_without_drawing_it_whole() -> None:
    """10,000 requests/s for a day would be 864 million arrivals: the plan draws one past the limit and stops."""
    profile = load_profile(REPO / "params" / "local-cpu.yaml", [
        "sweeps.rate.rates=[10000]", "sweeps.rate.duration_s=86400", "sweeps.rate.requests=null"]).profile
    with pytest.raises(ProfileError, match=f"10000 requests/s for 86400 s is more than {MAX_COUNT} requests"):
        build_plan(profile, get_adapter("llama_server"), ["rate"], explicit=True)
