"""`ninferkit diagnose`: what an inference server's log says, for a server someone started by hand.

The log is read through its engine's adapter (NInfer unless a profile names another engine): the
build that printed it, the startup ledger, a summary of the periodic throughput lines, one row per
request, and every failure the adapter's rules know, each with its cause and fix. A log shows a
healthy start when the server said it listens and nothing in it ended the process; a request
answered with an error (HTTP 4xx/5xx) is listed but does not make the start unhealthy.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ninferkit.engines import get_adapter
from ninferkit.engines.log_reader import DiagnosisRule, LogReader
from ninferkit.errors import Diagnosis
from ninferkit.measure.telemetry import engine_rates
from ninferkit.params.profile import Profile
from ninferkit.units import GIB, MIB


def every_diagnosis(rules: Sequence[DiagnosisRule], log_text: str) -> list[dict[str, Any]]:
    """Every failure the rules find, once per (code, cause, fix), with the lines it is on, in log order.

    A line belongs to the first rule (in the table's order) that matches it, as `adapter.diagnose`
    would have chosen, so a specific rule is not repeated by the general one behind it.
    """
    starts = [0] + [found.end() for found in re.finditer("\n", log_text)]
    claimed: dict[int, Diagnosis] = {}
    for rule in rules:
        for found in rule.pattern.finditer(log_text):
            number = bisect_right(starts, found.start())
            if number in claimed:  # rules come in the table's order: an earlier one has it
                continue
            end = log_text.find("\n", found.end())
            diagnosis = rule.match(log_text[starts[number - 1]: len(log_text) if end < 0 else end])
            if diagnosis is not None:
                claimed[number] = diagnosis
    grouped: dict[tuple[str, str, str], dict[str, Any]] = {}
    for number, diagnosis in sorted(claimed.items()):
        entry = grouped.setdefault((diagnosis.code, diagnosis.cause, diagnosis.fix), {
            "code": diagnosis.code, "cause": diagnosis.cause, "fix": diagnosis.fix, "evidence": diagnosis.evidence,
            "lines": []})
        entry["lines"].append(number)
    return list(grouped.values())


def throughput_summary(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Average and peak decode and prefill rates over the periodic throughput lines; None without any.

    The engine prints no line for an idle interval, and a line with no decode (prefill) for an interval
    without it, so `average_tok_s` is the tokens over the seconds of the intervals that had some:
    the rate while it was working. `peak_tok_s` is the best single interval, `peak_interval_s` its
    length (5 s at NInfer's default `--log-stats-interval-ms`). Token counts are the printed ones
    where the line has them, else rate x interval. A line whose rate or interval was not read is
    counted in `not_read`, never as zero.
    """
    rows = list(rows)
    if not rows:
        return None
    out: dict[str, Any] = {"lines": len(rows),
                           "intervals_s": sorted({r["interval_s"] for r in rows if r.get("interval_s") is not None}),
                           "lines_with_unread_parts": sum(1 for r in rows if r.get("unread"))}
    for kind in ("decode", "prefill"):
        rates = engine_rates(rows, kind)
        out[kind] = {"active_lines": rates["windows"], "not_read": rates["not_read"], "tokens": round(rates["tokens"]),
                     "seconds": round(rates["seconds"], 3),
                     "average_tok_s": None if rates["mean_tok_s"] is None else round(rates["mean_tok_s"], 1),
                     "peak_tok_s": rates["peak_tok_s"], "peak_interval_s": rates["peak_interval_s"]}
    return out


def diagnose_log(log_text: str, adapter: LogReader, profile: Profile | None = None) -> dict[str, Any]:
    """Everything `ninferkit diagnose` says about one log, as plain data (`--json` prints it).

    healthy: the server listened (the ledger has listen_url) and no failure was found; failures are the
    diagnoses that are not one request's error, plus every line the engine printed as an error that no
    rule knows (code `unrecognized_error`).
    """
    facts = adapter.describe_log(log_text, profile)
    diagnoses = every_diagnosis(adapter.diagnoses, log_text)
    covered = {number for entry in diagnoses for number in entry["lines"]}
    lines = log_text.split("\n")  # numbered as every_diagnosis numbers them
    for number in facts.get("error_lines", []):
        if number not in covered:
            diagnoses.append({"code": "unrecognized_error", "evidence": lines[number - 1].strip(), "lines": [number],
                              "cause": "the engine reported an error no rule of ninferkit knows",
                              "fix": "read the lines around it; the engine's own words are the evidence"})
    diagnoses.sort(key=lambda entry: entry["lines"][0])
    if profile is not None:
        for entry in diagnoses:
            entry["fix"] = adapter.advise(entry["code"], entry["fix"], profile)
    failures = [d for d in diagnoses if d["code"] not in adapter.request_error_codes]
    ledger = adapter.parse_ledger(log_text)
    started = ledger.get("listen_url") is not None
    if failures:  # the rule tables go from the specific to the generic ("startup failed | …")
        order = {rule.code: index for index, rule in reversed(list(enumerate(adapter.diagnoses)))}
        first = min(failures, key=lambda d: (order.get(d["code"], len(order)), d["lines"][0]))
        verdict = f"failed: {first['code']}"
    elif started:
        verdict = f"healthy start (listening on {ledger['listen_url']})"
    elif diagnoses:  # request errors alone: a served part of a log (the engine's lines before it are not here)
        codes = ", ".join(dict.fromkeys(d["code"] for d in diagnoses))
        verdict = f"serving, with request errors ({codes}); the log holds no startup to judge"
    elif facts and set(facts["lines"]) <= {"other"}:
        verdict = f"no line of this log is {adapter.kind}'s (another engine's log is read with --profile)"
    else:
        verdict = "no start: the log ends before the server said it listens, and names no failure"
    throughput = [row for line in lines if (row := adapter.parse_throughput(line)) is not None]
    return {"engine": adapter.kind, "healthy": started and not failures, "verdict": verdict,
            "build": facts.get("build"), "ledger": ledger, "throughput": throughput_summary(throughput),
            "requests": facts.get("requests"), "errors": diagnoses, "request_errors": [
                d["code"] for d in diagnoses if d["code"] in adapter.request_error_codes],
            "lines": facts.get("lines"), "unread": _not_diagnosed(facts.get("unread"), covered)}


def _not_diagnosed(unread: list[dict[str, Any]] | None, covered: set[int]) -> list[dict[str, Any]] | None:
    """The lines no rule read, less those a diagnosis explains: the loader's `ninfer-serve: error while loading
    shared libraries: libcudart.so.12: ...` starts like an engine line, so the log reader could not read it, yet
    the cuda_runtime_missing rule did (issue 38 item 8: one line was both diagnosed and "not understood")."""
    if unread is None:
        return None
    return [item for item in unread if item.get("line") not in covered]


def diagnose(log_text: str, profile: Profile | None = None) -> dict[str, Any]:
    """diagnose_log with the adapter of the profile's engine, NInfer's without a profile."""
    return diagnose_log(log_text, get_adapter(profile.engine.kind if profile else "ninfer"), profile)


# ---------------------------------------------------------------------------------------------
# As text
# ---------------------------------------------------------------------------------------------

def _show(key: str, value: Any) -> str:
    if key.endswith("_bytes") and isinstance(value, int) and abs(value) >= MIB:
        return f"{value / GIB:.2f} GiB" if abs(value) >= GIB else f"{value / MIB:.2f} MiB"
    return str(value)


def _ledger_text(ledger: Mapping[str, Any]) -> list[str]:
    shown = [f"{key} {_show(key, value)}" for key, value in ledger.items()
             if not key.endswith("_resolution_bytes") and key != "unread"]
    out = ["ledger: " + (", ".join(shown) if shown else "nothing read")]
    out += [f"  unread: {part}" for part in ledger.get("unread", [])]
    return out


def _throughput_text(summary: Mapping[str, Any] | None) -> list[str]:
    if summary is None:
        return ["throughput: no throughput lines"]
    intervals = ", ".join(f"{s:g} s" for s in summary["intervals_s"]) or "not read"
    out = [f"throughput: {summary['lines']} lines ({intervals} intervals)"]
    for kind in ("decode", "prefill"):
        part = summary[kind]
        if part["average_tok_s"] is None:
            out.append(f"  {kind}: none")
            continue
        out.append(f"  {kind}: average {part['average_tok_s']} tok/s over {part['active_lines']} intervals "
                   f"({part['tokens']} tokens in {part['seconds']} s); peak {part['peak_tok_s']} tok/s in one "
                   f"{part['peak_interval_s']:g} s interval" + (f"; {part['not_read']} not read" if part['not_read']
                                                                  else ""))
    return out


_REQUEST_COLUMNS = (("request_id", "id"), ("protocol", "protocol"), ("status", "status"),
                    ("prompt_tokens_server", "prompt"), ("cached_tokens_server", "cached"),
                    ("completion_tokens_server", "output"), ("ttft_s_server", "ttft_s"),
                    ("prefill_tok_s_server", "prefill_tok_s"), ("decode_tok_s_server", "decode_tok_s"),
                    ("e2e_s_server", "total_s"), ("acceptance_server", "accepted"), ("finish_reason", "finish"))


def _requests_text(rows: Sequence[Mapping[str, Any]] | None) -> list[str]:
    if not rows:
        return ["requests: none in the log"]
    done = sum(1 for row in rows if row["status"] == "ok")
    errored = sum(1 for row in rows if row["status"] == "errored")
    table = [[title for _, title in _REQUEST_COLUMNS]]
    for row in rows:
        cells = ["-" if row.get(key) is None else str(row[key]) for key, _ in _REQUEST_COLUMNS]
        if row.get("error"):
            cells[-1] = f"error: {row['error']}"
        table.append(cells)
    widths = [max(len(cells[i]) for cells in table) for i in range(len(_REQUEST_COLUMNS) - 1)]
    return [f"requests: {len(rows)} ({done} done, {errored} with an error, {len(rows) - done - errored} unfinished)",
            *("  " + "  ".join([*(c.ljust(w) for c, w in zip(cells, widths, strict=False)), cells[-1]])
              for cells in table)]


def summary_text(report: Mapping[str, Any]) -> str:
    """The report as a reader wants it on a terminal: verdict first, then the evidence."""
    out = [f"verdict: {report['verdict']}", f"engine: {report['engine']}"]
    build = report.get("build")
    if build and not build["evidence"]:
        out.append("build: the log does not tell")
    elif build:
        out.append(f"build: {', '.join(build['builds']) or 'none of the table'} ({'; '.join(build['evidence'])})")
        if "profile_build" in build:
            verdict = "matches the log" if build["profile_build_matches"] else "does NOT match the log"
            out.append(f"  the profile's build {build['profile_build']} {verdict}")
            out += [f"    {difference}" for difference in build["profile_build_differences"]]
    out += _ledger_text(report["ledger"])
    out += _throughput_text(report["throughput"])
    if report.get("requests") is not None:
        out += _requests_text(report["requests"])
    if report["errors"]:
        out.append("errors:")
        for entry in report["errors"]:
            where = ", ".join(map(str, entry["lines"][:10])) + (" ..." if len(entry["lines"]) > 10 else "")
            out += [f"  {entry['code']} (line {where}): {entry['cause']}", f"    fix: {entry['fix']}",
                    f"    log: {entry['evidence']}"]
    else:
        out.append("errors: none")
    unread = report.get("unread")
    if unread:
        out.append(f"not understood ({len(unread)} lines):")
        out += [f"  line {item['line']}: {', '.join(item['unread'])}" for item in unread]
    return "\n".join(out)
