"""A deployment from start to a checked service: plan, boot unit, start, health wait, acceptance checks.

Everything that can refuse is asked before anything changes (the mode's manager answers, the key's variable
is set, the model file is where the runbook put it, the boot unit can be installed); then the plan's files go
to the deployment's folder with deploy.json, and each change is printed as it runs (deploy/actions.py). The
service is left running when a check fails, as the report's script leaves its container (`deploy logs`
shows why, `deploy stop` ends it).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import httpx

from ninferkit import bounded
from ninferkit.artifact.paths import model_path, planned_path
from ninferkit.deploy import Mode, Plan, ServiceState, mode_of, publish_host, service_name
from ninferkit.deploy.actions import Host
from ninferkit.deploy.from_run import capacity_overrides
from ninferkit.deploy.power import install_boot_unit, refusal
from ninferkit.engines import get_adapter
from ninferkit.engines.base import EngineAdapter
from ninferkit.engines.log_reader import LogReader
from ninferkit.errors import NinferkitError, ReadinessTimeout, ServerError
from ninferkit.params import load_profile
from ninferkit.params.load import LoadedProfile
from ninferkit.params.profile import Profile
from ninferkit.rundir.records import AcceptanceCheck, DeployRecord
from ninferkit.rundir.runs import Run, utc_now, write_record, write_text_atomic
from ninferkit.server.process import acceptance_checks, api_key, auth_headers
from ninferkit.transports import uses_proxy

RECORD = "deploy.json"
DEPLOYMENTS = Path("deployments")
"""Where a deployment's folder goes by default (relative to the working directory): deployments/<name>/."""


def load(profile: str | Path, overrides: Sequence[str] = (), from_run: str | Path | None = None) -> LoadedProfile:
    """The profile as deployed: its -p overrides, then the capacity answer of `from_run` (which wins)."""
    loaded = load_profile(profile, overrides)
    if from_run is None:
        return loaded
    return load_profile(profile, [*overrides, *capacity_overrides(Path(from_run), loaded.profile)])


def load_for_run(run: Run, from_capacity: bool = False) -> LoadedProfile:
    """A runbook run's profile as deployed (its overrides; with `from_capacity`, its own capacity answer)."""
    if run.loaded.source is None:
        raise NinferkitError("this run's profile has no file to load again; deploy with `ninferkit deploy PROFILE`")
    return load(run.loaded.source, run.loaded.overrides, run.dir.path if from_capacity else None)


def describe(profile: Profile) -> str:
    """What a deployment would run and write, as `deploy --dry-run` prints it: the command the deployment would
    run, decided from the model file where it is here (llama.cpp's repacking on an AMX CPU reads its weight type),
    and said so where it is not yet."""
    mode, planned = plan(profile)
    files = "".join(f"\n\n# ---- {name} ----\n{text.rstrip()}" for name, text in planned.files.items())
    text = command(mode, planned) + files + "\n"
    model = planned_path(profile)
    if not model.exists():
        text += (f"\n# {model.name} is not here yet (`ninferkit verify` puts it there, and deploy needs it): what the "
                 "command reads from the model (llama.cpp's --no-repack on an AMX CPU, vLLM's KV bytes) is decided "
                 "once it is\n")
    return text


def command(mode: Mode, planned: Plan) -> str:
    """The line that starts the service, as --dry-run prints it and the write-up quotes it: the `docker run -d
    --restart unless-stopped ...` command, or what the systemd unit runs."""
    return (shlex.join(planned.argv) if mode.name == "docker"
            else f"# {mode.name} unit {planned.name}.service runs: {shlex.join(planned.argv)}")


def plan(profile: Profile, binary: Path | None = None) -> tuple[Mode, Plan]:
    """The mode and what it would run and write; nothing is built, downloaded or started."""
    mode = mode_of(profile)
    adapter = get_adapter(profile.engine.kind)
    return mode, mode.plan(profile, adapter, planned_path(profile), service_name(profile), publish_host(profile),
                           binary)


