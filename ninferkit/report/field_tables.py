"""The field reports' tables that no single sweep table holds, in the reports' own layout.

The benchmark views (report/views.py) show one sweep table each; the posts users write also lay the same
numbers out across cells and across the engine's own lines: the task suite with its prompt time at each depth
(seed 000 §2.3), the two long requests lane by lane, decode batching from the engine's windows, slots
against client lanes with the speed-up, the engine's lines that show prefill running one lane at a time
(§2.4 a–d), coding beside agent by input length (seed 003) and the average decode beside the best window
(seed 004). Each builder returns its blocks from the run's tables, rows, telemetry and log; where the run
has no data for a table it says which plan would fill it. Engine figures are labelled as the engine's,
client figures as the client's.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from ninferkit.params.variants import BASE
from ninferkit.report.data import RunData
from ninferkit.report.document import EMPTY, Block, Code, Note, Paragraph, Section, Table
from ninferkit.report.fmt import counts, number, seconds
from ninferkit.rundir.records import RequestRow, TelemetrySample
from ninferkit.rundir.servings import VARIANT, launch_name
from ninferkit.sweeps.cell import repeat_of
from ninferkit.sweeps.kinds.columns import RATE_DECIMALS
from ninferkit.sweeps.metrics import cell_acceptance

NONE = "—"


def sections(run: RunData) -> list[Section]:
    """The sections, in the reports' order."""
    return [Section("Tasks at each depth", tasks_by_depth(run)),
            Section("Concurrency, lane by lane", concurrency_blocks(run)),
            Section("Coding and agent by input length", coding_and_agent(run)),
            Section("Average decode against the best engine window", decode_windows(run))]


def _value(frame: pd.DataFrame, index: int, name: str) -> Any:
    if name not in frame.columns:
        return None
    value = frame[name].iloc[index]
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and value.is_integer() and name.endswith(("tokens_median", "tokens_target",
                                                                         "concurrency", "context_depth")):
        value = int(value)  # a count the CSV holds as a float
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else value


def _decode_mtp(frame: pd.DataFrame, index: int) -> str:
    """The cell's decode rate, with its acceptance where the table has any (a run without speculation has none, and a
    column of "/ —" would say nothing)."""
    decode = _value(frame, index, "decode_tok_s_server_median")
    share = cell_acceptance(_value(frame, index, "accepted_tokens_server_sum"),
                            _value(frame, index, "drafted_tokens_server_sum"),
                            _value(frame, index, "acceptance_server_median"))
    if decode is None:
        return NONE
    if not _speculated(frame):
        return number(decode, RATE_DECIMALS)
    return number(decode, RATE_DECIMALS) + (f" / {100 * float(share):.0f}%" if share is not None else " / —")


def _speculated(frame: pd.DataFrame) -> bool:
    return "acceptance_server_median" in frame.columns and bool(frame["acceptance_server_median"].notna().any())


def _decode_header(frame: pd.DataFrame) -> str:
    return "decode tok/s (server)" + (" / acceptance" if _speculated(frame) else "")


def _own_speculation(tasks: pd.DataFrame) -> pd.DataFrame:
    """The task cells measured with the profile's own speculation (not the A/B's `off` side)."""
    if "speculation" not in tasks.columns:
        return tasks
    own = tasks[tasks["speculation"] != "off"]
    return own if len(own) else tasks


