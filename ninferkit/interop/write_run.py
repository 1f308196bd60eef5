"""An import written as a run directory that `ninferkit compare` and the write-up read.

The tool's per-request records become requests.jsonl rows of one sweep, `imported`, whose cell is the load the
tool ran (`{"concurrency": 2}`, `{"request_rate": 4.0}`: each row's `cell`, as the importer read it), so two
tools' runs of one load pair cell by cell. Every row is checked by
the reader's own rules before anything is written (`request_row_refusals`): a file whose rows ninferkit could
not read back is refused whole. The tool's aggregates and the file's provenance go to imported.json, and the
manifest says the run was imported (no profile, no server ninferkit started).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from ninferkit.errors import BadInput
from ninferkit.interop.base import Imported, cell_id
from ninferkit.rundir.hashing import sha256_file
from ninferkit.rundir.records import ImportedRecord, Manifest, request_row_refusals
from ninferkit.rundir.runs import RunDir, append_jsonl, utc_now, write_json_atomic, write_record

SWEEP = "imported"


def write_imported(imported: Imported, source: Path, out: Path) -> RunDir:
    """Write `imported` (read from `source`) as the run directory `out`.

    Raises BadInput, before writing anything, when `out` exists and is not empty or a row would be refused."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"-o {out}: exists and is not an empty folder; an import makes a new run directory")
    run_dir = RunDir(out.resolve())
    run_id = run_dir.path.name
    rows = [{"schema_version": 1, "run_id": run_id, "sweep": SWEEP, "cell_id": cell_id(row["cell"]),
             "attempt": "imported", "repetition": 0, "request_uid": uuid.uuid4().hex, **row}
            for row in imported.rows]
    for number, row in enumerate(rows, 1):
        refused = request_row_refusals(row)
        if refused:
            field, why = next(iter(refused.items()))
            raise BadInput(f"{source}: request {number}: {field} {why}; ninferkit would not read that row back")
    created = utc_now()
    write_json_atomic(run_dir.manifest, Manifest(
        schema_version=Manifest.SCHEMA_VERSION, run_id=run_id, created=created,
        profile_name=f"imported-{imported.tool}",
        steps={"import": {"status": "done"}},
    ).model_dump(mode="json", exclude_unset=True) | {
        "imported_from": {"tool": imported.tool, "version": imported.version, "file": str(source)},
        "updated": created})
    for row in rows:
        append_jsonl(run_dir.requests, row)
    write_record(run_dir.imported, ImportedRecord(
        schema_version=ImportedRecord.SCHEMA_VERSION, tool=imported.tool, version=imported.version,
        source=str(source), files={path.name: sha256_file(path).hexdigest for path in imported.files},
        per_request=bool(rows),
        aggregates=[aggregate.as_dict() for aggregate in imported.aggregates], notes=imported.notes))
    return run_dir
