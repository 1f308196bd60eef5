"""Method notes and caveats generated from the data, for a run and for a comparison of runs.

The field reports' complaint is numbers that cannot be compared: different acceptance rates, power
caps, throttling, client-side timing read as server speed. Each rule here looks for one such reason
in the raw rows and, when it finds it, says so with the numbers that triggered it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ninferkit.engines import get_adapter
from ninferkit.measure.latency import wait_before_prefill_s
from ninferkit.measure.telemetry import THROTTLING
from ninferkit.report.conditions import gpu_conditions
from ninferkit.report.data import RunData
from ninferkit.report.fmt import number
from ninferkit.report.headline import cell_label
from ninferkit.rundir.profile_change import change_lines
from ninferkit.rundir.records import RequestRow
from ninferkit.sweeps.kinds import find_kind
from ninferkit.sweeps.metrics import rows_acceptance
from ninferkit.sweeps.rate import kept_up

WAIT_ALONE_S = 0.25
"""A lone request's wait before prefill above this (and above its own prompt time) is worth a caveat."""
LATE_SEND_S = 0.01
"""A rate-sweep request the client sent later than this after its scheduled time is worth a caveat."""


def acceptance_by_cell(rows: Sequence[RequestRow]) -> dict[tuple[str, str], float]:
    """Each (sweep, cell label)'s acceptance, as every table gives a cell's (sweeps/metrics.rows_acceptance)."""
    found: dict[tuple[str, str], list[RequestRow]] = defaultdict(list)
    for row in rows:
        found[(str(row.sweep), cell_label(row))].append(row)
    return {key: value for key, cell in sorted(found.items()) if (value := rows_acceptance(cell)) is not None}


def cell_spread_pct(rows: Sequence[RequestRow], name: str) -> dict[tuple[str, str], float]:
    """Run-to-run spread per cell (of a number field of RequestRow): sample standard deviation over mean, in %,
    for cells with 2+ values."""
    found: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        value = getattr(row, name)
        if value is not None:
            found[(str(row.sweep), cell_label(row))].append(float(value))
    return {key: 100 * statistics.stdev(values) / statistics.mean(values)
            for key, values in sorted(found.items()) if len(values) > 1 and statistics.mean(values) > 0}


def method(run: RunData) -> list[str]:
    """How the numbers were measured, read back from the rows themselves."""
    rows = run.measured()
    if not rows:
        return ["No request was measured (requests.jsonl is missing or empty), so there is no method to state."]
    warmups = sum(1 for row in run.requests if row.warmup)
    seeds = sorted({row.seed for row in rows if row.seed is not None})
    apis = sorted({str(row.api) for row in rows})
    reps: dict[tuple[str, str], set[int]] = defaultdict(set)
    for row in rows:
        reps[(str(row.sweep), cell_label(row))].add(row.repetition or 0)
    per_cell = sorted({len(values) for values in reps.values()})
    return [
        f"{len(rows)} measured requests in {len(reps)} cells over the {', '.join(apis)} API(s); "
        f"{warmups} warm-up requests are excluded from every number; "
        f"repetitions per cell: {', '.join(str(n) for n in per_cell)}.",
        f"Sampling: {_sampling_by_cell(rows)}, seed {', '.join(str(s) for s in seeds) or _no_seed(rows)}.",
        "Decode and prefill speeds are the server's own accounting (the appendix names each figure's file and "
        "field); TTFT, TPOT, ITL and end-to-end latency are the client's (the appendix's latency "
        "section defines each, with the names other tools give it). Token counts come from the server's usage, never "
        "from counting stream chunks.",
        "Cold context-sweep requests start with a unique salt, so the prefix cache cannot serve the "
        "document; the prefix-reuse sweep measures the cache on purpose.",
    ]


ENGINE_DEFAULT = "the engine's default (no temperature sent)"