def tasks_by_depth(run: RunData) -> list[Block]:
    """Seed 000 §2.3: one row per task, its output tokens, and the server's prompt time and decode / acceptance at
    each depth. Where the tasks did not all run at the same depths (`sweeps.tasks.task_depths`: seed 000's summary
    after its document, the others alone) a column per depth would be half empty: each task's row then names the
    document it was sent after, as the report's "摘要（5.9K 文档）" does."""
    tasks = run.tables.get("tasks")
    if tasks is None or not len(tasks):
        return [Note("No tasks table: run the tasks sweep (sweeps.tasks) for the report's task table; each of "
                     "sweeps.tasks.depths is a column.")]
    tasks = _own_speculation(tasks).reset_index(drop=True)
    cells: dict[str, dict[int, int]] = defaultdict(dict)
    for i in range(len(tasks)):
        if pd.notna(tasks["context_depth"].iloc[i]):
            cells[str(tasks["task"].iloc[i])][int(tasks["context_depth"].iloc[i])] = i
    depths = sorted({depth for found in cells.values() for depth in found})
    shared = all(set(found) == set(depths) for found in cells.values())
    decode = _decode_header(tasks)
    caption = ("tables/tasks.csv: per task, the server's prompt time (the field reports' TTFT: prompt processing, "
               "without the queue) and the engine's decode rate with its acceptance, in seed 000 §2.3's layout. A "
               "depth is the tokens of document placed before the task's instruction (0: the instruction alone, tens "
               "of tokens); the server's settings are the run's for every ")
    if shared:
        rows = [(name, _outputs(tasks, found.values()),
                 *(value for depth in depths for value in _prompt_and_decode(tasks, found[depth])))
                for name, found in cells.items()]
        headers = [f"{_depth_words(depth)}: {column}" for depth in depths for column in (PROMPT_TIME, decode)]
        blocks: list[Block] = [Table(("task", "output tokens", *headers), tuple(rows), caption + "column.")]
        if len(depths) < 2:
            blocks.append(Note("One depth was measured: each further depth in sweeps.tasks.depths adds a column."))
        return blocks
    rows = [(name if depth == 0 else f"{name} ({_depth_words(depth)})", _outputs(tasks, [index]),
             *_prompt_and_decode(tasks, index))
            for name, found in cells.items() for depth, index in sorted(found.items())]
    return [Table(("task", "output tokens", PROMPT_TIME, decode), tuple(rows),
                  caption + "row; a task sent after a document says so (sweeps.tasks.task_depths).")]


PROMPT_TIME = "prompt time, s (server)"


def _outputs(tasks: pd.DataFrame, indexes: Iterable[int]) -> str:
    parts = ("median", "min", "max")
    return " / ".join(sorted({counts(*(_value(tasks, i, f"completion_tokens_{part}") for part in parts))
                              for i in indexes}))


def _prompt_and_decode(tasks: pd.DataFrame, index: int) -> tuple[str, str]:
    return seconds(_value(tasks, index, "prompt_s_server_median")), _decode_mtp(tasks, index)


def _depth_words(depth: int) -> str:
    """A tasks column's heading: what was sent before the instruction."""
    return "instruction alone" if depth == 0 else f"after {number(depth)} document tokens"


def concurrency_blocks(run: RunData) -> list[Block]:
    """Seed 000 §2.4 (a)–(d)."""
    return [*_lanes(run), *_batching(run), *_slots_by_lanes(run), *_engine_lines(run)]


def _lane_cells(run: RunData) -> list[tuple[str, str, list[RequestRow]]]:
    """Every cell in which two or more requests ran at once, on every launch (the profile's own serving and each
    variant's): the concurrency sweep's cells of two or more clients and the tasks sweep's of two or more requests
    at once (sweeps.tasks.concurrency, seed 003's C2 rows), as (launch, the cell in words, its measured requests).
    A cell run several times (sweeps.repeats) gives its first repeat: its lanes, not a table per repeat."""
    found = []
    for sweep in LANE_SWEEPS:
        for rows in run.cell_rows(sweep, variants=True).values():
            cell = rows[0].cell or {} if rows else {}
            if int(cell.get("concurrency") or 0) >= 2 and repeat_of(cell) == 0:
                found.append((launch_name(cell), sweep, cell, rows))
    found.sort(key=lambda item: (item[0] != BASE, item[0], LANE_SWEEPS.index(item[1]),
                                 int(item[2].get("prompt_tokens") or item[2].get("context_depth") or 0),
                                 int(item[2].get("concurrency") or 0), str(item[2].get("task") or "")))
    return [(launch, _cell_words(sweep, cell), rows) for launch, sweep, cell, rows in found]


LANE_SWEEPS = ("concurrency", "tasks")
"""The sweeps whose cells send several requests at once by design (the rate sweep's overlap is its load, not lanes)."""


def _cell_words(sweep: str, cell: dict[str, Any]) -> str:
    """A cell of lanes as the reports name their pairs: "2 clients at 65,536 prompt tokens", "coding, 2 at once,
    after 32,768 document tokens"."""
    if sweep == "tasks":
        depth = int(cell.get("context_depth") or 0)
        return f"{cell.get('task')}, {cell.get('concurrency')} at once, {_depth_words(depth)}"
    return (f"{cell.get('concurrency')} clients at {number(cell.get('prompt_tokens'))} prompt tokens"
            + (" (cached)" if cell.get("cached") else ""))


