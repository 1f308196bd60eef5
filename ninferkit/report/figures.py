"""The write-up's figures, one message each, drawn only when the run has the data for them.

Figures use matplotlib's object API on the Agg canvas (no pyplot state, no display needed) and
are saved with a fixed DPI and no Software/date metadata, so the same run gives the same bytes.
"""

from __future__ import annotations

import io
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import FuncFormatter, NullFormatter

from ninferkit.measure.latency import samples
from ninferkit.report.conditions import load_window
from ninferkit.report.data import RunData
from ninferkit.report.document import Figure
from ninferkit.report.headline import concurrency_groups
from ninferkit.rundir.records import RequestRow
from ninferkit.rundir.runs import write_bytes_atomic
from ninferkit.sweeps.metrics import request_acceptance

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


@dataclass(frozen=True)
class FigureSpec:
    """A named figure: its file, its one-line message, and the function that draws it (None: no data)."""

    name: str
    caption: str
    draw: Callable[[RunData], MplFigure | None]


def _new(width: float = 7.0, height: float = 4.0) -> MplFigure:
    figure = MplFigure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _by_cell(rows: Sequence[RequestRow], x: str, y: str) -> tuple[list[float], list[float]]:
    """Median of y per distinct x (number fields of RequestRow), sorted by x (the line drawn through the
    per-request points)."""
    groups: dict[float, list[float]] = defaultdict(list)
    for x_value, y_value in _points(rows, x, y):
        groups[x_value].append(y_value)
    xs = sorted(groups)
    return xs, [statistics.median(groups[value]) for value in xs]


def _token_axis(ax: Axes, rows: Sequence[RequestRow]) -> None:
    """A log2 x axis of prompt lengths, ticked at the lengths measured and labelled as plain numbers."""
    lengths = sorted({row.prompt_tokens for row in rows if row.prompt_tokens is not None})
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [f"{length:,}" for length in lengths])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _one_two_five(value: float, _: int) -> str:
    """Label a log axis at 1, 2 and 5 times a power of ten only, as plain numbers (0.05, not 5x10^-2)."""
    if value <= 0:
        return ""
    mantissa = round(value / 10 ** math.floor(math.log10(value)), 3)
    return f"{value:g}" if mantissa in (1, 2, 5) else ""


PLAIN = FuncFormatter(_one_two_five)


def _points(rows: Sequence[RequestRow], x: str, y: str) -> list[tuple[float, float]]:
    """(x, y) of the rows that carry both (number fields of RequestRow)."""
    pairs = ((getattr(row, x), getattr(row, y)) for row in rows)
    return [(float(x_value), float(y_value)) for x_value, y_value in pairs
            if x_value is not None and y_value is not None]


def _scatter(rows: Sequence[RequestRow], x: str, y: str) -> tuple[list[float], list[float]]:
    """The xs and the ys of `_points`, as a scatter plot takes them."""
    pairs = _points(rows, x, y)
    return [p[0] for p in pairs], [p[1] for p in pairs]


