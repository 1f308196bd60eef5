"""The per-cell statistics the sweep tables and the kinds' own columns share, over one frame of rows."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ninferkit.measure.latency import wait_before_prefill_s, wall_s
from ninferkit.rundir.records import RequestRow


def numbers(frame: pd.DataFrame, name: str) -> pd.Series:
    """A column's numbers (an absent column, or text in it, gives none)."""
    if name not in frame:
        return pd.Series(dtype=float)
    return pd.to_numeric(frame[name], errors="coerce").dropna()


def sent_values(measured: pd.DataFrame, name: str) -> str | None:
    """The value(s) of a request field the cell's measured requests carried (None: not sent)."""
    if name not in measured:
        return None
    values = sorted({str(v) for v in measured[name].dropna()})
    return ", ".join(values) or None


def cell_span(cell_rows: pd.DataFrame) -> tuple[float, float]:
    """The cell's span on the telemetry clock: first send to last end."""
    return float(cell_rows["t_send"].min()), float(pd.to_numeric(cell_rows["t_done"], errors="coerce").max())


def aggregate(ok: pd.DataFrame, finished: Sequence[RequestRow]) -> dict[str, Any]:
    """Whole-cell rates of a server loaded by many requests at once: tokens of all clients over the wall time
    from the first send to the last end.

    `wait_before_prefill_s` = client TTFT minus the server's prompt time: the time a request spent
    queued (plus transport) before its prefill began, for engines that do not report queue time.
    """
    if not len(ok):
        return {"wall_s": None, "aggregate_output_tok_s_client": None,
                "wait_before_prefill_s_median": None, "wait_before_prefill_s_max": None}
    wall = wall_s(finished)
    wait = pd.Series([wait for row in finished if (wait := wait_before_prefill_s(row)) is not None], dtype=float)
    return {
        "wall_s": wall,
        "aggregate_output_tok_s_client": float(numbers(ok, "completion_tokens").sum()) / wall if wall else None,
        "wait_before_prefill_s_median": wait.median() if len(wait) else None,
        "wait_before_prefill_s_max": wait.max() if len(wait) else None,
    }


def tokens_per_round(ok: pd.DataFrame) -> float | None:
    """Median tokens committed per speculative round (seed 003's "每轮 3.9～4.0 个 token"): the engine's own
    figure where its `done` line prints one, else 1 + accepted drafts / rounds from its request record."""
    if "tokens_per_round_server" in ok:
        printed = numbers(ok, "tokens_per_round_server")
        if len(printed):
            return float(printed.median())
    rounds, accepted = numbers(ok, "spec_rounds_server"), numbers(ok, "accepted_tokens_server")
    both = pd.concat([rounds.rename("rounds"), accepted.rename("accepted")], axis=1).dropna()
    both = both[both["rounds"] > 0]
    return float((1 + both["accepted"] / both["rounds"]).median()) if len(both) else None


def hit_tokens(ok: pd.DataFrame) -> tuple[pd.Series, str | None]:
    """Each request's prefix-cache hit tokens and whose count they are: the engine's own record where it has
    one (the server's accounting is the truth), else the client's usage count (NInfer G1's chat usage carries
    none; its Messages usage said 0 where its own log counted the hit); "engine (usage: N)" where the usage
    disagreed. A request with neither is left out: unknown, never 0."""
    empty = pd.Series(index=ok.index, dtype=float)
    client = pd.to_numeric(ok["cached_tokens"], errors="coerce") if "cached_tokens" in ok else empty
    engine = pd.to_numeric(ok["cached_tokens_server"], errors="coerce") if "cached_tokens_server" in ok else empty
    chosen = engine.fillna(client).dropna()
    if not len(chosen):
        return chosen, None
    from_usage = (engine.isna() & client.notna()).any()
    used = [name for name, found in (("engine", engine.notna().any()), ("usage", from_usage)) if found]
    differ = client[engine.notna() & client.notna() & (engine != client)]
    said = f" (usage: {differ.median():,.0f})" if len(differ) else ""
    return chosen, ", ".join(used) + said


def request_acceptance(row: RequestRow) -> float | None:
    """accepted/drafted of one request (server-side), or None without speculative decoding."""
    if row.acceptance_server is not None:
        return float(row.acceptance_server)
    drafted, accepted = row.drafted_tokens_server, row.accepted_tokens_server
    if drafted and accepted is not None:
        return float(accepted) / float(drafted)
    return None


def drafts(rows: Sequence[RequestRow]) -> tuple[float | None, float | None]:
    """The accepted and drafted tokens of a cell's finished requests in all, as the engine counted them; None where
    none has both counts, or where one that reports an acceptance has no counts (a sum over some of the cell's
    requests would be no cell's)."""
    counted = [row for row in rows if row.accepted_tokens_server is not None and row.drafted_tokens_server is not None]
    shares = [row for row in rows if row.acceptance_server is not None]
    if not counted or len(counted) < len(shares):
        return None, None
    return (float(sum(row.accepted_tokens_server or 0 for row in counted)),
            float(sum(row.drafted_tokens_server or 0 for row in counted)))


def cell_acceptance(accepted_sum: Any, drafted_sum: Any, median_share: Any) -> float | None:
    """A cell's acceptance: the engine's accepted over drafted tokens summed over its requests where it counted
    both (seed 000 §2.2's "464/523"), else the median of its requests' shares (an engine that reports a share
    alone). One answer for a cell, which every table that prints it gives: the median of two requests' shares
    (30% and 70%: 50%) is no cell's share when their drafts differ in size."""
    present = [value for value in (accepted_sum, drafted_sum) if value is not None and not pd.isna(value)]
    if len(present) == 2 and float(drafted_sum) > 0:
        return float(accepted_sum) / float(drafted_sum)
    return None if median_share is None or pd.isna(median_share) else float(median_share)


def rows_acceptance(rows: Sequence[RequestRow]) -> float | None:
    """`cell_acceptance` of a cell's finished requests: what the tables hold as the sums and the median share."""
    shares = [share for row in rows if (share := request_acceptance(row)) is not None]
    return cell_acceptance(*drafts(rows), statistics.median(shares) if shares else None)


def cached_share(rows: Sequence[RequestRow]) -> float | None:
    """The median share of a cell's prompts the engine served from its prefix cache (its own count, else the
    response's usage); None where no request counted its hits. A resend's prompt time is over the few tokens left,
    so the write-up prints no prefill rate for such a cell (report/compare.CACHED_SHARE, in compare/ and the A/B)."""
    shares = [cached / row.prompt_tokens for row in rows if row.prompt_tokens
              if (cached := row.cached_tokens_server if row.cached_tokens_server is not None else row.cached_tokens)
              is not None]
    return statistics.median(shares) if shares else None