def queued_s(row: RequestRow) -> tuple[float | None, str]:
    """A lane's wait in the engine's queue and where it comes from: the engine's record (NInfer G1 writes no queue
    field: its request log's TTFT less its prepare and prefill times, engines/ninfer/request_log.py), else the
    engine's TTFT less its prompt time (a server log's `done` line)."""
    if row.queue_s_server is not None:
        return float(row.queue_s_server), "the engine's record"
    if row.ttft_s_server is not None and row.prompt_s_server is not None:
        return max(0.0, float(row.ttft_s_server) - float(row.prompt_s_server)), "engine TTFT - prompt time"
    return None, ""


def _lanes(run: RunData) -> list[Block]:
    """Seed 000 §2.4(a) and seed 003 观察 1: per cell of requests at once, each lane's first request in the order the
    engine admitted it, with its wait in the queue, its own prefill and the TTFT that holds both (the second of
    003's pairs: "39 s / 80 s at 32K, 87 s / 177 s at 64K"), then its decode; one row per lane of every launch's
    such cells, each naming its launch and its cell. A cell none of whose lanes has the engine's numbers (vLLM
    attributes none while another request is in flight) is left out: its rows would hold only each client's wall,
    whose range per cell the slots-against-lanes table already gives."""
    cells = _lane_cells(run)
    if not cells:
        return [Note("lanes: no cell ran two or more requests at once: run the concurrency sweep with two "
                     "lanes at the longest context (sweeps.concurrency.levels [2], prompt_tokens near "
                     "serve.max_context), or the tasks sweep with requests at once (sweeps.tasks.concurrency).")]
    lines: list[tuple[str, ...]] = []
    how: set[str] = set()
    cut: list[str] = []
    bare: list[tuple[str, list[RequestRow]]] = []
    for launch, words, rows in cells:
        first: dict[int | None, RequestRow] = {}
        for row in sorted(rows, key=lambda r: (r.repetition or 0, r.t_send or 0)):
            first.setdefault(row.client_index, row)  # each lane's first request: the lanes start together
        if not any(_engine_figures(row) for row in first.values()):
            bare.append((words, list(first.values())))
            continue
        admitted = sorted(first.values(),
                          key=lambda r: (queued_s(r)[0] is None, queued_s(r)[0] or 0.0, r.client_index or 0))
        own: list[tuple[str, ...]] = []
        for row in admitted:
            queued, source = queued_s(row)
            if source:
                how.add(source)
            named: tuple[str, ...] = (launch,) if run.variants else ()
            own.append(named + (
                words, f"L{len(own) + 1} (client {row.client_index})", number(row.prompt_tokens), seconds(queued),
                seconds(row.prompt_s_server), seconds(row.ttft_s_server),
                number(row.prefill_tok_s_server, RATE_DECIMALS), number(row.decode_tok_s_server, RATE_DECIMALS),
                number(row.completion_tokens), seconds(row.e2e_client_s), row.status))
        if len(own) > 2 * LANES_AT_EACH_END:
            cut.append(f"{words}: the first {LANES_AT_EACH_END} and the last {LANES_AT_EACH_END} of {len(own)} lanes "
                       f"admitted, the other {len(own) - 2 * LANES_AT_EACH_END} are rows of requests.jsonl")
            own = [*own[:LANES_AT_EACH_END], *own[-LANES_AT_EACH_END:]]
        lines += own
    why = _without_engine_figures(run, bare)
    if not lines:
        return [Note(f"lanes: no table: {why}.")]
    columns = (("launch",) if run.variants else ()) + LANE_COLUMNS
    keep = [i for i, column in enumerate(columns)
            if column not in ENGINE_LANE_COLUMNS or any(line[i] not in EMPTY for line in lines)]
    if all(line[-1] == "ok" for line in lines):
        keep.remove(len(columns) - 1)
    shown = [columns[i] for i in keep]
    kept = [tuple(line[i] for i in keep) for line in lines]
    table = Table(tuple(shown), tuple(kept), _lanes_caption(run, shown, how, kept, cut, why))
    order = ("in the order the engine admitted them (its queue)" if "queued, s (server)" in shown
             else "by client (the engine recorded no queue wait)")
    return [Paragraph(f"Requests at once, lane by lane: each lane's first request, {order}."), table]


LANE_COLUMNS = ("cell", "lane", "prompt tokens", "queued, s (server)", "prompt time, s (server)",
                "TTFT incl. queue, s (engine)", "prefill tok/s (server)", "decode tok/s (server)", "output tokens",
                "wall, s (client)", "status")
ENGINE_LANE_COLUMNS = LANE_COLUMNS[3:8]
"""The lane table's columns from the engine's record: a column none of the shown lanes has is not written."""


