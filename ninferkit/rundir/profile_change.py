"""One profile per run: a notebook's parameters checked against the profile the run's manifest records.

The seven notebooks of a run each have a parameters cell. Editing one of them (a port, a sweep's size) changed
the run's profile for the steps after it without a word, so the write-up's numbers came from two profiles
with only a caveat to say so. A notebook now opens its run through `checked_profile`: empty parameters mean
the run's own profile, and a value that differs from it is refused, naming each field with the run's value
and the new one, unless the notebook is told `allow_profile_change=True`; then the manifest records which
step changed what (`Manifest.profile_changes`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ninferkit.errors import ProfileError
from ninferkit.params.load import LoadedProfile, apply_override, load_profile, validate_profile
from ninferkit.rundir.recorded import read_recorded
from ninferkit.rundir.records import Manifest, ProfileChange
from ninferkit.rundir.runs import RunDir, json_object, utc_now

MAX_VALUE_CHARS = 80


def checked_profile(profile: str, run_dir: Path, overrides: Sequence[str], *, allow_change: bool,
                    base: Path) -> tuple[LoadedProfile, dict[str, list[Any]]]:
    """(the profile a notebook opening `run_dir` works under, the fields it changes).

    An empty `profile` is the run's own, as its manifest records it (the values, not the file, which may have
    been edited since or be on another machine), with `overrides` applied on top. A path (relative: `base`'s)
    is loaded with `overrides`. A profile that differs from the one the run recorded raises ProfileError
    naming each field with the run's value and the new one, unless `allow_change`; the changed fields come
    back as {key path: [the run's value, the new one]} for `record_change`. A run directory with no manifest
    yet takes whatever profile it is given."""
    manifest = RunDir(run_dir).read_manifest()
    recorded = _recorded(manifest, json_object(RunDir(run_dir).manifest), base) if manifest.profile else None
    if profile:
        given = Path(profile).expanduser()
        source = given if given.is_absolute() else base / given
        same_file = manifest.profile_source is not None and Path(manifest.profile_source).resolve() == source.resolve()
        loaded, named = load_profile(source, overrides), "overrides" if same_file else "profile"
    elif recorded is None:
        raise ProfileError(f"parameter profile: empty, which means the run's own profile, but {run_dir} records "
                           "none yet; give a profile (params/*.yaml) or run 00_setup on this run_dir first")
    else:
        loaded, named = _overridden(recorded, overrides), "overrides"
    if recorded is None:
        return loaded, {}
    changed = _differences(recorded.profile.model_dump(mode="json"), loaded.profile.model_dump(mode="json"))
    if changed and not allow_change:
        listed = "; ".join(f"{key}: the run's {_shown(old)}, the new {_shown(new)}"
                           for key, (old, new) in changed.items())
        raise ProfileError(
            f"parameter {named} would change this run's profile ({manifest.profile_name}, recorded in "
            f"{RunDir(run_dir).manifest}): {listed}. One run has one profile: leave profile empty and overrides [] "
            "to use the run's, set allow_profile_change=True to change it from this step on (the manifest records "
            "the change), or give another run_dir")
    return loaded, changed


def _recorded(manifest: Manifest, raw: dict[str, Any], base: Path) -> LoadedProfile:
    """The profile the manifest (`raw`: its JSON object) records, read by this ninferkit as the write-up reads it
    (rundir/recorded.py: a field removed since is upgraded; a default it added is no change). One with a field no
    rule upgrades is read again from its file with the overrides the manifest names."""
    source = Path(manifest.profile_source) if manifest.profile_source else None
    try:
        return LoadedProfile(read_recorded(raw).profile, source, tuple(manifest.profile_overrides),
                             dict(manifest.profile_comments or {}))
    except ProfileError as recorded_error:
        if source is None:
            raise
        try:
            return load_profile(source if source.is_absolute() else base / source, manifest.profile_overrides)
        except ProfileError as file_error:
            raise ProfileError(f"{recorded_error}\nand its profile file does not load either: {file_error}") \
                from None


def _overridden(recorded: LoadedProfile, overrides: Sequence[str]) -> LoadedProfile:
    if not overrides:
        return recorded
    data = copy.deepcopy(recorded.profile.model_dump(mode="json"))
    for item in overrides:
        apply_override(data, item)
    return LoadedProfile(validate_profile(data, where="the run's profile with overrides"), recorded.source,
                         (*recorded.overrides, *overrides), recorded.comments)


def record_change(run_dir: RunDir, step: str, changed: Mapping[str, list[Any]]) -> None:
    """Append to the manifest that `step` changed these fields (nothing when none changed)."""
    if not changed:
        return
    manifest = run_dir.read_manifest()
    entry = ProfileChange(step=step, at=utc_now(), changed=dict(changed))
    run_dir.update_manifest(profile_changes=[*(c.as_dict() for c in manifest.profile_changes), entry.as_dict()])


def change_lines(manifest: Manifest) -> list[str]:
    """Each recorded change as one line: `sweeps at <time>: serve.port 8088 -> 8090`."""
    return [f"{change.step} at {change.at}: " + ", ".join(f"{key} {_shown(old)} -> {_shown(new)}"
                                                         for key, (old, new) in change.changed.items())
            for change in manifest.profile_changes]


def _differences(recorded: Mapping[str, Any], loaded: Mapping[str, Any]) -> dict[str, list[Any]]:
    before, after = _flat(recorded), _flat(loaded)
    return {key: [before.get(key), after.get(key)] for key in sorted(before.keys() | after.keys())
            if before.get(key) != after.get(key)}


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as {key path: value}; a list or scalar is one value."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 3] + "..."
