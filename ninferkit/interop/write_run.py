"""An import written as a run directory that `ninferkit compare` and the write-up read.

The tool's per-request records become requests.jsonl rows of one sweep, `imported`, whose cell is the load the
tool ran (`{"concurrency": 2}`, `{"request_rate": 4.0}`: each row's `cell`, as the importer read it), so two
tools' runs of one load pair cell by cell. Every row is checked by
the reader's own rules before anything is written (`request_row_refusals`): a file whose rows ninferkit could
not read back is refused whole. The tool's aggregates and the file's provenance go to imported.json, and the
manifest says the run was imported (no profile, no server ninferkit started).

The manifest says `import: writing` until the last row and imported.json are written, and only then `done`:
an import killed midway is no finished run (`report` refuses it, `import -o` again refuses the folder); before
issue 40 it said done first, and a cut import was published. Rows go in batches of IMPORT_BATCH, one fsync each.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from ninferkit.errors import BadInput
from ninferkit.interop.base import Imported, cell_id
from ninferkit.rundir.hashing import sha256_file
from ninferkit.rundir.records import ImportedRecord, Manifest, request_row_refusals
from ninferkit.rundir.runs import RunDir, append_jsonl_rows, utc_now, write_json_atomic, write_record

SWEEP = "imported"
IMPORT_BATCH = 5000
"""Rows written per write and fsync: ~1 MB, a second's work at most."""
WRITING, DONE = "writing", "done"
"""The import step's status in the manifest while rows are written, and once all are."""


def write_imported(imported: Imported, source: Path, out: Path) -> RunDir:
    """Write `imported` (read from `source`) as the run directory `out`.

    Raises BadInput, before writing anything, when `out` exists and is not empty or a row would be refused."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"-o {out}: exists and is not an empty folder; an import makes a new run directory (one cut "
                       "short by a kill: remove it and import again)")
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
        steps={"import": {"status": WRITING}},
    ).model_dump(mode="json", exclude_unset=True) | {
        "imported_from": {"tool": imported.tool, "version": imported.version, "file": str(source),
                          "model": imported.model},
        "updated": created})
    for start in range(0, len(rows), IMPORT_BATCH):
        append_jsonl_rows(run_dir.requests, rows[start:start + IMPORT_BATCH])
    write_record(run_dir.imported, ImportedRecord(
        schema_version=ImportedRecord.SCHEMA_VERSION, tool=imported.tool, version=imported.version,
        source=str(source), files={path.name: sha256_file(path).hexdigest for path in imported.files},
        per_request=bool(rows),
        aggregates=[aggregate.as_dict() for aggregate in imported.aggregates], notes=imported.notes))
    run_dir.record_step("import", status=DONE)
    return run_dir