def _engine_figures(row: RequestRow) -> bool:
    """Whether a lane has any of the engine's own numbers (queue, prompt time, TTFT, decode)."""
    return queued_s(row)[0] is not None or any(value is not None for value in (
        row.prompt_s_server, row.ttft_s_server, row.prefill_tok_s_server, row.decode_tok_s_server))


def _without_engine_figures(run: RunData, bare: list[tuple[str, list[RequestRow]]]) -> str:
    """The cells left out of the lane table, and why their lanes have no engine numbers (the sweeps step's own note
    on the rows, the commonest first)."""
    if not bare:
        return ""
    notes = Counter(row.server_note for _, rows in bare for row in rows if row.server_note)
    reason = notes.most_common(1)[0][0] if notes else f"{run.engine or 'the engine'} kept no record of them"
    return (f"no lane of {', '.join(words for words, _ in bare)} has the engine's own numbers ({reason}), so their "
            "rows would show only each client's wall, whose range per cell the slots-against-lanes table gives")


def _lanes_caption(run: RunData, shown: list[str], how: set[str], lines: list[tuple[str, ...]], cut: list[str],
                   left_out: str) -> str:
    """The lane table's caption, saying what each shown column is and only those."""
    parts = ["requests.jsonl with the engine's record: every cell in which two or more requests ran at once (the "
             "concurrency sweep's clients, the tasks sweep's requests at once)"
             + (", on every launch: the profile's own serving (base) and each variant's" if run.variants else "")
             + "."]
    if "queued, s (server)" in shown:
        parts.append(f"Queued is the wait before the lane's own prefill ({', '.join(sorted(how))}).")
    if "prompt time, s (server)" in shown:
        parts.append("Prompt time is the field reports' TTFT (the server's prompt processing, without the queue).")
    if "TTFT incl. queue, s (engine)" in shown:
        parts.append("TTFT incl. queue is the engine's from arrival to first token, "
                     + ("the two together " if "queued, s (server)" in shown else "")
                     + "(seed 000 §2.4(a)'s bracketed \"engine records 8m8.7s\", seed 003's second request: queue + "
                       "its own prefill).")
    if "decode tok/s (server)" in shown:
        parts.append("Decode is the engine's.")
    parts.append("Wall is the client's, send to last byte.")
    at = [i for i, column in enumerate(shown) if column in ENGINE_LANE_COLUMNS]
    if any(all(line[i] in EMPTY for i in at) for line in lines):
        parts.append("A lane without the engine's numbers is one whose join the sweeps step withheld (the Benchmarks "
                     "notes say why).")
    if left_out:
        parts.append(f"Left out: {left_out}.")
    if cut:
        parts.append("Cut: " + "; ".join(cut) + ".")
    return " ".join(parts)


LANES_AT_EACH_END = 4
"""A post shows the first and the last lanes admitted (how the queue grew); a 32-lane table is raw detail."""


def _count(values: dict[str, Any], name: str) -> int | None:
    """A state count the engine printed on its throughput line (running, prefilling, ...); None where it prints none."""
    value = values.get(name)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def whole_decode(opened: dict[str, Any] | None, closed: dict[str, Any]) -> bool:
    """Whether a throughput window only decoded, from its first to its last second (seed 000 §2.4(b)'s windows):
    no prefill token in it, and where the engine prints its state, a request decoding when the window opened (the
    line before) and when it closed, none prefilling at its close. A window in which one request decoded its last
    tokens and the engine then sat idle or began a prefill is the tail of a request, not a batch's rate."""
    if closed.get("prefill_tok_s") != 0 or not (closed.get("decode_tok_s") or 0) > 0:
        return False
    ready, prefilling = _count(closed, "decode_ready"), _count(closed, "prefilling")
    if ready is None and prefilling is None:
        return True  # an engine that prints no state: the rates are all there is
    before = _count(opened or {}, "decode_ready")
    return (ready or 0) >= 1 and not prefilling and (before or 0) >= 1


def _decode_alone(telemetry: Sequence[TelemetrySample]) -> tuple[list[TelemetrySample], int]:
    """The engine's windows of decode alone from open to close (:func:`whole_decode`), and how many other
    windows decoded (beside a prefill, or only in part)."""
    lines = [r for r in telemetry if r.source == "engine_log" and r.interval_s]
    alone = [row for before, row in zip([None, *lines][:len(lines)], lines, strict=True)
             if whole_decode(before.as_dict() if before else None, row.as_dict())]
    decoded = sum(1 for r in lines if (r.decode_tok_s or 0) > 0)
    return alone, decoded - len(alone)


