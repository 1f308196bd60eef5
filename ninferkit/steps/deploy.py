"""The deploy step (06_deploy, optional): the run's profile left running as a service (ninferkit/deploy).

Off unless asked (`start=True`), so the runbook leaves no service behind: the step then only prints what would
run. `ninferkit run` never runs it; `ninferkit deploy status|logs|stop PROFILE` finds the service afterwards.
"""

from __future__ import annotations

from collections.abc import Callable

from ninferkit.deploy import service
from ninferkit.rundir.records import DeployRecord
from ninferkit.rundir.runs import Run
from ninferkit.steps.catalog import Step


def deploy(run: Run, *, start: bool = False, from_capacity: bool = False,
           say: Callable[[str], None] = print) -> DeployRecord | None:
    """Print what the deployment runs and writes; with `start`, start it and check it (deploy.service.deploy),
    returning its record. `from_capacity` deploys this run's capacity answer instead of the profile's pool."""
    loaded = service.load_for_run(run, from_capacity)
    say(service.describe(loaded.profile))
    if not start:
        return None
    return service.deploy(loaded, from_run=run.dir.path if from_capacity else None, say=say)


STEP = Step("deploy", "06_deploy.ipynb", "deployments/<name>/deploy.json", deploy, runbook=False)
"""Its record is the service's, in the deployment's folder (relative to the working directory), not the run's."""
