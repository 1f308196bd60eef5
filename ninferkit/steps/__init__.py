"""The runbook: seven notebooks, one step each, and what runs them.

Every step has one shape, `step(run, *, options) -> record`: it reads what earlier steps wrote into the run
directory, writes its own record there and returns it, so a step can be re-run alone, from JupyterLab or
headless. Each lives in its own module here and declares itself once (`STEP`, ninferkit.steps.catalog):

    setup      00_setup            the plan checked, the machine probed (probe.py)    probe.json
    verify     01_artifact_verify  the model file obtained and verified               artifact.json
    launch     02_launch           the run's server, fresh and checked                server.json
    attach     (--url)             someone else's server, in launch's place           server.json
    sweeps     03_sweeps           the measurements                                   tables/
    capacity   04_capacity_fit     the memory formula and the largest pool            capacity.json
    writeup    05_writeup          the report                                         report/
    deploy     06_deploy           the server left running as a service (optional)    deploy.json

Beside them, the plumbing: `runner` (the notebooks in order under papermill), `preflight` (the whole plan checked
before anything starts), `notebook` (what a notebook's cells call), `notebook_errors`, `lab` (JupyterLab).

The notebooks call `ninferkit.steps.setup(run)` and so on: those names are bound below to the steps' functions,
wrapped so an OSError is named (notebook.step_functions), over the modules of the same names. In code, import a
step's function from its module (`from ninferkit.steps.setup import setup`), which works whatever is bound.
"""

from __future__ import annotations

from ninferkit.steps.notebook import (
    REPOSITORY,
    acceptance_table,
    findings_table,
    gpu_table,
    ledger_table,
    notebook_run,
    profile_table,
    step_functions,
)

# Loading the catalog loaded every step's module, which bound each module's name on this package; the
# functions the notebooks call are bound over them, once (a module already loaded is not bound again). A new
# step's module is found by the catalog and bound here with the others: no list of them to keep.
_functions = step_functions()
globals().update(_functions)

__all__ = ["REPOSITORY", "acceptance_table", "findings_table", "gpu_table", "ledger_table", "notebook_run",
           "profile_table", *sorted(_functions)]
