"""The pinned recipe: engine build, artifact, container and launch flags with the reason for each.

Reasons are the comments operators write beside profile keys (``max_context: 131072  # why``). A
flag is tied to the profile key it came from by the engine's own flag table where it has one (NInfer:
``ninferkit.engines.ninfer.flags``), else by name (``-ctk`` has none, ``--kv-dtype`` and
``serve.kv.dtype`` match), else by value when exactly one serve/engine key holds that value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ninferkit.errors import ProfileError
from ninferkit.host.mounts import file_system
from ninferkit.params.load import read_profile_text, yaml_comments
from ninferkit.report.data import RunData
from ninferkit.report.fmt import number

_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
POSITIONAL = "(argument)"


@dataclass(frozen=True)
class Flag:
    flag: str
    value: str | None
    key: str | None
    reason: str | None


def profile_comments(run: RunData) -> tuple[dict[str, str], str]:
    """(key path -> comment, where they came from): recorded in the manifest, else from the profile file."""
    source = run.manifest.profile_source
    if run.manifest.profile_comments is not None:
        recorded = dict(run.manifest.profile_comments)
        return recorded, f"comments of {source or 'the profile'} (recorded in the manifest)"
    if not source:
        return {}, "the manifest names no profile file"
    path = Path(source)
    if not path.is_file():
        return {}, f"profile file {source} is not on this machine"
    try:
        return yaml_comments(read_profile_text(path)), f"comments of {source}"
    except ProfileError as error:
        return {}, f"comments of {source} not read: {error}"


def split_argv(argv: list[str]) -> tuple[str, list[tuple[str, str | None]]]:
    """(program, [(flag, value or None)]): a token after a flag is its value unless it is a flag itself;
    a token that is neither is a positional argument, listed with the flag POSITIONAL."""
    if not argv:
        return "", []
    pairs: list[tuple[str, str | None]] = []
    index = 1
    while index < len(argv):
        token = argv[index]
        following = argv[index + 1] if index + 1 < len(argv) else None
        if token.startswith("-") and "=" in token:
            flag, _, value = token.partition("=")
            pairs.append((flag, value))
        elif token.startswith("-") and following is not None and (
                not following.startswith("-") or _NUMBER.match(following)):
            pairs.append((token, following))
            index += 1
        elif token.startswith("-"):
            pairs.append((token, None))
        else:
            pairs.append((POSITIONAL, token))
        index += 1
    return argv[0], pairs


def _leaves(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key in sorted(node):
            yield from _leaves(node[key], f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, node


def launch_flags(run: RunData) -> list[Flag]:
    """Each flag of the recorded launch argv with its profile key and the reason written beside it."""
    comments, _ = profile_comments(run)
    profile = run.profile
    leaves = [(path, value) for section in ("serve", "engine")
              for path, value in _leaves(profile.get(section) or {}, section)]
    extra = set((profile.get("serve") or {}).get("extra_args") or [])
    adapter = run.adapter
    _, pairs = split_argv(list(run.server.argv) if run.server else [])
    flags = []
    for flag, value in pairs:
        if flag == POSITIONAL:
            flags.append(Flag(flag, value, None, None))
            continue
        from_table = adapter.profile_field_of(flag) if adapter is not None else None
        key = "serve.extra_args" if flag in extra else from_table or _key_for(flag, value, leaves)
        flags.append(Flag(flag, value, key, comments.get(key) if key else None))
    return flags


def _key_for(flag: str, value: str | None, leaves: list[tuple[str, Any]]) -> str | None:
    name = flag.lstrip("-").replace("-", "_")
    for path, _ in leaves:
        parts = path.split(".")
        if any("_".join(parts[i:]) == name for i in range(1, len(parts))):
            return path
    if value is None:
        return None
    matches = [path for path, leaf in leaves
               if leaf is not None and not isinstance(leaf, (dict, list)) and _same(leaf, value)]
    return matches[0] if len(matches) == 1 else None


def _same(leaf: Any, value: str) -> bool:
    if isinstance(leaf, bool):
        return False
    return str(leaf) == value


def artifact_fetched(run: RunData) -> list[tuple[str, str]]:
    """How the artifact reached the machine, seed 000 §1.4's two figures: the download's rate (artifact.json, the
    verify step's downloads; the report's "12.4 MB/s, 20 GiB about 29 minutes") and the file system it was loaded
    from (probe.json, the setup step's mount of the artifact's folder; the report's local disk 18.2 s against NFS
    52-59 s), beside the load time the engine printed and the server's time to ready, which mean little without
    it. A row only where the run recorded it."""
    rows = []
    downloads = run.artifact.downloads if run.artifact else []
    if downloads:
        received = sum(int(each.get("bytes_received") or 0) for each in downloads)
        seconds = sum(float(each.get("seconds") or 0) for each in downloads)
        resumed = sum(int(each.get("resumed_from_bytes") or 0) for each in downloads)
        minutes, rest = divmod(seconds, 60)
        took = f"{int(minutes)} min {rest:.0f} s" if minutes else f"{rest:.1f} s"
        rate = f"{received / seconds / 1e6:.1f} MB/s" if seconds > 0 else "rate not recorded"
        rows.append(("artifact download (this run)", f"{rate}: {number(received)} bytes in {took}"
                     + (f", resumed after {number(resumed)} bytes already on disk" if resumed else "")))
    disk = run.probe.facts.disk if run.probe else None
    if disk is not None and disk.fstype is not None:
        load = run.ledger.get("weights_load_s")
        ready = run.server.ready_s if run.server and not run.server.external else None
        loaded = "".join([f"; weights loaded in {number(load)} s (the engine's figure)" if load is not None else "",
                          f"{',' if load is not None else ';'} ready {number(ready)} s after start"
                          if ready is not None else ""])
        rows.append(("artifact folder's file system", f"{file_system(disk)}: the engine loads the weights from it"
                     + loaded))
    return rows