def _batch(row: TelemetrySample) -> float | None:
    """The window's average decode batch as the engine printed it (a field only throughput lines carry)."""
    value = row.as_dict().get("batch")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def launch_spans(run: RunData) -> list[tuple[float, float, str]]:
    """(first send, last byte, launch) of every cell the run measured on any launch, warm-ups included: the engine's
    lines that fall inside one are that launch's."""
    spans: dict[str, list[float]] = {}
    names: dict[str, str] = {}
    for row in [*run.requests, *run.variant_requests]:
        if row.t_send is None or row.t_done is None:
            continue
        span = spans.setdefault(str(row.cell_id), [float(row.t_send), float(row.t_done)])
        span[0], span[1] = min(span[0], float(row.t_send)), max(span[1], float(row.t_done))
        names[str(row.cell_id)] = launch_name(row.cell)
    return [(start, end, names[cell]) for cell, (start, end) in spans.items()]


def launch_of(spans: list[tuple[float, float, str]], at: float) -> str | None:
    return next((name for start, end, name in spans if start <= at <= end), None)


def _against(values: dict[tuple[str, Any], Any], launch: str, key: Any) -> tuple[str, Any]:
    """The reference a ratio is taken against: `launch`'s own value at `key`, else the first other launch's, with
    the launch it came from."""
    return next(((name, value) for (name, found), value in sorted(values.items(), key=lambda item: item[0][0] != launch)
                 if found == key and value), (launch, None))


def _ratio(value: float | None, launch: str, against: tuple[str, Any]) -> str:
    name, base = against
    if not value or not base:
        return NONE
    return f"{value / base:.2f}x" + (f" (against {name})" if name != launch else "")


def _batching(run: RunData) -> list[Block]:
    title = Paragraph("Decode batching, from the engine's own windows of decode alone.")
    alone, mixed = _decode_alone(run.telemetry)
    with_batch = [(r, batch) for r in alone if (batch := _batch(r)) is not None]
    if not with_batch:
        engine_lines = sum(1 for r in run.telemetry if r.source == "engine_log")
        why = ("the engine printed no throughput line" if not engine_lines else
               f"none of the engine's {engine_lines} throughput lines is a window that only decoded from open to "
               "close, with its batch" + (f" ({mixed} decoded beside a prefill or only in part)" if mixed else ""))
        return [Note(f"batching: no table, {why}. Fill it with the concurrency sweep at 1, 2 and 4 "
                                 "clients and outputs long enough to decode two whole windows after the prefill "
                                 "(output_tokens at least twice the window length x the decode rate).")]
    spans = launch_spans(run) if run.variants else []
    outside = 0
    groups: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    for row, batch in with_batch:
        launch = launch_of(spans, float(row.t_mono)) if run.variants else BASE
        if launch is None:
            outside += 1  # a window between cells: no launch's cell was running
            continue
        groups[(launch, max(1, round(batch)))].append((batch, float(row.decode_tok_s or 0)))
    rates = {key: statistics.median(rate for _, rate in rows) for key, rows in groups.items()}
    ones = {(launch, lanes): rate for (launch, lanes), rate in rates.items() if lanes == 1}
    lines = tuple(((launch,) if run.variants else ()) + (
        number(statistics.median(batch for batch, _ in groups[(launch, lanes)])), number(rates[(launch, lanes)]),
        str(len(groups[(launch, lanes)])), _ratio(rates[(launch, lanes)], launch, _against(ones, launch, 1)))
        for launch, lanes in sorted(groups, key=lambda key: (key[0] != BASE, key[0], key[1])))
    window = statistics.median(float(row.interval_s or 0) for row, _ in with_batch)
    caption = (f"telemetry.jsonl: the engine's {window:g} s throughput lines in which no prefill ran, grouped by their "
               f"average decode batch; aggregate decode is the median of the windows' rates"
               + ("" if ones else "; no window at batch 1, so no ratio") + "."
               + (" Each window is the launch's whose cell was running when the engine printed it (from the first "
                  "request sent to the last byte); the ratio is against batch 1 on the same launch, else on the "
                  "launch named" + (f"; {outside} window(s) fell between cells and are left out" if outside else "")
                  + "." if run.variants else ""))
    return [title, Table((("launch",) if run.variants else ()) + (
        "batch (engine)", "aggregate decode tok/s (engine)", "windows", "against batch 1"), lines, caption)]


