"""The server's own per-request numbers that do not ride on the response, beside the client's rows.

Responses carry some engines' timings (`EngineAdapter.server_timings`, read by the client). Two
other sources sit behind the engine adapter, so nothing here names an engine:

- Server-wide counters that are one request's numbers when it runs alone (the adapter's
  `request_metrics_path` and `request_metrics_deltas`). `MeteredClient` reads them just before
  and just after each request that has the server to itself (as far as this client knows), and
  puts the deltas on the result, so they are in the request's requests.jsonl row when it is
  appended. A request that overlapped another gets no numbers and a `server_note` saying why:
  a share of a sum is not a measurement.
- The engine's own per-request record, read after the requests ended (the adapter's
  `server_log_truth`). `record_log_truth` joins it to the run's rows after every cell and once
  more at the end of the step, and appends what it found (or why nothing) to
  run_dir/server_truth.jsonl, keyed by the rows' `request_uid`. requests.jsonl stays
  append-only: no row is rewritten; the last entry for a row wins.

`rows_with_server_truth(run_dir)` is requests.jsonl with server_truth.jsonl laid over it: what the
sweep tables read. A row whose numbers are not numbers (a file edited or damaged by hand) is a
BadInput naming the file, line and field: a table would otherwise fail deep inside, or count it wrong.
Two checks run on the rows, whatever the engine: an entry whose numbers contradict the client's
timings (a server TTFT above the client's) was paired wrong and is withheld, not published
(`timing_conflict`); and where
the client's decode rate and the engine's differ by more than the run's spread, the row says so with
both rates and what the rows and the engine's throughput lines show in that window (`decode_gaps`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ninferkit.engines.log_reader import LogReader
from ninferkit.errors import RequestFailed
from ninferkit.measure.client import RequestResult, RequestSpec, StreamingClient
from ninferkit.params.profile import Profile
from ninferkit.params.variants import BASE
from ninferkit.rundir.records import RequestRow, TelemetrySample
from ninferkit.rundir.runs import Run, RunDir, append_jsonl, damaged_line, disk_errors, read_jsonl_numbered, utc_now
from ninferkit.rundir.servings import Launch, RunServings, launches, run_servings

SETTLE_READS = 20
SETTLE_INTERVAL_S = 0.05  # counters are updated as the request ends; allow them up to 1 s to show it
BOOKKEEPING = ("request_uid", "cell_id", "attempt", "written_utc")


class MeteredClient(StreamingClient):
    """A StreamingClient that brackets every request that runs alone with reads of the adapter's
    `request_metrics_path`, and adds the adapter's deltas to the result's server fields (the
    response's own server fields win where both have a value).

    "Alone" means no other request of this client was in flight from the first read to the last;
    the adapter checks the counters themselves for traffic from elsewhere.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_flight = 0
        self.started = 0

    async def send(self, spec: RequestSpec) -> RequestResult:
        path = self.adapter.request_metrics_path
        if path is None:
            return await super().send(spec)
        alone = self.in_flight == 0
        self.in_flight += 1
        self.started += 1
        mark = self.started
        try:
            before: str | None = None
            note = None
            if alone:
                try:
                    before = await self.get_text(path)
                except RequestFailed as exc:
                    note = f"{path} not read before the request: {exc}"
            result = await super().send(spec)
            if not alone or self.started != mark:
                note = (f"another request was in flight at the same time; the server-wide counters at {path} "
                        "cannot be split per request, so no server numbers are attributed")
            elif before is not None and result.status == "ok":
                found = await self._deltas(path, before)
                note = found.pop("server_note", None)
                if self.started != mark:
                    note = (f"another request started while {path} was read after this one; its deltas are "
                            "not attributed")
                else:
                    result.server = {**found, **{k: v for k, v in result.server.items() if v is not None}}
            if note is not None:
                result.server["server_note"] = note
            return result
        finally:
            self.in_flight -= 1

    async def _deltas(self, path: str, before: str) -> dict[str, Any]:
        for _ in range(SETTLE_READS):
            try:
                after = await self.get_text(path)
            except RequestFailed as exc:
                return {"server_note": f"{path} not read after the request: {exc}"}
            found = self.adapter.request_metrics_deltas(before, after)
            if found is not None:
                return dict(found)
            await asyncio.sleep(SETTLE_INTERVAL_S)
        return {"server_note": f"the counters at {path} did not count this request as finished within "
                               f"{SETTLE_READS * SETTLE_INTERVAL_S:g} s; no server numbers attributed"}


def record_log_truth(run: Run, adapter: LogReader, read: Sequence[RequestRow] | None = None) -> int:
    """Join the engine's own record to all rows of the run (one pass, so every logged
    request pairs at most once) and append what changed since the last pass: a request the engine
    had not finished logging at one pass is filled in at the next. Returns how many lines were
    appended (0 when the engine keeps no record). `read`: requests.jsonl as the caller has read it
    (the sweeps step reads it once, rundir.runs.GrowingRows); None reads it here.

    Each row is read beside the record of the launch that answered it (`log_truth`). A row once joined keeps its
    join when a later pass finds no partner for it (`join_to_keep`): a log kept as server.N.log is read again, but
    one that was removed or cut since is not."""
    rows = [row for row in (run.dir.read_requests() if read is None else read) if row.profile_hash == run.profile_hash]
    if not any(row.request_uid for row in rows):
        return 0
    servings = run_servings(run.dir)
    for launch in launches(run.dir, run.profile, servings).values():
        keep_engine_record(launch, adapter)
    found = log_truth(run.dir, run.profile, adapter, rows, servings)
    if found is None:
        return 0
    written = latest_truth(run.dir)
    count = 0
    for row, fields in zip(rows, found, strict=True):
        uid = row.request_uid
        if not uid or not fields:
            continue
        fields = join_to_keep(fields, written[uid][1] if uid in written else None)
        if uid in written and _same(fields, written[uid][1]):
            continue
        append_jsonl(run.dir.server_truth, {"request_uid": uid, "cell_id": row.cell_id,
                                           "attempt": row.attempt, "written_utc": utc_now(), **fields})
        count += 1
    return count


def join_to_keep(fields: dict[str, Any], earlier: dict[str, Any] | None) -> dict[str, Any]:
    """A row's fresh join, or its earlier one where the fresh pass found no partner and the earlier did: the log
    that pairing was made from may have been cut or removed since (a copied run keeping only a log's startup)."""
    if fields.get("server_join") is None and earlier is not None and earlier.get("server_join") is not None:
        return earlier
    return fields


def log_truth(run_dir: RunDir, profile: Profile, adapter: LogReader, rows: Sequence[RequestRow],
              servings: RunServings | None = None) -> list[dict[str, Any]] | None:
    """The engine's own record of each row (same order; {} where none), each row joined to the record of the
    server that answered it (rundir/servings.py: `launches`): the base's rows to the run's logs, a variant's to
    variants/<name>/, the speculation A/B's other side to its folder; a row of a serving no current launch has, to
    the run's. A folder's every launch is read (RunDir.server_logs): the base started again after the variants
    keeps its first launch's log as logs/server.1.log, and the rows that launch answered join to it. None when no
    launch's engine keeps a record."""
    servings = servings or run_servings(run_dir)
    by_serving = launches(run_dir, profile, servings)
    named = {launch.name: launch for launch in by_serving.values()}
    groups: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        launch = by_serving.get(servings.of_line(row.as_dict()))
        groups.setdefault(launch.name if launch else BASE, []).append(index)
    out: list[dict[str, Any]] = [{} for _ in rows]
    kept = False
    for name, indexes in groups.items():
        launch = named[name]
        found = adapter.server_log_truth(launch.profile, [rows[index].as_dict() for index in indexes],
                                         launch.folder.server_logs(), launch.folder.engine_record())
        if found is None:
            continue
        kept = True
        for index, fields in zip(indexes, found, strict=True):
            out[index] = fields
    return out if kept else None


def keep_engine_record(launch: Launch, adapter: LogReader) -> None:
    """Copy the engine's request log into the launch's run folder (RunDir.engine_request_log): the join is a derived
    file, and re-deriving it on another machine needs the record, not the serving machine's path. The engine
    appends to it (NInfer's --request-log-jsonl), so a later copy holds every earlier one."""
    source = adapter.request_log_path(launch.profile)
    if source is None or not source.is_file() or not launch.folder.path.is_dir():
        return
    target = launch.folder.engine_request_log
    if target.is_file() and target.stat().st_size == source.stat().st_size:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with disk_errors(target):
        shutil.copyfile(source, target.with_suffix(".partial"))
        os.replace(target.with_suffix(".partial"), target)


def latest_truth(run_dir: RunDir) -> dict[str, tuple[int, dict[str, Any]]]:
    """request_uid -> (line number, fields) of its last server_truth.jsonl entry."""
    latest: dict[str, tuple[int, dict[str, Any]]] = {}
    for number, entry in read_jsonl_numbered(run_dir.server_truth):
        latest[str(entry.get("request_uid"))] = (number, {k: v for k, v in entry.items() if k not in BOOKKEEPING})
    return latest


def _same(fields: dict[str, Any], previous: dict[str, Any]) -> bool:
    return json.dumps(fields, sort_keys=True, default=str) == json.dumps(previous, sort_keys=True, default=str)


def rows_with_server_truth(run_dir: RunDir, read: Sequence[RequestRow] | None = None) -> list[RequestRow]:
    """requests.jsonl rows, each with its latest server_truth.jsonl entry laid over it: the entry's
    values replace the row's where the entry has one (the engine's own record is the unrounded
    account), and `server_join`/`server_note` say how the pair was made or why there is none. The row
    with its entry is a RequestRow like any other: an entry whose numbers are not numbers is a BadInput
    naming its line in server_truth.jsonl. An entry whose server numbers contradict the row's own timings
    is withheld (`timing_conflict`: the pairing was wrong), and `decode_gap_note` is filled in
    (`decode_gaps`, over the run's rows and the engine's throughput lines in telemetry.jsonl). `read`:
    requests.jsonl as the caller has read it; None reads it here."""
    latest = latest_truth(run_dir)
    out = []
    for row in run_dir.read_requests() if read is None else read:
        number, entry = latest.get(row.request_uid or "", (0, {}))
        if entry:
            laid = (row.as_dict() | {k: v for k, v in entry.items() if v is not None}
                    | {"server_join": entry.get("server_join"), "server_note": entry.get("server_note")})
            try:
                row = _withheld(RequestRow.model_validate(laid))
            except ValidationError as error:
                raise damaged_line(run_dir.server_truth, number, entry, RequestRow, error) from None
        out.append(row)
    engine_lines = [sample for sample in run_dir.read_telemetry() if sample.source == "engine_log"]
    gaps = decode_gaps(out, engine_lines)
    return [row.model_copy(update={"decode_gap_note": gaps[row.request_uid].note})
            if row.request_uid in gaps else row for row in out]


TIMER_SLACK_S = 0.05
"""How much longer a server-measured duration may be than the client's of the same request: engines print
times rounded (ms, 0.01 s) and the two sides read different timers; a real excess is whole seconds."""


def timing_conflict(row: RequestRow) -> str | None:
    """Why the server numbers on this row cannot be this request's, or None: the engine sees a request after
    it was sent and answers before it is received, so its TTFT, total and queue-plus-prompt time can never be
    longer than the client's (beyond timer slack). Such a row carries another request's record (a wrong join)."""
    prompt = None if row.prompt_s_server is None else row.prompt_s_server + (row.queue_s_server or 0.0)
    for theirs, mine, what in ((row.ttft_s_server, row.ttft_client_s, "TTFT"),
                               (row.e2e_s_server, row.e2e_client_s, "total time"),
                               (prompt, row.e2e_client_s, "queue and prompt time")):
        if theirs is not None and mine is not None and theirs > mine + TIMER_SLACK_S:
            return (f"withheld: the engine's record joined to this request (request {row.server_request_id}) has a "
                    f"{what} of {theirs:.3f} s, above the client's {mine:.3f} s for it, which cannot happen: it is "
                    "another request's record, so its numbers are not published")
    return None


def _withheld(row: RequestRow) -> RequestRow:
    conflict = timing_conflict(row)
    if conflict is None:
        return row
    return row.model_copy(update={**dict.fromkeys(RequestRow.LOG_FIELDS), "server_note": conflict})


SPREAD_FLOOR = 0.02
"""The least spread the decode check allows: both sides time the same tokens from either end of a socket, and
a 16-token stream's decode lasts 0.4 s, so a few ms of delivery are 1%."""
MIN_REFERENCE_ROWS = 3


@dataclass(frozen=True)
class DecodeGap:
    """A request whose client decode rate and engine decode rate differ by more than the run's spread."""

    decode_tok_s_client: float
    decode_tok_s_server: float
    spread: float
    """The run's spread of client/engine agreement (a fraction), as used."""
    spread_from: str
    """Which rows the spread was measured on, in words."""
    reason: str
    """What the rows and the engine's throughput lines show during this request's decode."""

    @property
    def note(self) -> str:
        share = self.decode_tok_s_client / self.decode_tok_s_server
        return (f"decode {self.decode_tok_s_client:.2f} tok/s at the client, {self.decode_tok_s_server:.2f} tok/s by "
                f"the engine's own decode time ({share:.0%} of it; {self.spread_from} agree within "
                f"±{self.spread:.1%}): {self.reason}")


def decode_gaps(rows: Sequence[RequestRow], engine_lines: Sequence[TelemetrySample]) -> dict[str, DecodeGap]:
    """request_uid -> DecodeGap for each row whose client decode rate is off the engine's by more than the run's
    spread. The spread is measured on the run's rows that had the server to themselves (nothing else of the run in
    flight): the median client/engine ratio and 3 scaled median absolute deviations around it, at least
    SPREAD_FLOOR; with fewer than MIN_REFERENCE_ROWS such rows, all rows with both rates; with fewer still,
    SPREAD_FLOOR around 1. The engine's rate counts only its own decode rounds, the client's the wall from the
    first token to the last, so the gap is time the stream spent waiting; the reason says for what."""
    rated = [row for row in rows if row.request_uid and row.status == "ok" and _rates(row) is not None]
    out: dict[str, DecodeGap] = {}
    for profile in {row.profile_hash for row in rated}:
        mine = [row for row in rated if row.profile_hash == profile]
        everyone = [row for row in rows if row.profile_hash == profile and row.t_send is not None]
        centre, spread, spread_from = _spread(mine, everyone)
        for row in mine:
            client, server = _rates(row)  # type: ignore[misc]
            if abs(client / server - centre) > spread:
                out[str(row.request_uid)] = DecodeGap(client, server, spread, spread_from,
                                                      _decode_wait(row, everyone, engine_lines))
    return out


def decode_gap_summary(rows: Sequence[RequestRow]) -> str | None:
    """For the write-up, beside a cell's decode figure: how many of the cell's requests decoded at a rate the
    client did not see, with the first one's note; None when the client and the engine agree for all."""
    notes = [row.decode_gap_note for row in rows if row.decode_gap_note]
    if not notes:
        return None
    return f"{len(notes)} of {len(rows)} requests: {notes[0]}"


def _rates(row: RequestRow) -> tuple[float, float] | None:
    client, server = row.decode_tok_s_client, row.decode_tok_s_server
    if client is None or server is None or client <= 0 or server <= 0:
        return None
    return float(client), float(server)


def _spread(rated: Sequence[RequestRow], everyone: Sequence[RequestRow]) -> tuple[float, float, str]:
    """(centre, spread, which rows) of the client/engine decode ratio."""
    alone = [row for row in rated if not _overlapping(row, everyone)]
    reference, words = alone, f"the run's {len(alone)} requests that ran alone"
    if len(reference) < MIN_REFERENCE_ROWS:
        reference, words = list(rated), f"the run's {len(rated)} requests"
    if len(reference) < MIN_REFERENCE_ROWS:
        return 1.0, SPREAD_FLOOR, "too few requests to measure the run's spread; assumed to"
    ratios = [client / server for client, server in map(_rates, reference) if client]  # type: ignore[misc]
    centre = statistics.median(ratios)
    deviation = statistics.median(abs(ratio - centre) for ratio in ratios)
    return centre, max(SPREAD_FLOOR, 3 * 1.4826 * deviation), words


def _span(row: RequestRow) -> tuple[float, float] | None:
    end = row.t_done if row.t_done is not None else row.t_last_token
    return None if row.t_send is None or end is None else (float(row.t_send), float(end))


def _overlapping(row: RequestRow, everyone: Sequence[RequestRow]) -> list[RequestRow]:
    """The other rows in flight at some moment of this row's send-to-end."""
    mine = _span(row)
    if mine is None:
        return []
    return [other for other in everyone if other.request_uid != row.request_uid
            and (theirs := _span(other)) is not None and theirs[0] < mine[1] and mine[0] < theirs[1]]


def _decode_wait(row: RequestRow, everyone: Sequence[RequestRow], engine_lines: Sequence[TelemetrySample]) -> str:
    """What happened while this row's stream decoded (first token to last): other requests' prefills that
    overlap it, the engine's throughput lines whose window overlaps it, or that nothing else was running."""
    start, end = float(row.t_first_token or 0.0), float(row.t_last_token or 0.0)
    decode_s = end - start
    prefills = []
    for other in _overlapping(row, everyone):
        if other.t_send is None or other.t_first_token is None:
            continue
        overlap = min(end, float(other.t_first_token)) - max(start, float(other.t_send))
        if overlap > 0:
            tokens = f"a {other.prompt_tokens:,}-token prompt" if other.prompt_tokens else "a prompt"
            prefills.append(f"{tokens} (request {other.request_uid}) before its first token for {overlap:.1f} s")
    windows = [line for line in engine_lines if line.interval_s is not None
               and float(line.t_mono) - float(line.interval_s) < end and start < float(line.t_mono)]
    busy = [line for line in windows if line.prefill_tok_s]
    parts = []
    if prefills:
        more = f"; and {len(prefills) - 2} more" if len(prefills) > 2 else ""
        parts.append(f"the stream waited while other requests were queued or prefilling: its {decode_s:.1f} s from "
                     f"first to last token saw {'; '.join(prefills[:2])}{more}")
    if busy:
        rates = sorted(float(line.prefill_tok_s or 0.0) for line in busy)
        decode = sorted(float(line.decode_tok_s or 0.0) for line in busy)
        parts.append(f"{len(busy)} of the engine's {len(windows)} throughput lines in that window show prefill at "
                     f"{rates[0]:,.1f}-{rates[-1]:,.1f} tok/s while decode ran at "
                     f"{decode[0]:,.1f}-{decode[-1]:,.1f} tok/s")
    if parts:
        return "; ".join(parts)
    others = len(_overlapping(row, everyone))
    if others:
        return (f"{others} other request(s) were in flight but none prefilled then, and the engine's lines show no "
                "prefill: the stream shared the decode batch")
    return ("no other request was in flight and the engine's lines show no prefill: the time was lost between the "
            "engine and the client (network, or the client reading late)")
