"""Derived files are a function of the raw files: re-derive them before a write-up, and record what made them.

A run's raw files (requests.jsonl, the ledger sweeps/cells.jsonl, telemetry.jsonl, the logs and the engine's
own request record, manifest.json) are never rewritten. Its derived files are: the join with the engine's
record (server_truth.jsonl), the sweep tables (tables/) and capacity.json (fitted again from its own observations
and searches, capacity/refit.py). An older ninferkit's join or tables rendered as
they were showed that version's mistakes silently (issue 37: the recorded NInfer run's lanes mis-paired, its
prefix-reuse hits "unknown"). `rederive` rebuilds both from the raw files with this ninferkit and records in
derived.json which version and commit made each, from which inputs (sha256); when derived.json already says
this commit made them from these inputs, and the checkout was clean, nothing is rebuilt.

The join is rebuilt only where the run holds the engine's record (RunDir.engine_record) or its server log;
otherwise the recorded join is kept and `Derived.kept` says why. The recorded profile is read as today's schema
reads it (rundir/recorded.py: fields removed since are upgraded, and derived.json's `profile` says which and who
recorded it); a run with a field no rule upgrades keeps every derived file, naming the field (its tables are then
read as load_run reads them).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ninferkit.capacity.evidence import narrowed
from ninferkit.capacity.refit import CannotRefit, refit
from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError
from ninferkit.params.profile import Profile
from ninferkit.rundir.hashing import sha256_file
from ninferkit.rundir.recorded import RecordedProfile, read_recorded
from ninferkit.rundir.runs import RunDir, json_object, utc_now, write_json_atomic, write_text_atomic
from ninferkit.rundir.servings import launches, run_servings
from ninferkit.sweeps.tables import latest_outcomes, save_tables, tables_of
from ninferkit.sweeps.truth import join_to_keep, latest_truth, log_truth
from ninferkit.version import __version__, git_state

DERIVED = "derived.json"
JOIN, TABLES, CAPACITY = "server_truth.jsonl", "tables/", "capacity.json"
SCHEMA_VERSION = 1
UNRECORDED = "an unrecorded ninferkit (before derived.json)"
UNREADABLE = "a field of the recorded profile cannot be upgraded to this ninferkit's schema (named above)"


@dataclass
class Derived:
    """What `rederive` rebuilt, what it kept and why, and what had made each file before."""

    changed: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    previous: dict[str, str] = field(default_factory=dict)
    profile: str = ""
    """How the recorded profile was read: who recorded it and the fields upgraded, or why it cannot be read."""

    def lines(self) -> list[str]:
        """One line per derived file, for the command's output, after how the profile was read."""
        out = [f"re-derived {name} from the raw files (was made by {self.previous.get(name, UNRECORDED)})"
               for name in self.changed]
        out += [f"kept {name} as recorded: {why}" for name, why in self.kept.items()]
        return [*filter(None, [self.profile]), *(out or ["derived files current"])]


def derived_by() -> dict[str, Any]:
    """This ninferkit: its version, and the commit and state of its checkout (the version alone is one number for
    every commit)."""
    state = git_state()
    return {"ninferkit": __version__, "commit": state.get("commit"), "dirty": state.get("dirty")}


def shown_by(by: dict[str, Any] | None) -> str:
    if not by:
        return UNRECORDED
    commit = str(by.get("commit") or "")[:7]
    dirty = " (its code modified since that commit)" if by.get("dirty") else ""
    return f"ninferkit {by.get('ninferkit')}" + (f" @{commit}" if commit else "") + dirty


def rederive(run_dir: RunDir) -> Derived:
    """Rebuild the join and the tables of `run_dir` from its raw files when they were made by another ninferkit
    or from other inputs; record it in derived.json. Never touches a raw file."""
    result = Derived()
    written = json_object(run_dir.path / DERIVED)
    files: dict[str, Any] = dict(written.get("files") or {})
    by = derived_by()
    profile = _profile(run_dir, result)
    read = profile.as_record() if isinstance(profile, RecordedProfile) else {"refused": profile}
    if run_dir.capacity.is_file():
        _capacity(run_dir, profile, files, by, result)
    if run_dir.requests.exists():
        _sweeps(run_dir, profile, files, by, result)
    if result.changed or (files and written.get("profile") != read):
        write_json_atomic(run_dir.path / DERIVED, {"schema_version": SCHEMA_VERSION, "profile": read, "files": files})
    return result


def _profile(run_dir: RunDir, result: Derived) -> RecordedProfile | str:
    """The recorded profile as today's schema reads it, or why it cannot be read (the field no rule upgrades)."""
    try:
        profile = read_recorded(json_object(run_dir.manifest))
    except ProfileError as exc:
        result.profile = f"the recorded profile cannot be read by this ninferkit: {exc}"
        return str(exc)
    result.profile = profile.line()
    return profile