def _per_lane(rows: Sequence[RequestRow]) -> str:
    rates = [float(r.completion_tokens) / float(r.e2e_client_s) for r in rows
             if r.status == "ok" and r.completion_tokens and r.e2e_client_s]
    if not rates:
        return NONE
    low, high = min(rates), max(rates)
    return number(statistics.median(rates)) if number(low) == number(high) else f"{number(low)} – {number(high)}"


def _launches(table: pd.DataFrame) -> list[str]:
    """Each row's launch: the variant column of a run with variants, else the profile's own serving."""
    if VARIANT not in table.columns:
        return [BASE] * len(table)
    return [str(name) for name in table[VARIANT]]


def _slots_by_lanes(run: RunData) -> list[Block]:
    """Seed 000 §2.4(c): every launch's concurrency cells (a variant's with its own slots), each named by its
    launch, with the speed-up over one client at the same prompt length."""
    title = Paragraph("Server slots against client lanes, end to end.")
    table = run.launch_tables().get("concurrency")
    if table is None or not len(table):
        return [Note("slots against lanes: no concurrency table: run the concurrency sweep at 1, 2 and 4 clients "
                                 "(sweeps.concurrency.levels) for the speed-up over one lane.")]
    launches = _launches(table)
    cells = run.cell_rows("concurrency", variants=True)
    shapes = [(_value(table, i, "prompt_tokens_target"), _cached(run, _value(table, i, "cell_id")))
              for i in range(len(table))]
    one: dict[tuple[str, Any], Any] = {}
    for i, launch in enumerate(launches):
        if _value(table, i, "concurrency") == 1:
            one.setdefault((launch, shapes[i]), _value(table, i, "aggregate_output_tok_s_client"))
    lines = []
    for i, launch in enumerate(launches):
        aggregate, (prompt, cached) = _value(table, i, "aggregate_output_tok_s_client"), shapes[i]
        speed_up = _ratio(aggregate, launch, _against(one, launch, shapes[i]))
        lines.append(((launch,) if run.variants else ()) + (
            number(run.launch_setting(launch, "serve.max_concurrency")), number(_value(table, i, "concurrency")),
            number(prompt) + (" (cached)" if cached else ""),
            _per_lane(cells.get(str(_value(table, i, "cell_id")), [])), number(aggregate), speed_up,
            number(_value(table, i, "engine_log_batch_median"))))
    caption = ("tables/concurrency.csv and requests.jsonl: per-lane end to end is each request's output tokens over "
               "its send-to-last-byte time (client); aggregate is all output over the cell's wall (client); speed-up "
               "is against one client at the same prompt length (a cached prompt against a cached one: "
               "sweeps.concurrency.cached), on the same launch where it measured one, else on the launch named; "
               "engine batch is the median of the engine's decode batch over its lines during the cell."
               + (" Every launch's cells: the profile's own serving (base) and each variant's, with the slots that "
                  "launch ran." if run.variants else ""))
    blocks: list[Block] = [title, Table((("launch",) if run.variants else ()) + (
        "server slots", "client lanes", "prompt tokens", "per lane, tok/s (client)", "aggregate, tok/s (client)",
        "speed-up", "engine batch (median)"), tuple(lines), caption)]
    if not one:
        blocks.append(Note("slots against lanes: no one-client cell: add 1 to sweeps.concurrency.levels for the "
                           "speed-up."))
    return blocks


def _cached(run: RunData, cell_id: Any) -> bool:
    """Whether the cell sent one cached prompt from every lane (sweeps.concurrency.cached), from its ledger entry."""
    entry = run.cells.get(str(cell_id))
    return bool(entry and entry.cell.get("cached"))


