"""A deployment as a Docker container that restarts itself (seed 000 §3 and §1.5's run.sh).

Start is the report's: remove a container of the same name, then `docker run -d --name NAME --restart
unless-stopped ... IMAGE ninfer-serve MODEL FLAGS`; stop is its `docker stop -t 30 NAME`, logs its `docker logs
--tail 100 NAME`, status its `docker inspect` (State and RestartCount: a restart after a crash shows there).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ninferkit.deploy import Mode, Plan, ServiceState, service_url
from ninferkit.deploy.actions import Host
from ninferkit.engines.docker import service_argv
from ninferkit.engines.launcher import Launcher
from ninferkit.params.profile import Profile

STOP_GRACE_S = 30
"""seed 000 §1.5: `docker stop -t 30` (a prefill in flight gets time to finish)."""


class DockerMode(Mode):
    name = "docker"

    def plan(self, profile: Profile, adapter: Launcher, model_path: Path, service: str, host: str,
             binary: Path | None) -> Plan:
        argv = service_argv(profile, adapter, model_path, service, host)  # no key in it: it enters by name
        return Plan(self.name, service, argv, adapter.docker_files(profile),
                    service_url(profile, host))

    def needs(self, host: Host) -> str | None:
        try:
            code, out = host.ask(["docker", "info", "--format", "{{.ServerVersion}}"])
        except Exception as exc:  # ToolMissing: no docker client
            return str(exc)
        return None if code == 0 else f"no Docker engine answers (`docker info`: {out.strip()[-300:]})"

    def start(self, plan: Plan, folder: Path, host: Host, env: dict[str, str] | None = None) -> None:
        if self.state(plan.name, host).exists:
            host.act(f"replace the container {plan.name} (as run.sh start does)", ["docker", "rm", "-f", plan.name])
        host.act(f"start the container {plan.name}", plan.argv, env=env)

    def state(self, name: str, host: Host) -> ServiceState:
        code, out = host.ask(["docker", "inspect", "--type", "container", name])
        if code != 0:
            return ServiceState(False, False, "no such container")
        found: dict[str, Any] = json.loads(out)[0]
        state = found.get("State", {})
        return ServiceState(True, bool(state.get("Running")), str(state.get("Status")),
                            restarts=found.get("RestartCount"), pid=state.get("Pid") or None,
                            detail={"image": found.get("Config", {}).get("Image"),
                                    "started_at": state.get("StartedAt"), "exit_code": state.get("ExitCode"),
                                    "restart_policy": found.get("HostConfig", {}).get("RestartPolicy", {}).get("Name")})

    def logs_argv(self, name: str, lines: int, follow: bool) -> list[str]:
        return ["docker", "logs", *(["-f"] if follow else []), "--tail", str(lines), name]

    def stop(self, name: str, host: Host) -> bool:
        if not self.state(name, host).running:
            return False
        host.act(f"stop the container {name}", ["docker", "stop", "-t", str(STOP_GRACE_S), name], timeout_s=60)
        return True


MODE = DockerMode()
