"""The folders of the machine that made a run, and what a published write-up writes in their place.

A write-up is a post someone publishes, so it names no folder of the machine that made the run: not
the run directory, the checkout, the cache, the home folder, nor where the binary or the model lay. The
records name them (server.json's argv and log, artifact.json, the manifest's profile), and the engine's
quoted log lines name them too, so every text of the document goes through `MachinePaths.shorten`, which
replaces the known folders (the longest first, so a run directory inside the checkout is the run's):

- the run directory, where it ran (server.json's log, the notebooks the manifest names) and where it is
  read now: its files relative to it, as the write-up names every run file (`logs/server.log`);
- ninferkit's cache: `$NINFERKIT_CACHE/...`, the variable ninferkit reads for that folder (default
  `~/.cache/ninferkit`), so the path names the same file on a reader's machine whichever folder the run's
  cache was (the published H200 run's was /tmp/ninferkit-cache). The cache is not recorded; ninferkit's
  own layout finds it: the model lies in its models/ folder when the profile sets no artifact.local_dir,
  and the embedded llama-server in build/NAME/bin/ when it sets no engine.binary;
- the ninferkit checkout: a profile in a folder named params is the checkout's params/ (the manifest
  records the checkout's commit, not its folder), so its files are relative to it (`params/x.yaml`);
- the folder of any other file the records name (an engine binary, a model, a request log): the bare
  file name, whose sha256 the recipe gives where the run measured one;
- the home folder under any of those: `~`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from ninferkit.report.data import RunData

CACHE = "$NINFERKIT_CACHE"
_PATH_CHAR = r"[\w.~+-]"
"""A character a file name goes on with: a folder matches only where its name ends."""


@dataclass(frozen=True)
class Folder:
    """A folder of the machine and what the write-up writes for it: `inside` before a path in it
    (ending in / or empty), `alone` for the folder itself."""

    path: str
    inside: str
    alone: str
    kind: str


@dataclass(frozen=True)
class MachinePaths:
    folders: tuple[Folder, ...]

    def shorten(self, text: str) -> str:
        """`text` with every known folder replaced (a path inside it made relative, or by placeholder)."""
        if not self.folders or "/" not in text:
            return text
        return self._pattern().sub(self._replace, text)

    def _pattern(self) -> re.Pattern[str]:
        alternatives = "|".join(re.escape(folder.path) for folder in self.folders)
        return re.compile(rf"(?<![\w.~+/-])(?P<folder>{alternatives})(?:(?P<slash>/)|(?!{_PATH_CHAR}))")

    def _replace(self, match: re.Match[str]) -> str:
        folder = next(f for f in self.folders if f.path == match["folder"])
        return folder.inside if match["slash"] else folder.alone

    def kinds_in(self, texts: Iterable[str]) -> set[str]:
        """The kinds of the folders `texts` name (what `note` explains)."""
        if not self.folders:
            return set()
        pattern = self._pattern()
        kind = {folder.path: folder.kind for folder in self.folders}
        return {kind[match["folder"]] for text in texts for match in pattern.finditer(text)}


def machine_paths(run: RunData) -> MachinePaths:
    """The folders `run`'s records name, each with its replacement, the longest first."""
    found: dict[PurePosixPath, Folder] = {}

    def add(path: PurePosixPath | None, inside: str, alone: str, kind: str) -> None:
        if path is not None and len(path.parts) > 1 and path not in found:
            found[path] = Folder(str(path), inside, alone, kind)

    name = run.dir.path.name
    for path in (PurePosixPath(run.dir.path.resolve()), PurePosixPath(run.dir.path.absolute()), *_ran_in(run)):
        add(path, "", name, "run")
    add(_cache(run), CACHE + "/", CACHE, "cache")
    add(_checkout(run), "", ".", "checkout")
    roots = list(found)
    recorded = list(_recorded_paths(run))
    for path in recorded:
        if not any(path.is_relative_to(root) for root in roots):
            add(path.parent, "", path.parent.name, "file")
    for path in [*recorded, *found]:
        add(_home(path), "~/", "~", "home")
    return MachinePaths(tuple(sorted(found.values(), key=lambda f: -len(f.path))))


