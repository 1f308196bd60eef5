"""The client's word on its own clock (measure/client_clock): a real event loop blocked on purpose."""

from __future__ import annotations

import asyncio
import time

from ninferkit.measure.client_clock import PROBE_S, CellClock, ClockWatch, cell_unsure, row_unsure


def test_a_blocked_event_loop_is_measured_and_the_requests_it_overlapped_are_unsure() -> None:
    async def cell() -> tuple[ClockWatch, float, float, float]:
        async with ClockWatch() as watch:
            await asyncio.sleep(3 * PROBE_S)
            start = time.monotonic()
            time.sleep(0.15)  # the loop held for 150 ms: a probe due meanwhile wakes that late
            await asyncio.sleep(3 * PROBE_S)
            end = time.monotonic()
            await asyncio.sleep(3 * PROBE_S)
            quiet_start = time.monotonic()
            await asyncio.sleep(5 * PROBE_S)
        return watch, start, end, quiet_start

    watch, start, end, quiet_start = asyncio.run(cell())
    lag = watch.lag_max_s(start, end)
    assert lag is not None and lag >= 0.1
    clock = watch.cell()
    assert clock.lag_max_s is not None and clock.lag_max_s >= lag
    assert clock.cpu_share is not None and 0 < clock.cpu_share < 1.5
    assert watch.lag_max_s(start - 10, start - 5) is None  # no probe then: unknown, not zero
    said = row_unsure(lag, [0.02, 0.02, 0.03], 0.1)
    assert said is not None and "median inter-token gap (20.0 ms)" in said
    assert row_unsure(0.0005, [0.02, 0.02], 0.1) is None  # 0.5 ms against 20 ms gaps: within 5%
    assert row_unsure(None, [0.02], 0.1) is None
    assert row_unsure(0.01, [], 0.1) is not None and row_unsure(0.004, [], 0.1) is None  # no gaps: against TTFT


def test_a_cell_is_unsure_when_its_client_saturated_a_core_or_had_unsure_rows() -> None:
    calm = CellClock(0.0004, 0.002, 0.3)
    assert cell_unsure(calm, 0, 10) is None
    busy = cell_unsure(CellClock(0.0004, 0.002, 0.95), 0, 10)
    assert busy is not None and "95% of a core" in busy
    rows = cell_unsure(CellClock(0.012, 0.03, 0.5), 3, 10)
    assert rows is not None and "3 of 10 requests" in rows and "p99 12.0 ms" in rows
    assert CellClock(None, None, None).fields() == {"client_lag_p99_s": None, "client_lag_max_s": None,
                                                    "client_cpu_share": None, "client_workers": None}


def test_with_workers_the_cell_is_the_worst_worker_and_a_dead_one_is_said() -> None:
    async def cell() -> ClockWatch:
        async with ClockWatch() as watch:
            await asyncio.sleep(PROBE_S)
        watch.absorb(CellClock(0.001, 0.004, 0.4))
        watch.absorb(CellClock(0.003, 0.002, 0.95))
        watch.absorb(None, "client worker 2 died (signal 9) with 3 requests in flight")
        return watch

    clock = asyncio.run(cell()).cell()
    assert (clock.lag_p99_s, clock.lag_max_s, clock.cpu_share, clock.workers) == (0.003, 0.004, 0.95, 3)
    said = cell_unsure(clock, 0, 10)
    assert said is not None and "client worker 2 died" in said and "a client worker used 95% of a core" in said