def _engine_lines(run: RunData) -> list[Block]:
    """The engine's lines that show prefill running one lane at a time and starving decode, quoted."""
    title = Paragraph("(d) The engine's own throughput lines, as printed.")
    adapter, log = run.adapter, run.server_log
    if adapter is None or not log:
        return [Note("(d) engine lines: no server log from a known engine, nothing to quote.")]
    found: dict[str, str] = {}
    best_batch = -1.0
    before: dict[str, Any] | None = None
    for line in log.splitlines():
        parsed = adapter.parse_throughput(line)
        if not parsed:
            continue
        prefill, decode = parsed.get("prefill_tok_s"), parsed.get("decode_tok_s")
        if "serial" not in found and (parsed.get("prefilling") or 0) >= 1 and (parsed.get("waiting") or 0) >= 1:
            found["serial"] = line.strip()
        # Starving needs two requests in flight: one prefilling while another is ready to decode beside it.
        if ("starved" not in found and (prefill or 0) > 0 and (decode or 0) > 0 and (parsed.get("running") or 0) >= 2
                and (parsed.get("prefilling") or 0) >= 1 and (parsed.get("decode_ready") or 0) >= 1):
            found["starved"] = line.strip()
        batch = parsed.get("batch")
        if whole_decode(before, parsed) and isinstance(batch, (int, float)) and batch > best_batch:
            found["alone"], best_batch = line.strip(), float(batch)
        before = parsed
    said = {"serial": "prefill one lane at a time: a request prefilling while another waits",
            "starved": "prefill starving decode: two requests running, one prefilling and one ready to decode",
            "alone": "a window of decode alone, at the highest batch the engine printed"}
    blocks: list[Block] = [title] if found else []
    for key, words in said.items():
        if key in found:
            blocks += [Paragraph(f"{words[0].upper()}{words[1:]} (logs/server.log):"), Code(found[key])]
    missing = [words for key, words in said.items() if key not in found]
    if missing:
        blocks.append(Note("(d) engine lines: no line of the log shows " + "; or ".join(missing) + ". Two lanes at a "
                           "long context (the concurrency sweep) with outputs that outlast a window show them."))
    return blocks


def coding_and_agent(run: RunData) -> list[Block]:
    """Seed 003: the coding and agent scenarios side by side, by input length."""
    tasks = run.tables.get("tasks")
    if tasks is None or not len(tasks):
        return [Note("No tasks table: run the tasks sweep with the coding and agent tasks at several depths.")]
    tasks = _own_speculation(tasks).reset_index(drop=True)
    scenarios = [name for name in ("coding", "agent") if (tasks["task"] == name).any()]
    if not scenarios:
        return [Note("Neither the coding nor the agent task was measured: add them to sweeps.tasks.tasks.")]
    depths = sorted({int(d) for d in tasks["context_depth"].dropna()})
    at_once = {depth: max((_value(tasks, i, "concurrency") or 1 for i in range(len(tasks))
                           if int(tasks["context_depth"].iloc[i]) == depth), default=1) for depth in depths}
    varies = len(set(at_once.values())) > 1
    rows = []
    for depth in depths:
        shown: list[str] = [str(at_once[depth])] if varies else []
        for name in scenarios:
            index = [i for i in range(len(tasks)) if tasks["task"].iloc[i] == name
                     and int(tasks["context_depth"].iloc[i]) == depth]
            if not index:
                shown += [NONE] * 4
                continue
            i = index[0]
            shown += [number(_value(tasks, i, "prompt_tokens_median")),
                      number(_value(tasks, i, "prompt_s_server_median")),
                      _decode_mtp(tasks, i), number(_value(tasks, i, "tokens_per_round_server_median"))]
        rows.append((number(depth), *shown))
    columns = [f"{name}: {column}" for name in scenarios for column in
               ("prompt tokens", "TTFT, s (server)", _decode_header(tasks), "tokens per round")]
    lanes = (" Requests at once: each repetition's requests sent together (sweeps.tasks.concurrency, seed 003's 并发 "
             "column), each figure the median over them; the second lane's wait for the first's prefill is not in "
             "the prompt time (the lane table of the Concurrency section gives each lane's).") if varies else ""
    blocks: list[Block] = [Table(("depth", *(["requests at once"] if varies else []), *columns), tuple(rows),
                                 "tables/tasks.csv: per context depth, the coding and agent tasks side by side (seed "
                                 "003's layout); TTFT is the engine's prompt time, tokens per round the engine's."
                                 + lanes)]
    absent = {"coding", "agent"} - set(scenarios)
    if absent:
        blocks.append(Note(f"The {' and '.join(sorted(absent))} task was not measured: add it to "
                                "sweeps.tasks.tasks for the other column."))
    return blocks