def note(kinds: set[str]) -> str:
    """What the shortened paths mean: a clause for each kind of folder the write-up named."""
    clauses = [text for kind, text in (
        ("run", "a file of the run directory is relative to it"),
        ("checkout", "a file of the ninferkit checkout that made the run is relative to the checkout (params/...)"),
        ("cache", f"{CACHE} is ninferkit's cache (default ~/.cache/ninferkit)"),
        ("file", "a file outside those is its bare name (the pinned recipe gives the engine binary's and the "
                 "model's sha256)"),
        ("home", "~ is the home folder"),
    ) if kind in kinds]
    return ("shortened, so the write-up names no folder of the machine that made the run (the engine's quoted "
            "log lines too): " + "; ".join(clauses)) if clauses else "none of the machine's folders named"


def _absolute(value: Any) -> PurePosixPath | None:
    if not isinstance(value, str) or not value.startswith("/") or any(c.isspace() for c in value):
        return None
    path = PurePosixPath(value)
    return path if len(path.parts) > 2 else None


def _recorded_paths(run: RunData) -> Iterator[PurePosixPath]:
    """Every absolute file path the records name: the profile's values, the launch argv (a flag's value
    after = too), the binary, the model, the profile file and the folder the model went to."""
    values: list[Any] = [run.manifest.profile_source]
    values += list(_leaves(run.profile))
    if run.server:
        values += [run.server.binary, *(token.partition("=")[2] or token for token in run.server.argv)]
    if run.artifact:
        values += [run.artifact.path, *(binary.get("path") for binary in run.artifact.binaries)]
    if run.probe:
        values.append(run.probe.facts.disk.path)
    for value in values:
        path = _absolute(value)
        if path is not None:
            yield path


def _leaves(node: Any) -> Iterator[Any]:
    """Every value of the recorded profile that is not a mapping or a list."""
    if isinstance(node, (dict, list)):
        for value in node.values() if isinstance(node, dict) else node:
            yield from _leaves(value)
    else:
        yield node


def _ran_in(run: RunData) -> Iterator[PurePosixPath]:
    """The run directory where the run was made: server.json's log is RUN/logs/server.log, and each step's
    notebook RUN/notebooks/NN.ipynb."""
    log = _absolute(run.server.log if run.server else None)
    if log is not None and log.parts[-2:] == ("logs", "server.log"):
        yield log.parents[1]
    for step in run.manifest.steps.values():
        notebook = _absolute(getattr(step, "notebook", None))
        if notebook is not None and notebook.parent.name == "notebooks":
            yield notebook.parents[1]


def _cache(run: RunData) -> PurePosixPath | None:
    """ninferkit's cache folder, from where ninferkit put what the profile did not place itself."""
    artifact = run.profile.get("artifact") or {}
    engine = run.profile.get("engine") or {}
    if not artifact.get("local_dir"):
        for value in (run.probe.facts.disk.path if run.probe else None, run.artifact.path if run.artifact else None):
            path = _absolute(value)
            for folder in ([path, *path.parents] if path else []):
                if folder.name == "models":
                    return folder.parent
    binary = _absolute(run.server.binary or next(iter(run.server.argv), None)) if run.server else None
    if not engine.get("binary") and binary is not None and len(binary.parts) > 4 \
            and binary.parts[-4] == "build" and binary.parts[-2] == "bin":  # embedded.py: CACHE/build/NAME/bin/
        return binary.parents[3]
    return None


def _checkout(run: RunData) -> PurePosixPath | None:
    """The checkout that made the run: the folder above the profile's params/ folder."""
    profile = _absolute(run.manifest.profile_source)
    if profile is None or profile.parent.name != "params":
        return None
    return profile.parent.parent


def _home(path: PurePosixPath) -> PurePosixPath | None:
    parts = path.parts
    if len(parts) > 2 and parts[1] == "root":
        return PurePosixPath("/root")
    if len(parts) > 3 and parts[1] in ("home", "Users"):
        return PurePosixPath(*parts[:3])
    return None

