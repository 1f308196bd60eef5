"""Profiles: the typed YAML description of one deployment, its overrides and its stable hash."""

from ninferkit.params.load import LoadedProfile, apply_override, load_profile, profile_hash, validate_profile
from ninferkit.params.profile import Profile

__all__ = ["LoadedProfile", "Profile", "apply_override", "load_profile", "profile_hash", "validate_profile"]
