"""The other side of the speculative-decoding A/B: the run's profile served with speculation off.

Task cells planned with `speculation: off` (sweeps.tasks.speculation_ab) run against a second server,
launched from the run's profile and overrides with `serve.spec` reset (its defaults: no method) on a free
loopback port, beside the run's own server, which keeps serving the rest: each twin is measured right
after its cell. Its run folder is run_dir/sweeps/speculation-off/ (server.json with its argv,
logs/server.log); its rows go into the run's own requests.jsonl, so both sides are one table. It is
stopped when the cells end, also on failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ninferkit.capacity.launches import free_port
from ninferkit.errors import ServerError
from ninferkit.rundir.identity import ServingIdentity
from ninferkit.rundir.runs import Run, open_run
from ninferkit.rundir.servings import SPEC_OFF
from ninferkit.server import process as server
from ninferkit.sweeps.cell import Cell
from ninferkit.sweeps.execute import SweepContext, base_row


def is_spec_off(cell: Cell[Any]) -> bool:
    """Whether the cell asks for speculative decoding off (the tasks kind's `speculation: off` twin)."""
    return bool(cell.params.as_dict().get("speculation") == SPEC_OFF)


@contextmanager
def spec_off_context(ctx: SweepContext, needed: bool, serving: ServingIdentity) -> Iterator[SweepContext | None]:
    """A SweepContext like `ctx` whose requests go to the speculation-off server, for the block; None when
    no cell needs it (nothing is launched then). `serving`: the run's serving with speculation off
    (rundir/servings.py), which its rows and ledger lines name. Raises ServerError when that server does not start."""
    if not needed:
        yield None
        return
    run = ctx.run
    if run.loaded.source is None:
        raise ServerError("the speculation A/B launches a second server from the profile file the run was opened "
                          "from, and this run has none")
    other: Run = open_run(run.loaded.source, run.dir.speculation_off,
                          [*run.loaded.overrides, "serve.spec={}", f"serve.port={free_port()}"])
    try:
        record = server.start(other, progress=False)
        yield replace(ctx, url=str(record.url), model_id=server.record_model_id(record, other.profile),
                      base_row=base_row(run, ctx.adapter, record, serving), log_path=Path(str(record.log)),
                      serving=serving, server_dir=other.dir)
    finally:
        server.stop(other.dir)
