"""An engine adapter is five parts (ninferkit/engines/base.py): every engine has every part, with each
member a part declares without a default set by the engine, and every member belongs to one part."""

from __future__ import annotations

import ast

import pytest

from ninferkit.engines import get_adapter
from ninferkit.engines.api_dialect import ApiDialect
from ninferkit.engines.base import EngineAdapter
from ninferkit.engines.capacity_rules import CapacityRules
from ninferkit.engines.launcher import Launcher
from ninferkit.engines.log_reader import LogReader
from ninferkit.engines.part import EnginePart
from ninferkit.engines.setup_rules import SetupRules
from ninferkit.params.kinds import KINDS
from tests.conftest import REPO

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
    assert members(EnginePart) == {"kind", "name"}
    assert not set(seen) & {"kind", "name"}


def test_whole_engine_only_where_one_part_is_not_enough() -> None:
    """A function that takes the whole EngineAdapter uses more than one part of it, or hands it on; one
    that uses one part takes that part, so its signature says what of an engine it depends on."""
    part_of = {name: part.__name__ for part in PARTS for name in members(part)}
    narrowable = []
    for path in sorted((REPO / "ninferkit").rglob("*.py")):
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for arg in [*function.args.args, *function.args.kwonlyargs]:
                if arg.annotation is None or "EngineAdapter" not in ast.unparse(arg.annotation):
                    continue
                names = [node for node in ast.walk(function) if isinstance(node, ast.Name) and node.id == arg.arg]
                asked = [node.attr for node in ast.walk(function)
                         if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                         and node.value.id == arg.arg]
                if len(asked) < len(names):
                    continue  # handed on whole
                parts = {part_of[name] for name in asked if name in part_of}
                if len(parts) <= 1:
                    narrowable.append(f"{path.relative_to(REPO)}:{function.lineno} {function.name}({arg.arg}) "
                                      f"uses only {parts or 'its kind'}")
    assert narrowable == []