def sampling(row: RequestRow) -> str:
    """The sampling a request was sent with, from its cell as planned (`sweeps.temperature`; null: none sent, the
    engine's default, seed 003 §二's '默认采样'), else the temperature the row recorded (a row older than its cell)."""
    cell = row.cell or {}
    if "temperature" in cell:
        planned = cell["temperature"]
        return ENGINE_DEFAULT if planned is None else f"temperature {float(planned):g}"
    return "temperature not recorded" if row.temperature is None else f"temperature {float(row.temperature):g}"


def _no_seed(rows: Sequence[RequestRow]) -> str:
    """Why no row has a seed: none was sent (its cells planned none, or their API has none), or rows too old to say."""
    return "none sent" if any("seed" in (row.cell or {}) for row in rows) else "not recorded"


def _sampling_by_cell(rows: Sequence[RequestRow]) -> str:
    """One sampling for the run (every cell sent alike), or each sampling with the cells it ran: speculative
    acceptance, and with it decode, depends on it, so a cell read beside another must say which it had."""
    cells: dict[str, dict[str, None]] = defaultdict(dict)
    for row in rows:
        variant = (row.cell or {}).get("variant")
        cells[sampling(row)][f"{row.sweep} {cell_label(row)}" + (f" (variant {variant})" if variant else "")] = None
    if len(cells) == 1:
        return next(iter(cells))
    return "; ".join(f"{how} in {len(named)} cell(s): {', '.join(named)}" for how, named in sorted(cells.items()))


def caveats(run: RunData) -> list[str]:
    """Every reason the run's numbers need care, each with the numbers behind it."""
    notes: list[str] = []
    settings = run.settings
    if not run.gpu_available:
        notes.append("CPU run (no GPU): the numbers measure this machine's CPU serving a small model (the embedded "
                     "default's has 135 M parameters); they show the runbook works, not what a GPU serves.")
    accept = acceptance_by_cell(run.measured())
    if accept:
        low, high = min(accept.values()), max(accept.values())
        if 100 * (high - low) > settings.acceptance_gap_pct:
            notes.append(f"Speculative acceptance differs between cells ({100 * low:.0f}% – {100 * high:.0f}%): "
                         "decode speeds of cells with different acceptance are not comparable; compare decode "
                         "only between cells whose acceptance matches.")
    notes.extend(_throttling(run, ""))
    notes.extend(_client_vs_server(run))
    notes.extend(_rate_notes(run))
    notes.extend(_status_notes(run))
    if run.superseded:
        notes.append(f"{run.superseded} rows of requests.jsonl belong to attempts a later rerun of their cell "
                     "replaced (sweeps/cells.jsonl), or to another profile hash; like the sweep tables, no "
                     "number here counts them.")
    if (foreign := run.counted.foreign_note()) is not None:
        notes.append(foreign)
    for table, damage in run.rebuilt.items():
        notes.append(f"{table} was damaged ({damage}); its table here was built again from requests.jsonl "
                     "and sweeps/cells.jsonl, as the sweeps step builds it.")
    spreads = cell_spread_pct(run.measured(), "decode_tok_s_server")
    noisy = {key: value for key, value in spreads.items() if value > settings.spread_pct}
    if noisy:
        (sweep, label), worst = max(noisy.items(), key=lambda item: item[1])
        notes.append(f"{len(noisy)} of {len(spreads)} cells vary by more than {number(settings.spread_pct)}% "
                     f"between repetitions in server decode speed (worst {worst:.0f}%: {sweep} sweep, {label}); "
                     "treat differences smaller than that spread as noise.")
    cached = [row.cached_tokens for row in run.measured("context") if row.cached_tokens]
    if cached:
        most = max(cached)
        notes.append(f"{len(cached)} context-sweep requests reused up to {most} cached prompt tokens (the shared "
                     "chat-template prefix before the salt); prefill speed counts only the tokens processed.")
    if run.manifest.profile_history:
        notes.append(f"The profile changed during this run ({len(run.manifest.profile_history)} earlier "
                     f"hash(es)); rows carry the profile_hash they were measured with.")
    notes += [f"A notebook changed the run's profile (allow_profile_change): {line}."
              for line in change_lines(run.manifest)]
    if run.manifest.git.dirty:
        notes.append("The ninferkit checkout had uncommitted changes when this run was made (manifest git.dirty).")
    return notes


