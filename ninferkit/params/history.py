"""The profile schema's history: each field an older ninferkit recorded that today's no longer has, and how it reads.

A run's manifest records its whole profile, defaults included, as the ninferkit of its day had it. When a field is
removed or renamed since, today's schema refuses that profile, and a run that only needs reading again (its join,
its tables, its capacity answer) kept an older ninferkit's derivations for good: the live NInfer captures recorded
`engine.generation: G1`, so their posts showed tables the fixes since never reached (issue 38).

Each change is one `Upgrade`: the field, the ninferkit commit that removed it, and how its recorded value reads
today (a value that said nothing is dropped; one that said something is mapped to the field that says it now, or
refused naming the field, never guessed at). `upgrade` applies every rule of the profile's engine to a recorded
profile and validates the result; `rundir/recorded.py` is the one reader of a run's recorded profile, and says
which fields it upgraded. A field removed from the schema gets its rule here (or, for one engine's field, in that
engine's options module, `RECORDED_UPGRADES`) in the commit that removes it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel

from ninferkit.errors import ProfileError
from ninferkit.params.kinds import KINDS, engine_module, has_build, serve_section
from ninferkit.params.load import validate_profile
from ninferkit.params.profile import BuildSection, Profile


class CannotUpgrade(Exception):
    """A recorded value today's schema has no field for: the reason, for the error naming the field."""


@dataclass(frozen=True)
class Upgrade:
    """One field an older ninferkit recorded that today's schema has no longer (or reads otherwise)."""

    field: str
    """Its dotted path in the recorded profile (`engine.generation`)."""
    commit: str
    """The ninferkit commit that removed or renamed it, with its date: `9dd358c (2026-12-01)`."""
    read: Callable[[dict[str, Any], Any], str | None]
    """Given the recorded profile (the field already taken out) and its value: changes the profile in place to
    say the same today and returns how it was read (None: it said nothing, its default then, and is dropped);
    raises CannotUpgrade where nothing today says it."""
    applies: Callable[[Mapping[str, Any]], bool] = lambda data: True
    """Whether the rule applies to this profile (a serve field removed from some engines' sections only)."""


@dataclass(frozen=True)
class FieldRead:
    """How one recorded field today's schema no longer has was read."""

    field: str
    value: Any
    commit: str
    how: str | None
    """None: it said nothing and was dropped."""

    def line(self) -> str:
        return f"{self.field} {_shown(self.value)} (removed at {self.commit}): {self.how or DROPPED}"


DROPPED = "said nothing (its default then); dropped"


@dataclass(frozen=True)
class Upgraded:
    """A recorded profile read by today's schema."""

    profile: Profile
    read: tuple[FieldRead, ...]
    """Each field the schema no longer has, as it was read, in the order of the rules."""

    @property
    def oldest(self) -> str | None:
        """The earliest commit among the rules applied: the profile was recorded by a ninferkit older than it."""
        return min((each.commit for each in self.read), key=lambda commit: commit.partition("(")[2], default=None)

    def summary(self) -> str:
        """One line for a reader: each field that said something and how it reads, then those dropped."""
        said = [f"{each.field} {_shown(each.value)} -> {each.how} ({each.commit.split()[0]})"
                for each in self.read if each.how]
        empty = [each.field for each in self.read if not each.how]
        dropped = (f"removed since at their empty values, dropped: {', '.join(empty)}" if len(empty) > 1 else
                   f"removed since at its empty value, dropped: {empty[0]}" if empty else "")
        return "; ".join([*said, *filter(None, [dropped])]) or "none"


def upgrade(recorded: Mapping[str, Any], where: str = "the recorded profile") -> Upgraded:
    """`recorded` (a manifest's profile) validated by today's schema after every rule of its engine is applied.
    Raises ProfileError naming the field a rule cannot upgrade, or, for a field no rule knows, each field today's
    schema refuses (the rule it lacks is then a bug: a field was removed without one)."""
    data: dict[str, Any] = copy.deepcopy(dict(recorded))
    read: list[FieldRead] = []
    for rule in rules(_kind(data)):
        parents, _, name = rule.field.rpartition(".")
        node = _node(data, parents)
        if node is None or name not in node or not rule.applies(data):
            continue
        value = node.pop(name)
        try:
            read.append(FieldRead(rule.field, value, rule.commit, rule.read(data, value)))
        except CannotUpgrade as exc:
            raise ProfileError(f"{where}: {rule.field} = {_shown(value)} cannot be read by this ninferkit: the "
                               f"field was removed at {rule.commit}, and {exc}") from None
    try:
        profile = validate_profile(data, where)
    except ProfileError as exc:
        raise ProfileError(f"{exc}\n(no upgrade rule of ninferkit/params/history.py reads these fields as today's "
                           "schema has them)") from None
    return Upgraded(profile, tuple(read))


