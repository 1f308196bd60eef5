"""The servings of one run directory: which serving identity each ledger line and row belongs to.

A run serves its profile (`main`: the manifest's profile, its model as artifact.json hashed it, its server as
server.json records it) and, for the speculation A/B's task twins, the same profile with speculation off
(`spec_off`). Ledger lines and rows written since issue 37 carry their `serving_id`; older ones are mapped
through the manifest (rundir/identity.py: `entry_serving_id`). A line belongs to the current serving of its
cell when its id is that serving's, or when the fields recorded for its id (manifest `servings`) are the same
serving field by field (an id drifts when the schema gains a field).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ninferkit.errors import ProfileError
from ninferkit.params.profile import Profile
from ninferkit.params.variants import BASE
from ninferkit.rundir.identity import (
    ServingIdentity,
    entry_serving_id,
    imported,
    legacy,
    manifest_servings,
    same_serving,
    serving_identity,
    spec_off_profile,
    variant_profile,
)
from ninferkit.rundir.recorded import recorded_profile
from ninferkit.rundir.runs import RunDir, json_object

VARIANT = "variant"
"""The cell parameter naming the variant (the profile's `variants`) a cell is measured under; absent: the base."""
SPEC_OFF = "off"
"""The `speculation` parameter of a task cell measured with speculative decoding off (the A/B's other side)."""


def launch_name(cell: Mapping[str, Any] | None) -> str:
    """The launch a cell's parameters (a row's `cell`, a ledger line's) were measured under: its variant's name,
    else `base` (the profile's own serving)."""
    return str((cell or {}).get(VARIANT) or BASE)


@dataclass(frozen=True)
class RunServings:
    """The run's current servings and every one its files name."""

    main: ServingIdentity
    spec_off: ServingIdentity
    known: dict[str, ServingIdentity]
    manifest: dict[str, Any]
    variants: dict[str, ServingIdentity] = field(default_factory=dict)
    """Each variant's serving (the profile's `variants`, by name), with speculation as the variant has it."""

    def for_cell(self, cell: Mapping[str, Any] | None) -> ServingIdentity:
        """The serving a cell of these parameters is measured under now: its variant's, where it names one (a
        variant the profile no longer has is a serving of its own, which no current line matches)."""
        variant = (cell or {}).get(VARIANT)
        if variant is not None:
            return self.variants.get(str(variant)) or ServingIdentity({}, proven=False, source="legacy",
                                                                      legacy_of=f"variant-{variant}")
        return self.spec_off if (cell or {}).get("speculation") == SPEC_OFF else self.main

    def of_line(self, line: Mapping[str, Any]) -> str:
        """The (migrated) serving id of a ledger line or row."""
        return entry_serving_id(line, self.manifest, self.for_cell(line.get("cell")))

    def identity(self, serving_id: str) -> ServingIdentity | None:
        return self.known.get(serving_id)

    def is_current(self, line: Mapping[str, Any]) -> bool:
        """Whether the line was measured under the serving its cell has now."""
        found, now = self.of_line(line), self.for_cell(line.get("cell"))
        if found == now.id:
            return True
        recorded = self.known.get(found)
        return recorded is not None and same_serving(recorded, now)[0]


def run_servings(run_dir: RunDir) -> RunServings:
    """The servings of the run as its files stand (manifest, artifact.json, server.json)."""
    manifest = json_object(run_dir.manifest)
    profile = recorded_profile(manifest)
    if manifest.get("imported_from") and not manifest.get("profile"):
        model = (manifest.get("imported_from") or {}).get("model")
        main = spec_off = imported(str(manifest.get("run_id") or run_dir.path.name),
                                   model if isinstance(model, str) else None)
    elif profile is None:  # a field of the recorded profile cannot be upgraded: its rows are one legacy serving
        main = spec_off = legacy(str(manifest.get("profile_hash") or "unknown"))
    else:
        sha, server = json_object(run_dir.artifact).get("sha256"), json_object(run_dir.server)
        main = serving_identity(profile, sha if isinstance(sha, str) else None, server)
        spec_off = serving_identity(spec_off_profile(profile), sha if isinstance(sha, str) else None, server)
    variants = {} if profile is None else variant_servings(profile, json_object(run_dir.artifact).get("sha256"),
                                                            json_object(run_dir.server))
    known = {**manifest_servings(manifest), main.id: main, spec_off.id: spec_off,
             **{identity.id: identity for identity in variants.values()}}
    return RunServings(main, spec_off, known, manifest, variants)


@dataclass(frozen=True)
class Launch:
    """One server a run launched for its cells: the profile it was launched with and its run folder (its
    server.json, its log, its copy of the engine's own request log)."""

    name: str
    """`base`, a variant's name, or `speculation-off`."""
    profile: Profile
    folder: RunDir


def launches(run_dir: RunDir, profile: Profile, servings: RunServings) -> dict[str, Launch]:
    """The launch whose server measured each serving of the run, by serving id: the base's (the run folder), the
    speculation A/B's other side (sweeps/speculation-off/) and each variant's (variants/<name>/), so a row is read
    beside the log of the server that answered it. A serving no current launch has (an older profile's) is left
    out: its rows are the run folder's."""
    found = {servings.spec_off.id: Launch("speculation-off", spec_off_profile(profile),
                                          RunDir(run_dir.speculation_off))}
    for variant in profile.variants:
        if variant.name in servings.variants:
            found[servings.variants[variant.name].id] = Launch(variant.name, variant_profile(profile, variant),
                                                               run_dir.variant(variant.name))
    found[servings.main.id] = Launch(BASE, profile, run_dir)  # last: a profile without speculation has one serving
    return found


def variant_servings(profile: Profile, sha256: object, server: Mapping[str, Any]) -> dict[str, ServingIdentity]:
    """Each variant's serving identity, by name: the variant's profile on the run's artifact and engine binary
    (server.json of the base launch: every variant runs the same binary), so it is known before its launch. A
    variant that no longer makes a valid profile has none (preflight refuses it before any launch)."""
    found: dict[str, ServingIdentity] = {}
    for variant in profile.variants:
        try:
            changed = variant_profile(profile, variant)
        except ProfileError:
            continue
        found[variant.name] = serving_identity(changed, sha256 if isinstance(sha256, str) else None, server)
    return found
