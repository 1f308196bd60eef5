"""A run's recorded profile, read by today's schema: the one way every reader of a run's manifest gets its profile.

The manifest (a raw file, never rewritten) records the profile as the ninferkit that made the run had it. The join,
the tables, the capacity refit, the serving identity, a notebook reopening the run and the write-up all read that
profile through `read_recorded`: fields removed or renamed since are upgraded by the schema's history
(params/history.py), and what was upgraded is said (derived.json and the post's provenance name the ninferkit that
recorded the profile and each field read anew). A field no rule can upgrade is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ninferkit.errors import ProfileError
from ninferkit.params.history import Upgraded, upgrade
from ninferkit.params.profile import Profile

UNRECORDED_MAKER = "an unrecorded ninferkit"


@dataclass(frozen=True)
class RecordedProfile:
    """The manifest's profile as today's schema reads it, with who recorded it and what was upgraded."""

    profile: Profile
    recorded_by: str
    """`ninferkit 0.1.0 @1af22a9`, or what the upgraded fields tell of an unrecorded one."""
    upgraded: Upgraded

    def line(self) -> str:
        """`profile read as recorded by ninferkit X, fields upgraded: ...` (the post's and derived.json's)."""
        return f"profile read as recorded by {self.recorded_by}, fields upgraded: {self.upgraded.summary()}"

    def as_record(self) -> dict[str, Any]:
        """For derived.json: the maker and each field read anew."""
        return {"recorded_by": self.recorded_by, "upgraded": [each.line() for each in self.upgraded.read]}


def read_recorded(manifest: Mapping[str, Any]) -> RecordedProfile:
    """The profile `manifest` (manifest.json's object) records, upgraded to today's schema. Raises ProfileError
    naming a field no rule upgrades, or when the manifest records no profile."""
    recorded = manifest.get("profile")
    if not isinstance(recorded, Mapping) or not recorded:
        raise ProfileError("the run's manifest records no profile")
    where = f"the run's profile ({manifest.get('profile_name') or 'unnamed'}, manifest.json)"
    upgraded = upgrade(recorded, where)
    return RecordedProfile(upgraded.profile, recorded_by(manifest, upgraded), upgraded)


def recorded_profile(manifest: Mapping[str, Any]) -> Profile | None:
    """`read_recorded`'s profile; None where the manifest records none or a field cannot be upgraded (a reader
    that must say why calls read_recorded)."""
    try:
        return read_recorded(manifest).profile
    except ProfileError:
        return None


def recorded_by(manifest: Mapping[str, Any], upgraded: Upgraded | None = None) -> str:
    """The ninferkit that recorded the manifest: its version and commit as recorded; where neither was (runs from
    before ninferkit recorded them), the oldest removal among the fields upgraded bounds its age."""
    packages = manifest.get("packages")
    version = packages.get("ninferkit") if isinstance(packages, Mapping) else None
    git = manifest.get("git")
    commit = str(git.get("commit") or "")[:7] if isinstance(git, Mapping) else ""
    dirty = " (uncommitted changes)" if isinstance(git, Mapping) and git.get("dirty") else ""
    if version or commit:
        return f"ninferkit {version or '(version not recorded)'}" + (f" @{commit}" if commit else "") + dirty
    oldest = upgraded.oldest if upgraded is not None else None
    return UNRECORDED_MAKER + (f" older than {oldest.split()[0]} (its profile has a field that commit removed)"
                               if oldest else "")
