"""Sweep plans: the cells of the chosen kinds, each kind's from its profile section (sweeps/kinds/).

The plan is written to the run directory before anything is sent; a cell's id is the hash of its kind and
parameters (sweeps/cell.py), so a resume runs exactly the cells without a result. `ab` is named like a kind
(`--only ab`, `sweeps.ab`) but measures nothing: it pairs this run's cells with a baseline run's
(sweeps/__init__.py, tables.ab_table), so it plans no cell and is no module of sweeps/kinds/.

`sweeps.repeats: N` plans every cell N times, each repeat a cell of its own (`CellParams.repeat`), the whole
plan once and then again: a drift over the run (a warming GPU, a neighbour's load) falls on every cell's
repeats alike instead of on the cells planned last. A rerun after a run died runs the repeats without a result,
as it runs any such cell. The first repeat is the cell a run without repeats measures (same id), so `compare`
and the A/B pair a run with repeats with one without; a skipped cell is planned once (a repeat of a refusal
measures nothing).

A profile's `variants` (issue 39) each plan their kinds again, from the variant's profile (its sizes checked
against its own context), each cell naming its variant (`CellParams.variant`, so its own id). A speculation A/B
twin is the base's only: a variant is a launch of its own, and speculation off is a variant like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ninferkit.engines.api_dialect import ApiDialect
from ninferkit.errors import ProfileError
from ninferkit.params.profile import Profile
from ninferkit.rundir.identity import variant_profile
from ninferkit.rundir.runs import RunDir, utc_now, write_json_atomic
from ninferkit.rundir.servings import SPEC_OFF
from ninferkit.sweeps.cell import Cell, Planner, of_variant, repeated
from ninferkit.sweeps.kinds import kinds as all_kinds
from ninferkit.sweeps.kinds import names

AB = "ab"
"""The A/B pairing's name in `--only` and the profile (`sweeps.ab`), and its table's."""


def sweep_names() -> list[str]:
    """What `--only` accepts: every kind, then the A/B pairing."""
    return [*names(), AB]


def parse_only(only: str | Iterable[str] | None) -> list[str]:
    """The sweep kinds to run: all enabled ones for None, else the named ones (validated)."""
    allowed = sweep_names()
    if only is None:
        return allowed
    chosen = [s.strip() for s in (only.split(",") if isinstance(only, str) else only) if s.strip()]
    unknown = [n for n in chosen if n not in allowed]
    if unknown:
        raise ProfileError(f"only: unknown sweep kind(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return chosen


def build_plan(profile: Profile, adapter: ApiDialect, kinds: Iterable[str], explicit: bool,
               served: dict[str, Any] | None = None) -> list[Cell[Any]]:
    """The cells of the chosen kinds, in the kinds' order, `sweeps.repeats` times (see the module docstring); a
    disabled kind runs only when named explicitly. `served` is what the running server said at the adapter's
    `request_extensions_path` (None before it runs).

    Raises ProfileError before anything is sent when a size does not fit the served context.
    """
    chosen = set(kinds)
    cells = _kinds_plan(profile, adapter, lambda kind, enabled: kind in chosen and (enabled or explicit), served)
    for variant in profile.variants:
        unknown = sorted(set(variant.kinds or ()) - set(names()))
        if unknown:
            raise ProfileError(f"variant {variant.name!r}: kinds: unknown sweep kind(s) {', '.join(unknown)}; "
                               f"allowed: {', '.join(names())}")
        wanted = set(variant.kinds or ()) & chosen

        def runs(kind: str, enabled: bool, wanted: set[str] = wanted, every: bool = variant.kinds is None) -> bool:
            return kind in wanted or (every and kind in chosen and (enabled or explicit))

        own = _kinds_plan(variant_profile(profile, variant), adapter, runs, served)
        cells += [of_variant(cell, variant.name) for cell in own
                  if cell.params.as_dict().get("speculation") != SPEC_OFF]
    again = [repeated(cell, repeat) for repeat in range(1, profile.sweeps.repeats) for cell in cells if not cell.skip]
    return cells + again


def _kinds_plan(profile: Profile, adapter: ApiDialect, runs: Callable[[str, bool], bool],
                served: dict[str, Any] | None) -> list[Cell[Any]]:
    """The cells of the kinds `runs(name, enabled)` picks, in the kinds' order, as `profile`'s engine runs them."""
    planner = Planner(adapter, profile, served)
    cells: list[Cell[Any]] = []
    for kind in all_kinds():
        section = kind.section(profile.sweeps)
        if runs(kind.name, section.enabled):
            cells += kind.plan(section, planner)
    return cells


def write_plan(run_dir: RunDir, cells: list[Cell[Any]], profile_hash: str, serving_id: str) -> None:
    """The plan, written before anything runs, with the serving it is measured under."""
    write_json_atomic(run_dir.sweep_plan, {"written": utc_now(), "profile_hash": profile_hash,
                                           "serving_id": serving_id,
                                           "cells": [cell.as_dict() for cell in cells]})
