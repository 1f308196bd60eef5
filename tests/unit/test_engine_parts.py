"""An engine adapter is five parts (ninferkit/engines/base.py): every engine has every part, with each
member a part declares without a default set by the engine, and every member belongs to one part."""

from __future__ import annotations

import pytest

from ninferkit.engines import KINDS, get_adapter
from ninferkit.engines.api_dialect import ApiDialect
from ninferkit.engines.base import EngineAdapter
from ninferkit.engines.capacity_rules import CapacityRules
from ninferkit.engines.launcher import Launcher
from ninferkit.engines.log_reader import LogReader
from ninferkit.engines.part import EnginePart
from ninferkit.engines.setup_rules import SetupRules

PARTS = (Launcher, LogReader, ApiDialect, CapacityRules, SetupRules)


def members(part: type) -> set[str]:
    """What a class declares itself: methods, attributes with a value, and attributes only annotated."""
    return {name for name in {*vars(part), *vars(part).get("__annotations__", {})} if not name.startswith("__")}


def unset(part: type) -> set[str]:
    """Members a class annotates without a value: each engine must set them."""
    return {name for name in vars(part).get("__annotations__", {}) if name not in vars(part)}


@pytest.mark.parametrize("kind", KINDS)
def test_every_engine_has_every_part(kind: str) -> None:
    adapter = get_adapter(kind)
    assert adapter.kind == kind
    for part in (EnginePart, *PARTS):
        assert isinstance(adapter, part), f"{kind} is not a {part.__name__}"
        for name in unset(part):
            assert hasattr(type(adapter), name), f"{kind} does not set {part.__name__}.{name}"


def test_every_member_has_one_part() -> None:
    seen: dict[str, str] = {}
    for part in PARTS:
        for name in members(part):
            assert name not in seen, f"{name} is in both {seen[name]} and {part.__name__}"
            seen[name] = part.__name__
    assert members(EngineAdapter) == set(), "EngineAdapter only joins the parts"
    assert members(EnginePart) == {"kind"}
    assert not set(seen) & {"kind"}
