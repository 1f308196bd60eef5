"""The whole engine: what `engines.get_adapter(kind)` returns and each engine's adapter extends.

Everything engine-specific (flags, log formats, error strings, where server-side timings live) sits in
one adapter per engine, and the adapter is five parts, each named for the job its callers need:
`Launcher` (launcher.py), `LogReader` (log_reader.py), `ApiDialect` (api_dialect.py), `CapacityRules`
(capacity_rules.py) and `SetupRules` (setup_rules.py). A function takes the part it uses, so its
signature says what of an engine it depends on; only code that hands the engine on to several parts
takes an EngineAdapter.
"""

from __future__ import annotations

from typing import TypeVar

from ninferkit.engines.api_dialect import ApiDialect
from ninferkit.engines.capacity_rules import CapacityRules
from ninferkit.engines.launcher import Launcher
from ninferkit.engines.log_reader import LogReader
from ninferkit.engines.setup_rules import SetupRules
from ninferkit.errors import ProfileError
from ninferkit.params.profile import Profile
from ninferkit.params.serve import ServeSection

OUT_OF_MEMORY_AT_FIRST_USE = "out_of_memory_at_first_use"
"""The diagnosis code of a server that allocated all its buffers, then ran out of memory at warm-up or its
first request: the capacity search counts it as a pool that does not fit."""


class EngineAdapter(Launcher, LogReader, ApiDialect, CapacityRules, SetupRules):
    """Every part of one engine; an adapter sets `kind`, `default_binary`, `capacity_pool` and its
    tables, and implements `binary` and `argv`."""


S = TypeVar("S", bound=ServeSection)


def serve_of(profile: Profile, section: type[S]) -> S:
    """The profile's serve section as its engine's class (a profile's engine.kind picks that class, so a
    mismatch is a profile of another engine handed to this adapter)."""
    if not isinstance(profile.serve, section):
        raise ProfileError(f"profile {profile.name} is not a profile of this engine (engine.kind "
                           f"{profile.engine.kind})")
    return profile.serve