def rules(kind: str | None) -> tuple[Upgrade, ...]:
    """The rules for a profile of engine `kind`: the engine's own (`RECORDED_UPGRADES` of its options module), then
    every engine's, so an engine reads a shared field its own way first; an engine ninferkit does not drive has
    only the shared ones (its kind is refused after)."""
    own: tuple[Upgrade, ...] = engine_module(kind, "options").RECORDED_UPGRADES if kind in KINDS else ()
    return (*own, *SHARED)


def dropped_if_empty(empty: object = None) -> Callable[[dict[str, Any], Any], str | None]:
    """A rule's reading of a field removed with nothing in its place: a recorded `empty` (its default then) said
    nothing and is dropped; any other value said something today's profile cannot say."""
    def read(data: dict[str, Any], value: Any) -> str | None:
        if value == empty or (empty is None and value in ({}, [])):
            return None
        raise CannotUpgrade(f"today's profile has no field that says {_shown(value)}")
    return read


def _kind(data: Mapping[str, Any]) -> str | None:
    engine = data.get("engine")
    kind = engine.get("kind") if isinstance(engine, Mapping) else None
    return kind if isinstance(kind, str) else None


def _node(data: dict[str, Any], dotted: str) -> dict[str, Any] | None:
    node: Any = data
    for part in filter(None, dotted.split(".")):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _not_served_by(name: str) -> Callable[[Mapping[str, Any]], bool]:
    """Whether today's serve section of the profile's engine lacks `name` (a dotted path inside `serve`)."""
    def applies(data: Mapping[str, Any]) -> bool:
        kind = _kind(data)
        if kind not in KINDS:
            return False
        model: type[BaseModel] | None = serve_section(kind)
        for part in name.split("."):
            field = model.model_fields.get(part) if model is not None else None
            if field is None:
                return True
            model = next((arg for arg in (field.annotation, *get_args(field.annotation))
                          if isinstance(arg, type) and issubclass(arg, BaseModel)), None)
        return False
    return applies


def _build_of_an_installed_engine(data: dict[str, Any], value: Any) -> str | None:
    """vLLM's launcher never read engine.build (`Launcher.reads_build_section` was False for it), so whatever an
    older ninferkit recorded there described nothing that ran."""
    return None if value == _DEFAULT_BUILD else "dropped: this engine runs as installed and never read it"


SEPARATE_SERVE = "9dd358c (2026-12-01)"
"""Each engine got its own serve section: options of the section every engine shared left the engines without them."""
SHARED_SERVE_DEFAULTS: dict[str, object] = {
    "cors": False, "gpu_memory_utilization": None, "log_stats_interval_ms": None, "max_pending_requests": None,
    "pending_timeout_ms": None, "preserve_thinking": False, "request_log_jsonl": None, "spec.draft_tokens": None,
    "spec.lm_head_draft": False, "swap_space_gib": None, "tensor_parallel": 1, "threads": None,
    "weights_dtype": None}
"""The shared serve section's defaults (at 9dd358c's parent, e782b4e) of the options some engine lost at 9dd358c."""

_DEFAULT_BUILD = BuildSection().model_dump(mode="json")

SHARED: tuple[Upgrade, ...] = (
    Upgrade("capacity.search_concurrency", "4962535 (2026-11-30)", dropped_if_empty()),
    # 4962535: the search runs at each concurrency of the grid (capacity.concurrencies); null meant serve's
    Upgrade("engine.generation", "9dd358c (2026-12-01)", dropped_if_empty()),  # NInfer's own rule reads a value
    Upgrade("engine.build", "96ed3eb (2026-12-02)", _build_of_an_installed_engine,
            lambda data: _kind(data) in KINDS and not has_build(str(_kind(data)))
            and (data.get("engine") or {}).get("build") is not None),
    *(Upgrade(f"serve.{name}", SEPARATE_SERVE, dropped_if_empty(default), _not_served_by(name))
      for name, default in SHARED_SERVE_DEFAULTS.items()),
)