def decode_windows(run: RunData) -> list[Block]:
    """Seed 004 §四 (config / mode / average decode / 5 s peak): per launch and cell, the figure the report gives for
    its mode (one request: its decode rate, the engine's; several clients: their aggregate output, the client's) at
    its precision (averages to 0.01 tok/s, the peak to 0.1), beside the engine's best window of decode alone. A cell
    with no window of decode alone has no peak to set its average against, so it is left out and counted in one
    line (its average is in its own sweep's table); with no such window in any cell, that line is all."""
    lines = []
    notes: list[str] = []
    without = 0
    tables = run.launch_tables()
    window = _window_s(run.telemetry)
    for name, table in tables.items():
        if "decode_tok_s_engine_peak" not in table.columns:
            continue
        for i, launch in enumerate(_launches(table)):
            mixed = _value(table, i, "engine_windows_mixed")
            windows = _value(table, i, "engine_windows") or 0
            if not windows:
                without += bool(mixed)
                if mixed and _value(table, i, "engine_decode_note"):
                    notes.append(str(_value(table, i, "engine_decode_note")))
                continue
            mode, average = _mode_and_average(run, name, table, i, launch)
            lines.append((_config(run, launch), mode, number(average, AVERAGE_DECIMALS),
                          number(_value(table, i, "decode_tok_s_engine_peak"), RATE_DECIMALS),
                          number(_value(table, i, "decode_tok_s_engine_mean"), AVERAGE_DECIMALS),
                          f"{number(windows)} / {number(mixed)}"))
    left_out = (f"{without} cell{'s' if without > 1 else ''} decoded only in engine windows that also prefilled, so "
                "no peak of decode alone sets off their average (their sweep tables have it)"
                + (f"; the first of them: {notes[0]}" if notes else ""))
    if not lines:
        if without:
            return [Note(f"No table: {left_out}.")]
        engine = run.engine or "the engine"
        return [Note(f"No engine window decoded during a cell ({engine} printed no throughput line, or none "
                          "fell inside a cell): an engine that prints its throughput every few seconds (NInfer "
                          "--log-stats-interval-ms 5000) and outputs that outlast two windows fill this table.")]
    peak = f"{window:g} s peak" if window else "peak window"
    blocks: list[Block] = [Table((
        "config", "mode", "average decode, tok/s", f"{peak}, tok/s (engine)", "windows of decode alone: mean, tok/s",
        "windows: decode alone / also prefilled"), tuple(lines),
        "tables/*.csv, seed 004 §四's layout: the average is the median of the requests' decode rate (the engine's) "
        "for one request at a time, and all the cell's output over its wall (the client's) for concurrent clients, "
        "the figure seed 004 gives for its concurrent rows; the peak is the engine's best throughput window of decode "
        "alone (no prefill in it; the windows that also prefilled are counted, never averaged in). The config names "
        "the launch: the profile's own serving (base) or a variant, with its speculative decoding and slots.")]
    if without:
        blocks.append(Paragraph(f"Left out: {left_out}."))
    return blocks


AVERAGE_DECIMALS = 2
"""Seed 004 prints its averages to 0.01 tok/s (151.45) and its peaks to 0.1 (183.6)."""


def _window_s(telemetry: Sequence[TelemetrySample]) -> float | None:
    """The engine's throughput window, as its lines give it (seed 004's "5 秒峰值": a 5 s window)."""
    lengths = [float(row.interval_s) for row in telemetry if row.source == "engine_log" and row.interval_s]
    return statistics.median(lengths) if lengths else None


def _config(run: RunData, launch: str) -> str:
    """A launch as seed 004 names its configs ("NVFP4 + MTP5"): the launch, its speculative decoding and slots."""
    method, drafts = (run.launch_setting(launch, f"serve.spec.{key}") for key in ("method", "draft_tokens"))
    spec = f"{method} {drafts}" if method and drafts else (str(method) if method else "no speculation")
    return f"{launch} ({spec}, {number(run.launch_setting(launch, 'serve.max_concurrency'))} slots)"


def _mode_and_average(run: RunData, sweep: str, table: pd.DataFrame, index: int, launch: str) -> tuple[str, Any]:
    """The cell's mode in seed 004's words and the average its mode gives: one request's decode (server), or the
    aggregate output of concurrent clients (client)."""
    clients = _value(table, index, "concurrency")
    if sweep == "concurrency" and clients is not None and int(clients) > 1:
        slots = number(run.launch_setting(launch, "serve.max_concurrency"))
        return (f"{number(int(clients))} clients on {slots} slots: aggregate output (client)",
                _value(table, index, "aggregate_output_tok_s_client"))
    keys = ("task", "scenario", "target_prompt_tokens", "context_depth")
    label = " ".join(number(_value(table, index, key)) for key in keys if _value(table, index, key) is not None)
    mode = "1 request" if sweep == "concurrency" else f"{sweep} {label}".strip()
    return f"{mode}: decode per request (server)", _value(table, index, "decode_tok_s_server_median")
