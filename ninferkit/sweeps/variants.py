"""A variant's launch: the run's profile with the variant's fields set, served in turn on the same artifact.

The sweeps step measures the base's cells on the run's own server, then each variant's (the profile's
`variants`, issue 39): it stops the run's server (a GPU holds one model's pool at a time), launches the variant
from the run's profile file and overrides plus the variant's, on a free loopback port, into its own run folder
(run_dir/variants/<name>/: server.json with the startup ledger, logs/server.log, variant.json), measures the
variant's cells against it and stops it. Its rows and ledger lines go into the run's own requests.jsonl and
cells.jsonl, naming the variant's serving (rundir/servings.py), so a rerun keeps a finished variant's cells and
launches only the variants with cells left, and the tables hold every variant side by side.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from ninferkit.capacity.launches import free_port
from ninferkit.errors import NinferkitError, ServerError
from ninferkit.measure.workloads import Tokenizer
from ninferkit.params.variants import Variant
from ninferkit.rundir.identity import ServingIdentity
from ninferkit.rundir.records import VariantRecord
from ninferkit.rundir.runs import Run, open_run, utc_now, write_record
from ninferkit.server import process as server
from ninferkit.sweeps.execute import SweepContext, base_row


@contextmanager
def variant_context(ctx: SweepContext, variant: Variant, serving: ServingIdentity,
                    cells: int) -> Iterator[SweepContext]:
    """A SweepContext like `ctx` whose requests go to the variant's server, launched for the block and stopped
    after it (also on failure); variant.json records the launch, its time and how it ended. Raises ServerError
    (after recording it) when the variant's server does not start."""
    run = ctx.run
    if run.loaded.source is None:
        raise ServerError(f"variant {variant.name!r} is launched from the profile file the run was opened from, and "
                          "this run has none")
    folder = run.dir.variant(variant.name)
    record = VariantRecord(schema_version=VariantRecord.SCHEMA_VERSION, profile_hash=run.profile_hash,
                           name=variant.name, set=variant.set, why=variant.why, serving_id=serving.id,
                           state="running", launched=utc_now(), cells_sent=cells)
    folder.path.mkdir(parents=True, exist_ok=True)
    write_record(folder.variant_record, record)
    started = time.monotonic()
    other: Run = open_run(run.loaded.source, folder.path,
                          [*run.loaded.overrides, *variant.launch_overrides(),
                           f"serve.port={free_port()}"])
    try:
        try:
            launched = server.start(other, progress=False)
        except NinferkitError as exc:
            record.state, record.error = "failed", f"{type(exc).__name__}: {exc}"
            raise
        record.ready_s = launched.ready_s
        with Tokenizer(str(launched.url), ctx.adapter, ctx.headers) as tokenizer:  # counted by the variant's server
            yield replace(ctx, url=str(launched.url), model_id=server.record_model_id(launched, other.profile),
                          tokenizer=tokenizer, base_row=base_row(run, ctx.adapter, launched, serving),
                          log_path=Path(str(launched.log)), serving=serving, server_dir=other.dir)
        record.state = "done"
    except BaseException as exc:
        if record.state == "running":
            record.state, record.error = "failed", record.error or f"{type(exc).__name__}: {exc}"
        raise
    finally:
        server.stop(other.dir)
        record.seconds = round(time.monotonic() - started, 2)
        write_record(folder.variant_record, record)