def _client_vs_server(run: RunData) -> list[str]:
    rows = run.measured()
    gaps = [wait for row in rows if (wait := wait_before_prefill_s(row)) is not None]
    ratios = [row.decode_tok_s_client / row.decode_tok_s_server for row in rows
              if row.decode_tok_s_client and row.decode_tok_s_server]
    notes = []
    if gaps:
        notes.append(f"Client TTFT exceeds the server's prompt time by a median of {number(statistics.median(gaps))} s "
                     f"(max {number(max(gaps))} s) over {len(gaps)} requests: HTTP, queueing and the first chunk's "
                     "trip, which a user sees but the engine does not count.")
    notes.extend(_work_before_prefill(run, rows))
    if ratios:
        median = statistics.median(ratios)
        if abs(median - 1) > 0.1:
            notes.append(f"Client-measured decode is {100 * median:.0f}% of the server's (median of {len(ratios)}): "
                         "stream chunking or client load distorts client timing; the server figure is used.")
    return notes


def _work_before_prefill(run: RunData, rows: Sequence[RequestRow]) -> list[str]:
    """Requests sent alone (no other client) that waited longer before their first token than the
    server spent on the whole prompt: time the engine's own timings do not show."""
    alone = [(wait, row.prompt_s_server) for row in rows
             if not _loads_server(row) and (wait := wait_before_prefill_s(row)) is not None
             and row.prompt_s_server is not None]
    slow = [wait for wait, prompt_s in alone if wait > max(WAIT_ALONE_S, prompt_s)]
    if not slow:
        return []
    note = (f"{len(slow)} of {len(alone)} requests sent with no other request in flight waited longer before their "
            f"first token than the server spent on their whole prompt (that wait: median "
            f"{number(statistics.median(slow))} s, max {number(max(slow))} s): the engine did work before prefill "
            "that its timings leave out, so the server's prefill speed overstates what a user sees.")
    engine = run.server.engine if run.server else None
    cause = get_adapter(engine).work_before_prefill(run.server_log) if engine and run.server_log else None
    return [note + (f" The server log says why: {cause}" if cause else "")]


def _loads_server(row: RequestRow) -> bool:
    """Whether the request shared the server with others in flight: its kind says, or its cell sent it as one lane of
    several (a task at `sweeps.tasks.concurrency`)."""
    kind = find_kind(row.sweep)
    return (kind is not None and kind.loads_server) or int((row.cell or {}).get("concurrency") or 1) > 1


def _rate_notes(run: RunData) -> list[str]:
    """Offered rates the server did not keep up with, and requests the client sent late (rate sweep)."""
    cells = {float((rows[0].cell or {}).get("rate_rps") or 0): rows for rows in run.cell_rows("rate").values()}
    notes = []
    verdicts = {rate: kept_up(rows) for rate, rows in sorted(cells.items())}
    behind = [_behind(rate, cells[rate], growth) for rate, (verdict, growth) in verdicts.items() if verdict is False]
    if behind:
        notes.append(f"The server did not keep up with every offered rate: at {', '.join(behind)} requests/s offered "
                     "(the share of that rate it served, from how fast latency grew as requests kept arriving, or the "
                     "requests that failed) the latencies and goodput measure a queue still growing when the cell "
                     "ended, not a steady state.")
    lags = [float(row.schedule_lag_s) for rows in cells.values() for row in rows if row.schedule_lag_s is not None]
    late = [lag for lag in lags if lag > LATE_SEND_S]
    if late:
        notes.append(f"The client sent {len(late)} of {len(lags)} rate-sweep requests more than "
                     f"{number(1000 * LATE_SEND_S)} ms after their scheduled time (at worst {number(1000 * max(late))} "
                     "ms): the offered rate was lower than planned by that much, and the client's machine was busy.")
    return notes


