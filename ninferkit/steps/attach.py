"""A run against a server someone else started (`--url`): the stand-in for the launch step.

The engine, the model id and the context are the server's (what it answers, or `--engine`/`--model`), written
into the run's profile as overrides so the manifest records where each came from, and server.json is an
external record (`server.attach`): nothing is launched, and nothing ever signals that server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ninferkit.engines import get_adapter
from ninferkit.errors import BadInput
from ninferkit.params import LoadedProfile, load_profile
from ninferkit.params.serve import ServeSection
from ninferkit.rundir.runs import Run, open_run
from ninferkit.server import process as server
from ninferkit.server.detect import Answers, Detection
from ninferkit.server.target import Target, reach
from ninferkit.steps.catalog import Step

URL_PROFILE = Path(__file__).resolve().parents[2] / "params" / "url.yaml"
"""The profile of a `--url` run when none is given: small sweeps, no launch, no artifact."""


def served_overrides(target: Target, answers: Answers, detection: Detection, overrides: list[str]) -> list[str]:
    """The profile overrides that make the run's profile the server's (before the user's own `-p`, which win)."""
    model = target.model or _one_model(answers)
    found = [f"engine.kind={detection.kind}", "artifact={served: true}", f"serve.model_id={json.dumps(model)}"]
    adapter = get_adapter(detection.kind)
    try:
        context = adapter.reported_context(answers.models or {})
    except (ValueError, TypeError, AttributeError) as exc:  # a field of the wrong shape: the server's answer
        raise BadInput(f"{answers.url}/v1/models reports a context that is no number ({exc}); give the one to "
                       "use with -p serve.max_context=N") from None
    slots = (adapter.served_pool(answers.props, answers.metrics) or {}).get("max_concurrency")
    for name, value in (("max_context", context), ("max_concurrency", slots)):
        if value is not None and (_in_bounds(name, value) or not _overridden(name, overrides)):
            found.append(f"serve.{name}={_reported(answers.url, name, value)}")
    if target.api_key_env is not None:
        found.append(f"serve.api_key_env={json.dumps(target.api_key_env)}")
    return [*found, *overrides]


def _overridden(name: str, overrides: list[str]) -> bool:
    return any(override.startswith(f"serve.{name}=") for override in overrides)


def _bounds(name: str) -> tuple[int, int]:
    """The profile's bounds of a serve field (its schema's, so they are said once)."""
    metadata = ServeSection.model_fields[name].metadata
    low, high = (next(getattr(m, bound) for m in metadata if hasattr(m, bound)) for bound in ("ge", "le"))
    return low, high


def _in_bounds(name: str, value: object) -> bool:
    low, high = _bounds(name)
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _reported(url: str, name: str, value: object) -> object:
    """A number the server reported, checked against the profile's bounds here: out of them, the server is
    named as its source, not params/url.yaml (issue 40), and `-p serve.NAME=N` is the way past it."""
    if not _in_bounds(name, value):
        low, high = _bounds(name)
        raise BadInput(f"{url} reports {str(value)[:40]} for serve.{name}, where a profile takes a whole number from "
                       f"{low} to {high:,}: the number is the server's; give the one to use with -p serve.{name}=N")
    return value


def _one_model(answers: Answers) -> str:
    ids = answers.model_ids()
    if answers.models is None:
        why = answers.notes.get("/v1/models", "no answer")
        raise BadInput(f"{answers.url}/v1/models gave no model list ({why}); name the model with --model")
    if len(ids) != 1:
        listed = ", ".join(ids) or "none"
        raise BadInput(f"{answers.url} lists {len(ids)} models at /v1/models ({listed}); name one with --model")
    return ids[0]


def open_url_run(target: Target, profile: str | Path | None = None, run_dir: str | Path | None = None,
                 overrides: list[str] | None = None, check: Callable[[LoadedProfile], None] | None = None) -> Run:
    """Open (or reopen) a run whose server is the one at `target.url`, checked and recorded as external.
    `check` sees the run's profile before anything is written (the runner's preflight)."""
    url, answers, detection = reach(target)
    loaded = load_profile(profile or URL_PROFILE, served_overrides(target, answers, detection, overrides or []))
    if check is not None:
        check(loaded)
    run = open_run(loaded, run_dir)
    pool = get_adapter(detection.kind).served_pool(answers.props, answers.metrics)
    server.attach(run, url, detection.signs, detection.given, detection.version, target.log, pool)
    run.dir.record_step("attach", status="ok", url=url, engine=detection.kind,
                        note="not started by ninferkit: no launch step, and no stop signals it")
    return run


STEP = Step("attach", None, "server.json", open_url_run)
"""No notebook runs it: `--url` opens the run with it, in the launch step's place."""