def context_speed(run: RunData) -> MplFigure | None:
    rows = run.measured("context")
    if not any(row.decode_tok_s_server is not None for row in rows):
        return None
    figure = _new(9.0, 3.8)
    axes = figure.subplots(1, 2, sharex=True)
    for ax, name, title, color in ((axes[0], "prefill_tok_s_server", "Prefill", COLORS[0]),
                                   (axes[1], "decode_tok_s_server", "Decode", COLORS[1])):
        ax.scatter(*_scatter(rows, "prompt_tokens", name), s=14, alpha=0.5, color=color, label="each request")
        ax.plot(*_by_cell(rows, "prompt_tokens", name), marker="o", color=color, label="median")
        _token_axis(ax, rows)
        ax.set_title(title)
        ax.set_xlabel("prompt length, tokens (server usage)")
        ax.set_ylabel(f"{title.lower()} speed, tok/s (server)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle("Prefill and decode speed vs prompt length")
    return figure


def context_ttft(run: RunData) -> MplFigure | None:
    rows = run.measured("context")
    if not any(row.ttft_client_s is not None for row in rows):
        return None
    figure = _new()
    ax = figure.subplots()
    ax.scatter(*_scatter(rows, "prompt_tokens", "ttft_client_s"), s=14, alpha=0.5, color=COLORS[0],
               label="TTFT, each request (client)")
    ax.plot(*_by_cell(rows, "prompt_tokens", "ttft_client_s"), marker="o", color=COLORS[0],
            label="TTFT median (client)")
    if any(row.prompt_s_server is not None for row in rows):
        ax.plot(*_by_cell(rows, "prompt_tokens", "prompt_s_server"), marker="s", linestyle="--", color=COLORS[3],
                label="prompt processing median (server)")
    _token_axis(ax, rows)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(PLAIN)
    ax.yaxis.set_minor_formatter(PLAIN)
    ax.set_xlabel("prompt length, tokens (server usage)")
    ax.set_ylabel("time to first token, s (log scale)")
    ax.set_title("Time to first token grows with prompt length")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return figure


def tasks_acceptance(run: RunData) -> MplFigure | None:
    by_task: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in run.measured():
        task, accepted, decode = (row.cell or {}).get("task"), request_acceptance(row), row.decode_tok_s_server
        if task is not None and accepted is not None and decode is not None:
            by_task[str(task)].append((100 * accepted, float(decode)))
    if not by_task:
        return None
    figure = _new()
    ax = figure.subplots()
    for index, (task, points) in enumerate(sorted(by_task.items())):
        xs, ys = [x for x, _ in points], [y for _, y in points]
        ax.scatter(xs, ys, s=22, color=COLORS[index % len(COLORS)], label=task)
        ax.annotate(task, (statistics.median(xs), statistics.median(ys)), fontsize=8, xytext=(4, 4),
                    textcoords="offset points")
    ax.set_xlabel("speculative acceptance, % (accepted / drafted, server)")
    ax.set_ylabel("decode speed, tok/s (server)")
    ax.set_title("Decode speed follows speculative acceptance, task by task")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figure


def concurrency_scaling(run: RunData) -> MplFigure | None:
    groups = concurrency_groups(run)
    if not groups:
        return None
    figure = _new()
    ax = figure.subplots()
    xs = [float(g.concurrency) for g in groups]
    ys = [g.aggregate_output_tok_s_client for g in groups]
    levels = sorted(set(xs))
    medians = [statistics.median(y for x, y in zip(xs, ys, strict=True) if x == level) for level in levels]
    ax.plot(levels, medians, marker="o", color=COLORS[0], label="measured")
    ax.plot(levels, [medians[0] * level / levels[0] for level in levels], linestyle=":", color="#888888",
            label="linear scaling from the lowest level")
    ax.set_xticks(levels)
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("aggregate output, tok/s (client)")
    ax.set_title("Aggregate output vs concurrent requests")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figure


def prefix_reuse_ttft(run: RunData) -> MplFigure | None:
    timed = [(row, row.ttft_client_s) for row in run.measured("prefix_reuse") if row.ttft_client_s is not None]
    if not timed:
        return None
    order: list[str] = []
    values: dict[str, list[float]] = defaultdict(list)
    for row, ttft in timed:
        scenario = str((row.cell or {}).get("scenario", row.cell_id))
        if scenario not in order:
            order.append(scenario)
        values[scenario].append(float(ttft))
    figure = _new()
    ax = figure.subplots()
    positions = list(range(len(order)))
    ax.bar(positions, [statistics.median(values[s]) for s in order], color=COLORS[0], alpha=0.7, label="median")
    for position, scenario in zip(positions, order, strict=True):
        ax.scatter([position] * len(values[scenario]), values[scenario], s=14, color="#222222", zorder=3)
    ax.set_xticks(positions, order, rotation=20, ha="right")
    ax.set_xlabel("prefix-reuse scenario")
    ax.set_ylabel("time to first token, s (client)")
    ax.set_title("Prefix cache: TTFT per scenario (dots: repetitions)")
    ax.grid(alpha=0.3, axis="y")
    return figure


def telemetry_timeline(run: RunData) -> MplFigure | None:
    rows = run.nvml()
    if not rows:
        return None
    start = min(float(row.t_mono) for row in rows)
    figure = _new(9.0, 4.5)
    power_ax, clock_ax = figure.subplots(2, 1, sharex=True)
    gpus = sorted({str(row.gpu or 0) for row in rows})
    for index, gpu in enumerate(gpus):
        mine = sorted((row for row in rows if str(row.gpu or 0) == gpu), key=lambda r: r.t_mono)
        t = [float(row.t_mono) - start for row in mine]
        power_ax.plot(t, [row.power_w for row in mine], color=COLORS[index % len(COLORS)], label=f"GPU {gpu}")
        clock_ax.plot(t, [row.sm_clock_mhz for row in mine], color=COLORS[index % len(COLORS)])
        throttled = [x for x, row in zip(t, mine, strict=True) if row.throttled]
        if throttled:
            clock_ax.scatter(throttled, [0] * len(throttled), marker="|", color=COLORS[1], label="throttled")
    window = load_window(run)
    if window is not None:
        for ax in (power_ax, clock_ax):
            ax.axvspan(window[0] - start, window[1] - start, color="#cccccc", alpha=0.3, lw=0)
    power_ax.set_ylabel("power, W")
    clock_ax.set_ylabel("SM clock, MHz")
    clock_ax.set_xlabel("time since first sample, s (shaded: requests in flight)")
    power_ax.set_title("GPU power and SM clock during the run")
    power_ax.legend(fontsize=8)
    for ax in (power_ax, clock_ax):
        ax.grid(alpha=0.3)
    return figure


LATENCIES = (("ttft_client_s", "TTFT"), ("tpot_client_s", "TPOT"), ("e2e_client_s", "end to end"))
"""The latencies whose distribution latency_distributions draws: the client's, one sample per request."""


def latency_distributions(run: RunData) -> MplFigure | None:
    """Each sweep's TTFT, TPOT and end-to-end latency as an empirical CDF over its measured requests (every
    request a step), so the spread and the tail show where a table gives a median."""
    sweeps = [name for name in dict.fromkeys(str(row.sweep) for row in run.measured())
              if any(row.ttft_client_s is not None for row in run.measured(name))]
    if not sweeps:
        return None
    figure = _new(10.0, 3.6)
    axes = figure.subplots(1, len(LATENCIES))
    for ax, (metric, title) in zip(axes, LATENCIES, strict=True):
        for index, sweep in enumerate(sweeps):
            values = sorted(1000 * value for value in samples(run.measured(sweep), metric))
            if values:
                shares = [(rank + 1) / len(values) for rank in range(len(values))]
                ax.step(values, shares, where="post", color=COLORS[index % len(COLORS)],
                        label=f"{sweep.replace('_', ' ')} ({len(values)})")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{title}, ms (client; log scale)")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("share of requests at or below")
    axes[0].legend(fontsize=8, title="sweep (requests)", title_fontsize=8)
    figure.suptitle("Latency distributions per sweep")
    return figure


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("context_speed", "Prefill and decode speed (server) vs prompt length; dots are requests, "
               "lines are medians per cell.", context_speed),
    FigureSpec("context_ttft", "Time to first token (client) vs prompt length on a log scale, with the "
               "server's prompt-processing time.", context_ttft),
    FigureSpec("tasks_acceptance", "Decode speed vs speculative acceptance, per task.", tasks_acceptance),
    FigureSpec("concurrency_scaling", "Aggregate output tokens per second vs concurrent requests, against "
               "linear scaling.", concurrency_scaling),
    FigureSpec("prefix_reuse_ttft", "Time to first token per prefix-reuse scenario.", prefix_reuse_ttft),
    FigureSpec("telemetry_timeline", "GPU power and SM clock over the run (NVML samples).", telemetry_timeline),
)


