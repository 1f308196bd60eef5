"""The setup step (00_setup): the run's whole plan checked, the machine probed and judged, probe.json.

The first step stops a run that cannot succeed before anything is downloaded or launched.
"""

from __future__ import annotations

from ninferkit.errors import NinferkitError
from ninferkit.rundir.records import ProbeRecord
from ninferkit.rundir.runs import Run, write_record
from ninferkit.steps import preflight, probe
from ninferkit.steps.catalog import Step


def setup(run: Run) -> ProbeRecord:
    """Check the plan, probe the machine, judge it against the profile; write probe.json and return it.

    A plan that cannot finish raises ProfileError (nothing probed or written); a finding of severity
    error that the profile does not waive (gpu.waive) raises NinferkitError with its fix, after
    probe.json is written, so the record of what the machine is stays.
    """
    preflight.check(run.loaded, preflight.planned_steps(run.dir))
    record = probe.probe(run.profile)
    record.schema_version = ProbeRecord.SCHEMA_VERSION
    record.profile_hash = run.profile_hash
    write_record(run.dir.probe, record)
    stopping = record.blocking()
    if stopping:
        raise NinferkitError(f"this machine cannot run profile {run.profile.name}: {len(stopping)} setup finding(s) "
                             "of severity error (probe.json has every finding):\n"
                             + "\n".join(f"  - {f.code}: {f.message}. Fix: {f.fix}" for f in stopping)
                             + "\nTo go on regardless, list the code in the profile's gpu.waive.")
    return record


STEP = Step("setup", "00_setup.ipynb", "probe.json", setup)
