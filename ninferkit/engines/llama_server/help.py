"""What a llama-server binary offers, read from its `--help`, and the speculative-decoding flags built on it.

llama.cpp renames and removes options between builds (`--draft-max` became `--spec-draft-n-max`), and
which `--spec-type` values exist depends on the build. So `serve.spec` is checked against the binary that
will run: an unknown method or option is refused by its profile field, with what the build has, before
the server starts; a binary that cannot be asked (not built yet) is checked when the launch builds it.
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ninferkit.engines.llama_server.options import Spec
from ninferkit.errors import ProfileError

_OPTION_LINE = re.compile(r"^(--?[A-Za-z][^\s,]*(?:,?\s{1,6}--?[A-Za-z][^\s,]*)*)")
_SPEC_TYPES = re.compile(r"^--spec-type\s+([a-z0-9,-]+)", re.MULTILINE)


@dataclass(frozen=True)
class BinaryHelp:
    """The option names a binary's --help lists, and its `--spec-type` values (empty: none)."""

    options: frozenset[str]
    spec_types: tuple[str, ...]


def read_help(text: str) -> BinaryHelp:
    """Parse llama.cpp's --help: an option line starts at column 0 with its names (`-ctk,  --cache-type-k TYPE`)."""
    options: set[str] = set()
    for line in text.splitlines():
        names = _OPTION_LINE.match(line)
        if names:
            options.update(token for token in re.split(r"[,\s]+", names[1]) if token.startswith("-"))
    types = _SPEC_TYPES.search(text)
    return BinaryHelp(frozenset(options), tuple(types[1].split(",")) if types else ())


def binary_help(binary: Path) -> BinaryHelp | None:
    """The --help of an executable file (read once per file version); None when it cannot be run."""
    try:
        stat = binary.stat()
    except OSError:
        return None
    return _help(str(binary.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _help(path: str, mtime_ns: int, size: int) -> BinaryHelp | None:
    try:
        done = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return read_help(done.stdout) if done.returncode == 0 else None


def option_prefix(method: str) -> str:
    """Where a method's own options live: `--spec-draft-` for every draft-* type, `--spec-<method>-` else."""
    return "--spec-draft-" if method.startswith("draft-") else f"--spec-{method}-"


def spec_argv(spec: Spec, offered: BinaryHelp | None, binary: str) -> list[str]:
    """`--spec-type` and the method's options; ProfileError naming the field when the build lacks one.
    Without `offered` (a binary not built yet) the flags are built unchecked: the launch checks them."""
    if spec.method is None:
        if spec.options:
            raise ProfileError(f"serve.spec.options = {spec.options}: options of no method; set serve.spec.method")
        return []
    if spec.method == "none":
        raise ProfileError("serve.spec.method = 'none': write null to turn speculative decoding off")
    if offered is not None:
        if not offered.spec_types:
            raise ProfileError(f"serve.spec.method = {spec.method!r}: {binary} has no --spec-type (an older "
                               "llama.cpp); set serve.spec.method to null, or use llama.cpp 11434 or newer")
        methods = [name for name in offered.spec_types if name != "none"]
        if spec.method not in methods:
            raise ProfileError(f"serve.spec.method = {spec.method!r}: not a --spec-type of {binary}; allowed: "
                               f"{', '.join(methods)}")
    argv = ["--spec-type", spec.method]
    prefix = option_prefix(spec.method)
    for name, value in spec.options.items():
        flag = prefix + name
        if offered is not None and flag not in offered.options:
            own = sorted(option[len(prefix):] for option in offered.options if option.startswith(prefix))
            raise ProfileError(f"serve.spec.options.{name}: {binary} has no {flag}; {spec.method}'s options: "
                               f"{', '.join(own) or 'none'}")
        argv += [flag, str(value)]
    return argv
