"""A run against a server someone else started (`--url`): the stand-in for the launch step.

The engine, the model id and the context are the server's (what it answers, or `--engine`/`--model`), written
into the run's profile as overrides so the manifest records where each came from, and server.json is an
external record (`server.attach`): nothing is launched, and nothing ever signals that server.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ninferkit.bounded import LOG_FILE_BYTES, regular_file
from ninferkit.engines import get_adapter
from ninferkit.errors import BadInput
from ninferkit.params import LoadedProfile, load_profile
from ninferkit.rundir.runs import Run, open_run
from ninferkit.server import process as server
from ninferkit.server.detect import Answers, Detection, ask, checked_url, detect

URL_PROFILE = Path(__file__).resolve().parent.parent / "params" / "url.yaml"
"""The profile of a `--url` run when none is given: small sweeps, no launch, no artifact."""


@dataclass
class Target:
    """The server a `--url` command talks to, as the user named it."""

    url: str
    api_key_env: str | None = None
    model: str | None = None
    engine: str | None = None
    log: Path | None = None


def reach(target: Target) -> tuple[str, Answers, Detection]:
    """The checked URL, what the server answered and its engine; BadInput before anything is written when the
    URL, the key's variable, the log or the engine is wrong."""
    url = checked_url(target.url)
    if target.log is not None:
        regular_file(target.log, LOG_FILE_BYTES, "reading the server's log (--log)")
    if target.api_key_env is not None and not os.environ.get(target.api_key_env):
        raise BadInput(f"--api-key-env names {target.api_key_env}, but it is not set; export "
                       f"{target.api_key_env}=<key> first")
    headers = server.bearer(server.env_key(target.api_key_env, "--api-key-env"))
    answers = ask(url, headers)
    return url, answers, detect(answers, target.engine)


def served_overrides(target: Target, answers: Answers, detection: Detection, overrides: list[str]) -> list[str]:
    """The profile overrides that make the run's profile the server's (before the user's own `-p`, which win)."""
    model = target.model or _one_model(answers)
    found = [f"engine.kind={detection.kind}", "artifact={served: true}", f"serve.model_id={json.dumps(model)}"]
    adapter = get_adapter(detection.kind)
    context = adapter.reported_context(answers.models or {})
    if context is not None:
        found.append(f"serve.max_context={context}")
    slots = (adapter.served_pool(answers.props, answers.metrics) or {}).get("max_concurrency")
    if slots is not None:
        found.append(f"serve.max_concurrency={slots}")
    if target.api_key_env is not None:
        found.append(f"serve.api_key_env={json.dumps(target.api_key_env)}")
    return [*found, *overrides]


def _one_model(answers: Answers) -> str:
    ids = answers.model_ids()
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