def _behind(rate: float, rows: list[RequestRow], growth: float | None) -> str:
    """'4 (80%)': an offered rate and the share of it served; '4 (3 of 20 failed)' when requests failed."""
    failed = sum(1 for row in rows if row.status != "ok")
    if failed:
        return f"{rate:g} ({failed} of {len(rows)} failed)"
    return f"{rate:g} ({100 / (1 + (growth or 0.0)):.0f}%)"


def _status_notes(run: RunData) -> list[str]:
    counts: dict[str, int] = defaultdict(int)
    for row in run.requests:
        counts[row.status] += 1
    bad = {status: count for status, count in sorted(counts.items()) if status != "ok"}
    if not bad:
        return []
    listed = ", ".join(f"{count} {status}" for status, count in bad.items())
    return [f"{listed} of {sum(counts.values())} requests are left out of every speed figure; the errors "
            "section lists them."]


def _throttling(run: RunData, prefix: str) -> list[str]:
    """A power cap alone is the card at its power limit (its speeds at that limit, which another limit
    changes); a thermal or hardware slowdown means it ran slower than it can."""
    notes = []
    for gpu in gpu_conditions(run):
        if gpu.throttled_fraction == 0:
            continue
        share = f"{100 * gpu.throttled_fraction:.0f}% of {gpu.samples} samples"
        if THROTTLING.intersection(gpu.throttle_reasons) == {"sw_power_cap"}:
            limit = _power_limit_w(run, gpu.gpu)
            notes.append(f"{prefix}GPU {gpu.gpu} was held at its power limit{f' ({limit:,.0f} W)' if limit else ''} "
                         f"in {share} (sw_power_cap): these are its speeds at that limit; a run at another power "
                         "limit is not comparable.")
        else:
            notes.append(f"{prefix}GPU {gpu.gpu} throttled in {share} "
                         f"({', '.join(gpu.throttle_reasons) or 'reason not reported'}): speeds from this run "
                         "understate the unthrottled card; flag it before comparing with other runs.")
    return notes


def _power_limit_w(run: RunData, gpu: str) -> float | None:
    return next((g.power_limit_w for g in run.probe_gpus if str(g.index) == gpu), None)


def comparison_caveats(runs: Sequence[RunData]) -> list[str]:
    """Reasons a comparison of runs needs care: acceptance, throttling, and what differs between them."""
    notes: list[str] = []
    base = runs[0]
    gap_pct = base.settings.acceptance_gap_pct
    base_accept = acceptance_by_cell(base.measured())
    for other in runs[1:]:
        other_accept = acceptance_by_cell(other.measured())
        differing = [(key, base_accept[key], other_accept[key]) for key in sorted(set(base_accept) & set(other_accept))
                     if 100 * abs(base_accept[key] - other_accept[key]) > gap_pct]
        for (sweep, label), a, b in differing:
            notes.append(f"{sweep} / {label}: acceptance {100 * a:.0f}% in {base.run_id} vs {100 * b:.0f}% in "
                         f"{other.run_id}; its decode delta is not comparable.")
        changed = _profile_diff(base.profile, other.profile)
        if changed:
            notes.append(f"{other.run_id} differs from {base.run_id} in: {', '.join(changed)}.")
    for run in runs:
        notes.extend(_throttling(run, f"{run.run_id}: "))
    if any(not run.gpu_available for run in runs):
        notes.append("At least one run is a CPU run; CPU timings vary with whatever else the machine runs.")
    return notes


IGNORED_PROFILE_KEYS = ("serve.port",)


def _profile_diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """Key paths whose values differ between two recorded profiles (the port is not a difference)."""
    out = []
    for key in sorted(set(a) | set(b)):
        path = f"{prefix}{key}"
        left, right = a.get(key), b.get(key)
        if isinstance(left, dict) and isinstance(right, dict):
            out.extend(_profile_diff(left, right, path + "."))
        elif left != right and path not in IGNORED_PROFILE_KEYS:
            out.append(f"{path} ({left!r} → {right!r})")
    return out