def _sweeps(run_dir: RunDir, recorded: RecordedProfile | str, files: dict[str, Any], by: dict[str, Any],
            result: Derived) -> None:
    """The join and the tables, unless derived.json says this clean commit made them from these inputs."""
    if isinstance(recorded, str):
        for name in (JOIN, TABLES):
            result.kept[name] = UNREADABLE
        return
    profile = recorded.profile
    inputs = _inputs(run_dir, profile)
    for name in (JOIN, TABLES):
        made = files.get(name) or {}
        if made.get("by") == by and not by.get("dirty") and made.get("inputs") == inputs:
            continue
        if name == JOIN and not _rejoin(run_dir, profile):
            result.kept[name] = ("nothing to join it from: the engine keeps no per-request record, or the run holds "
                                 "neither its request log nor its server log")
            continue
        if name == TABLES:
            save_tables(run_dir, tables_of(run_dir, profile, latest_outcomes(run_dir, run_servings(run_dir))))
        result.previous[name] = shown_by(made.get("by"))
        result.changed.append(name)
        files[name] = {"by": by, "written": utc_now(), "inputs": inputs}


def _capacity(run_dir: RunDir, profile: RecordedProfile | str, files: dict[str, Any], by: dict[str, Any],
              result: Derived) -> None:
    """capacity.json fitted again from its own observations and searches (capacity/refit.py), with the version
    that did it inside it (it is published alone). Where the recorded profile cannot be read, only the
    launches' narrowing of the recorded answer (capacity/evidence.py) is applied."""
    recorded = json_object(run_dir.capacity)
    if not recorded:
        result.kept[CAPACITY] = "capacity.json is not a JSON object"
        return
    why = UNREADABLE
    fields: dict[str, Any] | None = None
    if isinstance(profile, RecordedProfile):
        try:
            fields = refit(profile.profile, run_dir, recorded)
        except CannotRefit as exc:
            why = str(exc)
    if fields is None:
        fields = narrowed(json.loads(json.dumps(recorded)))
        result.kept[CAPACITY] = f"its fit as recorded ({why}), narrowed by the run's launches"
        inputs = {"observations": "capacity.json observations (not re-fitted)"}
    else:
        inputs = {"observations": "capacity.json observations, each re-read from its log where the run holds it",
                  "searches": "capacity.json searches"}
    if _same(fields, recorded):
        return
    result.previous[CAPACITY] = shown_by((files.get(CAPACITY) or {}).get("by") or recorded.get("derived_by"))
    fields["derived_by"] = by
    write_json_atomic(run_dir.capacity, fields)
    files[CAPACITY] = {"by": by, "written": utc_now(), "inputs": inputs}
    result.changed.append(CAPACITY)
    result.kept.pop(CAPACITY, None)


def _same(fields: dict[str, Any], recorded: dict[str, Any]) -> bool:
    """The same content, whoever derived it."""
    def content(data: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in data.items() if k != "derived_by"}, sort_keys=True, default=str)

    return content(fields) == content(recorded)


def _rejoin(run_dir: RunDir, profile: Profile) -> bool:
    """The join of the run's rows (those of the recorded profile) with the engine's own record, written whole;
    False (nothing written) when the engine keeps no record or the run holds none."""
    manifest = json_object(run_dir.manifest)
    rows = [row for row in run_dir.read_requests() if row.profile_hash in (manifest.get("profile_hash"), None)]
    record = run_dir.engine_record()
    if not rows or (record is None and not run_dir.server_logs()):
        return False
    found = log_truth(run_dir, profile, get_adapter(profile.engine.kind), rows)
    if found is None:
        return False
    earlier = latest_truth(run_dir)
    joined = {row.request_uid for row in rows}
    kept = [{"request_uid": uid, **fields} for uid, (_, fields) in earlier.items() if uid not in joined]
    written = utc_now()
    fresh = [{"request_uid": row.request_uid, "cell_id": row.cell_id, "attempt": row.attempt, "written_utc": written,
              **join_to_keep(fields, earlier.get(str(row.request_uid), (0, None))[1])}
             for row, fields in zip(rows, found, strict=True) if row.request_uid and fields]
    write_text_atomic(run_dir.server_truth, "".join(json.dumps(line) + "\n" for line in [*kept, *fresh]))
    return True


def _inputs(run_dir: RunDir, profile: Profile) -> dict[str, str]:
    """sha256 of each raw file the derived files are made from (those the run has), and of its profile: the rows,
    the ledger, the telemetry, and each launch's logs (server.N.log of a server started again included) and request
    record (the base's, then its variants' and the speculation A/B's other side's: their rows are joined to them)."""
    records = [path for launch in reversed(launches(run_dir, profile, run_servings(run_dir)).values())
               for path in (*launch.folder.server_logs(), launch.folder.engine_record())]
    paths = [run_dir.requests, run_dir.sweep_cells, run_dir.telemetry, *records]
    found = {run_dir.name(path): sha256_file(path).hexdigest for path in paths if path is not None and path.is_file()}
    recorded = json.dumps(json_object(run_dir.manifest).get("profile"), sort_keys=True)
    return found | {"profile": hashlib.sha256(recorded.encode()).hexdigest()}
