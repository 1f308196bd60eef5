"""The launch step (02_launch): the run's server, fresh and checked, its record in server.json."""

from __future__ import annotations

from ninferkit.rundir.records import ServerRecord
from ninferkit.rundir.runs import Run
from ninferkit.server import process as server
from ninferkit.steps.catalog import Step


def launch(run: Run, *, progress: bool = True) -> ServerRecord:
    """Stop what this run left running, start its server, wait for it and check it (server.start).

    Raises ServerStartError, ReadinessTimeout or ServerError as server.start does; server.json says
    what happened either way.
    """
    return server.start(run, progress=progress)


STEP = Step("launch", "02_launch.ipynb", "server.json", launch)
