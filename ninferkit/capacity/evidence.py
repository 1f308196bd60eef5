"""Every launch narrows the answer: a pool a launch of this run served, or did not, bounds the largest pool.

The memory fit bounds the runtime by what started (runtime <= available), so a launch that started and then
died at its first request (vLLM reserves its pool, then runs out at first use) did not move it: the vLLM
search example said 6,395,136 tokens serve and 6,397,328 do not, and its decision table still said "pool up
to 6,397,328" (issue 37). `narrowed` lays the launches over capacity.json's answer, per KV dtype, slot count
and context per slot:

- the possible side of the largest pool stays below the smallest pool that did not serve there (one page);
- where a launch of the KV dtype died at first use and no launch reported the first-use memory, "starts" is
  not "serves": the sure side is the largest pool that served there (none: no sure side);
- elsewhere the sure side is at least the largest pool that served there, and never above the possible side;
- a row whose pool up to is at or above a pool refuted at the same dtype and slot count (any context) says so
  in its verdict (the per-context term is not pinned, so the refutation moves no other context's number).

It is applied where capacity.json is made (capacity/gather.py) and again by `ninferkit report` on a recorded
capacity.json (report/derive.py): the same function of the same observations.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FIRST_USE = "out_of_memory_at_first_use"
Key = tuple[Any, Any, Any]
"""(kv_dtype, concurrency, context_per_slot) of a launch's setting."""


@dataclass(frozen=True)
class LaunchEvidence:
    """What the launches at one setting showed."""

    served_max: int | None = None
    served_by: str | None = None
    refuted_min: int | None = None
    refuted_by: str | None = None


def launch_evidence(observations: Sequence[Mapping[str, Any]]) -> dict[Key, LaunchEvidence]:
    """Per setting, the largest pool that started and served, and the smallest that did not serve."""
    found: dict[Key, LaunchEvidence] = {}
    for obs in observations:
        tokens, setting = obs.get("kv_tokens"), obs.get("setting") or {}
        if not isinstance(tokens, int) or obs.get("served") is None:
            continue
        key = (setting.get("kv_dtype"), setting.get("concurrency"), setting.get("context_per_slot"))
        now = found.get(key, LaunchEvidence())
        name = _launch(obs)
        if obs.get("served"):
            if now.served_max is None or tokens > now.served_max:
                now = LaunchEvidence(tokens, name, now.refuted_min, now.refuted_by)
        elif now.refuted_min is None or tokens < now.refuted_min:
            how = obs.get("diagnosis") or ("did not start" if not obs.get("started") else "did not serve")
            now = LaunchEvidence(now.served_max, now.served_by, tokens,
                                 f"{name} ({tokens:,} tokens at {key[2]:,} per slot) {_said(how)}")
        found[key] = now
    return found


def narrowed(fields: dict[str, Any]) -> dict[str, Any]:
    """capacity.json's content with every "starts" row's largest pool, and the headline interval, narrowed by the
    run's launches (see the module docstring). Idempotent."""
    observations = fields.get("observations") or []
    evidence = launch_evidence(observations)
    if not any(ev.refuted_min is not None for ev in evidence.values()):
        return fields
    page = int(fields.get("page_tokens") or 1)
    first_use_unknown = fields.get("first_use_bytes") is None
    died = {o.get("setting", {}).get("kv_dtype") for o in observations
            if o.get("started") and o.get("served") is False}
    rule = _Rule(evidence, page, died if first_use_unknown else set())
    for table in [fields.get("decision_table") or [], *((a.get("decision_table") or []) for a in
                                                         fields.get("answers") or [])]:
        for row in table:
            rule.row(row)
    setting = fields.get("setting") or {}
    key = (setting.get("kv_dtype"), setting.get("concurrency"), setting.get("context_per_slot"))
    interval = fields.get("max_kv_tokens_interval")
    if interval:
        narrow, note = rule.interval(key, interval)
        fields["max_kv_tokens_interval"] = narrow
        fields["max_kv_tokens"] = narrow[0]
        if note and note not in str(fields.get("max_kv_tokens_note") or ""):
            fields["max_kv_tokens_note"] = "; ".join(filter(None, (fields.get("max_kv_tokens_note"), note)))
    fields["narrowed_by_launches"] = rule.notes()
    return fields