SWEEP_FIGURES: tuple[FigureSpec, ...] = (
    *(spec for spec in FIGURES if spec.name in ("context_speed", "context_ttft", "concurrency_scaling",
                                                "prefix_reuse_ttft")),
    FigureSpec("latency_distributions", "TTFT, TPOT and end-to-end latency per sweep as the share of requests at "
               "or below each value (client, log scale).", latency_distributions),
)
"""What 03_sweeps shows where the sweep ran: the write-up's figures of the sweeps, and the latency distributions."""


def write_figures(run: RunData, folder: Path, dpi: int, specs: Sequence[FigureSpec] = FIGURES) -> dict[str, Figure]:
    """Draw every figure of `specs` the data supports into folder/*.png; remove PNGs of figures that no longer
    apply."""
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Figure] = {}
    for spec in specs:
        path = folder / f"{spec.name}.png"
        drawn = spec.draw(run)
        if drawn is None:
            path.unlink(missing_ok=True)
            continue
        image = io.BytesIO()
        drawn.savefig(image, format="png", dpi=dpi, metadata={"Software": None})
        write_bytes_atomic(path, image.getvalue())  # a link planted there is replaced, never written through
        written[spec.name] = Figure(f"{folder.name}/{path.name}", spec.caption, path)
    return written
