"""Terms typed from a report or a datasheet (`capacity.known`), as the fit's own intervals, and their formula.

A report gives its formula in figures ("2.75 GiB fixed + 35,904 B per KV token", seed 000 §2.5); each is as
exact as its printed digits. The typed formula is a family fit of its own (fixed part the same at every slot
count and context, as such a formula states it), so the table, the largest pool and `auto` are computed
from it by the same code as from the logs. With logs as well, the two are fitted together where they agree;
where they do not (a typed fixed part outside what the logs pin, a typed free memory outside what they saw),
each is answered on its own and the conflict is named: which one is right is not for the fit to pick.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from ninferkit.capacity.fit import BOX, FamilyFit
from ninferkit.capacity.interval import Interval
from ninferkit.capacity.polytope import Constraint, Polytope, Vector
from ninferkit.engines.pool import PoolRule
from ninferkit.errors import ProfileError
from ninferkit.params.capacity import CapacitySection, Quantity, parse_quantity
from ninferkit.units import GIB


def typed(value: Quantity | None) -> Interval | None:
    """A typed figure as the interval its printed digits allow (None: not typed)."""
    if value is None:
        return None
    low, high = parse_quantity(value)
    return Interval(low, high)


@dataclass(frozen=True)
class KnownTerms:
    """capacity.known as intervals: what the typed figures pin, each to its printed digits."""

    source: str
    fixed: Interval | None
    bytes_per_token: Interval | None
    free_after_weights: Interval | None
    weights: Interval | None
    page_tokens: int | None
    text: dict[str, Any]
    """The figures as typed, for the record."""

    def as_printed(self) -> KnownTerms:
        """Every typed figure taken at its printed value, exactly: the arithmetic the report itself did."""
        def center(value: Interval | None) -> Interval | None:
            if value is None or value.low is None or value.high is None:
                return value
            return Interval.exact((value.low + value.high) / 2)

        return replace(self, fixed=center(self.fixed), bytes_per_token=center(self.bytes_per_token),
                       free_after_weights=center(self.free_after_weights), weights=center(self.weights))

    def describe(self) -> list[str]:
        """One line per typed term: as typed, and the interval it stands for."""
        names = {"fixed": "fixed part F", "bytes_per_token": "bytes per pool token b",
                 "free_after_weights": "free after weights A", "weights": "weights"}
        lines = []
        for key, what in names.items():
            value: Interval | None = getattr(self, key)
            if value is None:
                continue
            exact = value.width == 0
            lines.append(f"{what}: {self.text[key]} = {_span(value)}"
                         + (" (exact)" if exact else " (as exact as its printed digits)") + f"; {self.source}")
        if self.page_tokens is not None:
            lines.append(f"page: {self.page_tokens} tokens; {self.source}")
        return lines


def _span(value: Interval) -> str:
    low, high = value.as_bytes()
    if low == high:
        return f"{low:,} B"
    return f"[{low:,}, {high:,}] B ([{float(value.low or 0) / GIB:.4f}, {float(value.high or 0) / GIB:.4f}] GiB)"


def known_terms(section: CapacitySection, rule: PoolRule, engine: str) -> KnownTerms | None:
    """The profile's typed terms (None: none typed); a page size other than the engine's is refused."""
    known = section.known
    if known is None:
        return None
    if known.page_tokens is not None and known.page_tokens != rule.page_tokens:
        raise ProfileError(f"capacity.known.page_tokens: {known.page_tokens}: {engine} pages hold "
                           f"{rule.page_tokens} tokens (allowed: {rule.page_tokens}, or leave it unset)")
    text = known.model_dump(exclude_none=True)
    return KnownTerms(known.source, typed(known.fixed), typed(known.bytes_per_token), typed(known.free_after_weights),
                      typed(known.weights), known.page_tokens, text)


def typed_constraints(known: KnownTerms, size: int) -> list[Constraint]:
    """The typed formula as rows of a family's polytope: F_ref within the typed fixed part, no per-slot or
    per-context term (the typed formula has none), b within the typed bytes per token when b is fitted."""
    def unit(index: int) -> Vector:
        return tuple(Fraction(1 if i == index else 0) for i in range(size))

    assert known.fixed is not None
    rows = [Constraint(unit(0), known.fixed.low, known.fixed.high), Constraint(unit(1), Fraction(0), Fraction(0)),
            Constraint(unit(2), Fraction(0), Fraction(0))]
    if size == 4 and known.bytes_per_token is not None:
        rows.append(Constraint(unit(3), known.bytes_per_token.low, known.bytes_per_token.high))
    return rows


def typed_family(known: KnownTerms, family: tuple[Any, ...], label: str, reference: tuple[int, int],
                 bytes_per_token: Fraction | None) -> FamilyFit:
    """The typed formula alone, as a family fit (`bytes_per_token`: b when known exactly, else the typed one)."""
    size = 3 if bytes_per_token is not None else 4
    constraints = typed_constraints(known, size)
    if size == 4 and known.bytes_per_token is None:
        constraints.append(Constraint(tuple(Fraction(1 if i == 3 else 0) for i in range(4)), Fraction(0), None))
    return FamilyFit(family, label, reference, (), Polytope.build(constraints, BOX[:size]), bytes_per_token)


def joined_family(logged: FamilyFit, known: KnownTerms, bytes_per_token: Fraction | None) -> FamilyFit:
    """The logs' fit with the typed formula's rows added (and b, where the logs fitted it but it is known
    otherwise): empty (not `consistent`) where they disagree."""
    if not logged.consistent:
        return logged
    size = 3 if logged.fixed_bytes_per_token is not None else 4
    constraints = [*logged.polytope.constraints, *typed_constraints(known, size)]
    if size == 4 and bytes_per_token is not None:
        constraints.append(Constraint(tuple(Fraction(1 if i == 3 else 0) for i in range(4)), bytes_per_token,
                                      bytes_per_token))
    return FamilyFit(logged.family, logged.label, logged.reference, logged.observations,
                     Polytope.build(constraints, BOX[:size]), logged.fixed_bytes_per_token)