def deploy(loaded: LoadedProfile, *, folder: Path | None = None, from_run: str | Path | None = None,
           boot_unit: bool = True, say: Callable[[str], None] = print) -> DeployRecord:
    """Start the profile's server as a service and check it; deploy.json in `folder` says what was done.

    Raises NinferkitError before any change when this machine cannot run the deployment, HostActionFailed
    when a command fails, ReadinessTimeout or ServerError when the service does not become healthy or fails
    an acceptance check (it is left running: `ninferkit deploy logs`)."""
    profile = loaded.profile
    host = Host(say)
    mode = mode_of(profile)
    adapter = get_adapter(profile.engine.kind)
    name = service_name(profile)
    why_not = mode.needs(host)
    if why_not:
        raise NinferkitError(f"cannot deploy {name} with {mode.name}: {why_not}")
    installs_unit = boot_unit and profile.gpu.power_limit_w is not None
    if installs_unit:
        why_not = refusal(profile, boot_unit=True)
        if why_not:
            raise NinferkitError(f"cannot install the power-limit boot unit: {why_not}; or deploy without it "
                                 "(--no-boot-unit) and set the limit by hand")
    api_key(profile)  # the key's variable is set, or nothing starts
    model = model_path(profile)  # where the verify step put it (ArtifactError otherwise), or generated
    binary = None if mode.name == "docker" else adapter.binary(profile)
    planned = mode.plan(profile, adapter, model, name, publish_host(profile), binary)
    folder = folder or DEPLOYMENTS / name
    for file_name, text in planned.files.items():
        write_text_atomic(folder / file_name, text)
    record = DeployRecord(schema_version=DeployRecord.SCHEMA_VERSION, mode=mode.name, name=name, profile=profile.name,
                          argv=planned.argv, files=sorted(planned.files), url=planned.url,
                          overrides=list(loaded.overrides), from_run=str(from_run) if from_run else None,
                          started=utc_now())
    record.boot_unit = (install_boot_unit(profile, folder, host) if installs_unit else
                        "not installed: --no-boot-unit" if boot_unit is False else "none: no gpu.power_limit_w")
    write_record(folder / RECORD, record)
    started = time.monotonic()
    mode.start(planned, folder, host, env=adapter.env(profile))
    record.actions = host.done
    write_record(folder / RECORD, record)
    wait_healthy(profile, adapter, mode, name, planned.url)
    record.ready_s = round(time.monotonic() - started, 3)
    checks = acceptance_checks(profile, adapter, planned.url)
    record.checks = [AcceptanceCheck.model_validate(asdict(check)) for check in checks]
    write_record(folder / RECORD, record)
    failed = [check.name for check in checks if not check.ok]
    if failed:
        raise ServerError(f"{name} is up but failed the acceptance checks ({', '.join(failed)}); it is left running: "
                          f"`ninferkit deploy logs` shows its log, `ninferkit deploy stop` ends it", url=planned.url)
    return record


def wait_healthy(profile: Profile, adapter: EngineAdapter, mode: Mode, name: str, url: str,
                 timeout_s: float | None = None) -> float:
    """Seconds until the service answers its health check; ReadinessTimeout (with its log's diagnosis) when it
    does not within serve.startup_timeout_s, ServerError at once when its manager says it is gone for good."""
    deadline = time.monotonic() + (timeout_s or profile.serve.startup_timeout_s)
    started = time.monotonic()
    host = Host()
    with httpx.Client(timeout=2.0, headers=auth_headers(profile), trust_env=uses_proxy(url)) as client:
        while True:
            try:
                status, body = bounded.get(client, url + adapter.health_path, deadline_s=2.0)
                if not body.cut and adapter.is_ready(status, body.text()):
                    return round(time.monotonic() - started, 3)
            except httpx.TransportError:
                pass
            state = mode.state(name, host)
            if not state.exists or state.status in ("exited", "dead", "failed/failed"):
                raise _not_up(ServerError, f"{name} stopped during startup ({state.status})", adapter, mode, name, url)
            if time.monotonic() > deadline:
                raise _not_up(ReadinessTimeout, f"{name} did not answer {adapter.health_path} within "
                              f"{deadline - started:.0f} s (raise serve.startup_timeout_s for a large model)",
                              adapter, mode, name, url)
            time.sleep(0.5)


def _not_up(kind: type[ServerError], message: str, adapter: LogReader, mode: Mode, name: str,
            url: str) -> ServerError:
    text = logs_text(mode, name, lines=200)
    tail = "\n".join(text.splitlines()[-15:])
    return kind(message, url=url, log_tail=tail, diagnosis=adapter.diagnose(text))


def logs_text(mode: Mode, name: str, lines: int = 100) -> str:
    """The service's last `lines` log lines, as its manager keeps them."""
    return Host().ask(mode.logs_argv(name, lines, follow=False))[1]


def state(profile: Profile) -> ServiceState:
    return mode_of(profile).state(service_name(profile), Host())


def stop(profile: Profile, say: Callable[[str], None] = print) -> bool:
    return mode_of(profile).stop(service_name(profile), Host(say))
