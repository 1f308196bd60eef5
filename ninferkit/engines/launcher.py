"""How an engine is started: its binary, command line, environment, Docker files, readiness, secrets.

The launch step (ninferkit/server/process.py) and `engines/docker.py` need this part of an engine; the write-up's
recipe asks it which profile field a flag came from, the command line read backwards.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar

from ninferkit.engines.part import EnginePart
from ninferkit.params.profile import Profile


class Launcher(EnginePart):
    """An engine's command line and process; adapters implement `binary` and `argv`."""

    default_binary: ClassVar[str]
    health_path: ClassVar[str] = "/health"
    secret_flags: ClassVar[frozenset[str]] = frozenset({"--api-key"})

    def binary(self, profile: Profile) -> Path:
        """The engine executable for a native launch (may build or locate it)."""
        raise NotImplementedError

    def found_binary(self, profile: Profile) -> Path | None:
        """The executable `binary` would give, where it is already here (nothing built or fetched): what
        `deploy --dry-run` shows; None when it is not here yet."""
        found = shutil.which(profile.engine.binary or self.default_binary)
        return Path(found) if found else None

    def argv(self, profile: Profile, model_path: Path, binary: Path, served_as: Path | None = None) -> list[str]:
        """The exact command line, as a list; never a shell string.

        `model_path` is the model on this machine, read for what the command line depends on (llama.cpp's weight
        type, vLLM's config.json); `served_as` is the path the engine is given where it sees the model elsewhere
        (the model folder mounted in a container), so a deployment decides as a launch does."""
        raise NotImplementedError

    def env(self, profile: Profile) -> dict[str, str]:
        """Extra environment for the server process (secrets go here, not into argv, where possible)."""
        return {}

    def docker_files(self, profile: Profile) -> dict[str, str]:
        """Files for a Docker deployment (name -> text), written to run_dir/docker/ by the launch step."""
        return {}

    def docker_mounts(self, profile: Profile) -> tuple[list[str], dict[str, Any]]:
        """(extra `docker run` arguments, serve fields as the engine sees them inside the container) for
        files the engine writes outside the model folder."""
        return [], {}

    def uses_gpu(self, profile: Profile) -> bool:
        """The engine runs on the GPUs, so a container gets them (`docker run --gpus`); a CPU build does not, and
        a Docker engine without the NVIDIA runtime refuses `--gpus`."""
        return True

    def is_ready(self, status_code: int, body: str) -> bool:
        return status_code == 200

    def redact(self, argv: list[str], mask: str = "***") -> list[str]:
        """argv with the value of every secret flag (`--api-key KEY`, `--api-key=KEY`) replaced by `mask`:
        for logs and result files, and for a placeholder a container's shell expands."""
        out = list(argv)
        for index, arg in enumerate(out[:-1]):
            if arg in self.secret_flags:
                out[index + 1] = mask
        for index, arg in enumerate(out):
            flag, eq, _ = arg.partition("=")
            if eq and flag in self.secret_flags:
                out[index] = f"{flag}={mask}"
        return out

    def profile_field_of(self, flag: str) -> str | None:
        """The profile field a command-line flag of this engine comes from (the write-up's recipe);
        None when the engine keeps no flag table (the recipe then matches by name or value)."""
        return None
