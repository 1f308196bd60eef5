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
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import ValidationError

from ninferkit.client import RequestResult, RequestSpec, StreamingClient
from ninferkit.engines.log_reader import LogReader
from ninferkit.errors import RequestFailed
from ninferkit.records import RequestRow
from ninferkit.runs import Run, RunDir, append_jsonl, damaged_line, read_jsonl_numbered, utc_now

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


def record_log_truth(run: Run, adapter: LogReader) -> int:
    """Join the engine's own request record to all rows of the run (one pass, so every logged
    request pairs at most once) and append what changed since the last pass: a request the engine
    had not finished logging at one pass is filled in at the next. Returns how many lines were
    appended (0 when the engine keeps no record)."""
    rows = [row for row in run.dir.read_requests() if row.profile_hash == run.profile_hash]
    if not any(row.request_uid for row in rows):
        return 0
    found = adapter.server_log_truth(run.profile, [row.as_dict() for row in rows], run.dir.server_log)
    if found is None:
        return 0
    written = _latest_truth(run.dir)
    count = 0
    for row, fields in zip(rows, found, strict=True):
        uid = row.request_uid
        if not uid or not fields or (uid in written and _same(fields, written[uid][1])):
            continue
        append_jsonl(run.dir.server_truth, {"request_uid": uid, "cell_id": row.cell_id,
                                           "attempt": row.attempt, "written_utc": utc_now(), **fields})
        count += 1
    return count


def _latest_truth(run_dir: RunDir) -> dict[str, tuple[int, dict[str, Any]]]:
    """request_uid -> (line number, fields) of its last server_truth.jsonl entry."""
    latest: dict[str, tuple[int, dict[str, Any]]] = {}
    for number, entry in read_jsonl_numbered(run_dir.server_truth):
        latest[str(entry.get("request_uid"))] = (number, {k: v for k, v in entry.items() if k not in BOOKKEEPING})
    return latest


def _same(fields: dict[str, Any], previous: dict[str, Any]) -> bool:
    return json.dumps(fields, sort_keys=True, default=str) == json.dumps(previous, sort_keys=True, default=str)


def rows_with_server_truth(run_dir: RunDir) -> list[RequestRow]:
    """requests.jsonl rows, each with its latest server_truth.jsonl entry laid over it: the entry's
    values replace the row's where the entry has one (the engine's own record is the unrounded
    account), and `server_join`/`server_note` say how the pair was made or why there is none. The row
    with its entry is a RequestRow like any other: an entry whose numbers are not numbers is a BadInput
    naming its line in server_truth.jsonl."""
    latest = _latest_truth(run_dir)
    out = []
    for row in run_dir.read_requests():
        number, entry = latest.get(row.request_uid or "", (0, {}))
        if entry:
            laid = (row.as_dict() | {k: v for k, v in entry.items() if v is not None}
                    | {"server_join": entry.get("server_join"), "server_note": entry.get("server_note")})
            try:
                row = RequestRow.model_validate(laid)
            except ValidationError as error:
                raise damaged_line(run_dir.server_truth, number, entry, RequestRow, error) from None
        out.append(row)
    return out