@dataclass
class _Rule:
    evidence: dict[Key, LaunchEvidence]
    page: int
    died_at_first_use: set[Any]

    def interval(self, key: Key, interval: Sequence[int | None]) -> tuple[list[int | None], str | None]:
        """The [sure, possible] largest pool at a setting, narrowed by its launches, and the note saying how."""
        low, high = interval[0], interval[1]
        ev = self.evidence.get(key, LaunchEvidence())
        notes = []
        if ev.refuted_min is not None and (high is None or high >= ev.refuted_min - self.page):
            high = ev.refuted_min - self.page
            notes.append(f"below {ev.refuted_by}")
        if key[0] in self.died_at_first_use:
            low = ev.served_max
            notes.append("at least what served there" if low is not None else
                         "no sure side: a launch of this KV dtype died at first use and first-use memory is unknown")
        elif ev.served_max is not None and (low is None or ev.served_max > low):
            low = ev.served_max
        if low is not None and high is not None and low > high:
            low = high
        return [low, high], ("narrowed by the launches: " + "; ".join(notes)) if notes else None

    def row(self, row: dict[str, Any]) -> None:
        key = (row.get("kv_dtype"), row.get("concurrency"), row.get("context_per_slot"))
        memory = row.get("memory_pool_tokens")
        ev = self.evidence.get(key, LaunchEvidence())
        if memory and ev.refuted_min is not None and memory[1] is not None and memory[1] >= ev.refuted_min:
            top = ev.refuted_min - self.page  # the possible side only: the memory a pool needs is not refuted
            row["memory_pool_tokens"] = [None if memory[0] is None else min(memory[0], top), top]
        if row.get("reading") != "starts" or not row.get("max_pool_tokens"):
            return
        before = list(row["max_pool_tokens"])
        row["max_pool_tokens"], note = self.interval(key, before)
        low, high = row["max_pool_tokens"]
        refuted = self._refuted_at(row.get("kv_dtype"), row.get("concurrency"))
        refutes = refuted is not None and (high is None or high >= refuted[0] or low is None)
        if row["max_pool_tokens"] == before and not refutes and " shown to serve" not in str(row.get("verdict")):
            return  # the launches moved nothing here: the fit's words stand
        verdict = str(row.get("verdict") or "").split("; pool up to")[0]
        if low is not None:
            verdict += f"; pool up to {low:,} tokens shown to serve"
        if refuted is not None and refutes:
            verdict += f"; not shown to serve at {refuted[0]:,} tokens or more: {refuted[1]}"
        elif note:
            verdict += f" ({note})"
        row["verdict"] = verdict

    def _refuted_at(self, dtype: Any, concurrency: Any) -> tuple[int, str] | None:
        found = [(ev.refuted_min, str(ev.refuted_by)) for key, ev in self.evidence.items()
                 if key[:2] == (dtype, concurrency) and ev.refuted_min is not None]
        return min(found) if found else None

    def notes(self) -> list[str]:
        return [f"{ev.refuted_by}; largest pool that served there: "
                + (f"{ev.served_max:,} ({ev.served_by})" if ev.served_max is not None else "none")
                for ev in self.evidence.values() if ev.refuted_by]


def _launch(observation: Mapping[str, Any]) -> str:
    found = re.search(r"launches/(\d+)/", str(observation.get("source") or ""))
    return f"launch {found.group(1)}" if found else "the launch step's server"


def _said(how: str) -> str:
    return {FIRST_USE: "started and died at first use (out of memory)"}.get(how, how.replace("_", " "))
