"""Exact bounds of linear functions over the few-variable sets that memory observations cut out.

The fit has 3 or 4 unknowns (fixed part at a reference point, per-slot and per-context-token terms,
and bytes/token when the architecture is unknown) and a handful of two-sided constraints, so the
vertices can be enumerated exactly with rationals: no solver tolerance blurs a byte count. A large
box closes the set; a bound that moves when the box grows is reported as unbounded (None), which is
how the fit says "the data does not pin this term down".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from ninferkit.capacity.interval import Interval

Vector = tuple[Fraction, ...]


@dataclass(frozen=True)
class Constraint:
    """low <= coefficients . x <= high (either side may be None)."""

    coefficients: Vector
    low: Fraction | None
    high: Fraction | None


def _solve(rows: Sequence[Vector], rhs: Sequence[Fraction]) -> Vector | None:
    """Gaussian elimination over rationals; None when the rows are not independent."""
    n = len(rows)
    m = [list(row) + [value] for row, value in zip(rows, rhs, strict=True)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if m[r][col] != 0), None)
        if pivot is None:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col and m[r][col] != 0:
                factor = m[r][col] / m[col][col]
                m[r] = [a - factor * b for a, b in zip(m[r], m[col], strict=True)]
    return tuple(m[i][n] / m[i][i] for i in range(n))


def _halfspaces(constraints: Sequence[Constraint], box: Sequence[Fraction]) -> list[tuple[Vector, Fraction]]:
    """a . x <= c rows, with the box -B_j <= x_j <= B_j added."""
    rows: list[tuple[Vector, Fraction]] = []
    for con in constraints:
        if con.high is not None:
            rows.append((con.coefficients, con.high))
        if con.low is not None:
            rows.append((tuple(-a for a in con.coefficients), -con.low))
    n = len(box)
    for j, bound in enumerate(box):
        unit = tuple(Fraction(1 if k == j else 0) for k in range(n))
        rows.append((unit, bound))
        rows.append((tuple(-u for u in unit), bound))
    return list(dict.fromkeys(rows))


def vertices(constraints: Sequence[Constraint], box: Sequence[Fraction]) -> list[Vector]:
    """Every vertex of {x : constraints, |x_j| <= box_j}; empty when the constraints contradict."""
    rows = _halfspaces(constraints, box)
    n = len(box)
    found: dict[Vector, None] = {}
    for subset in itertools.combinations(rows, n):
        point = _solve([a for a, _ in subset], [c for _, c in subset])
        if point is None or point in found:
            continue
        if all(sum(a * x for a, x in zip(normal, point, strict=True)) <= c for normal, c in rows):
            found[point] = None
    return list(found)


@dataclass(frozen=True)
class Polytope:
    """The parameter vectors consistent with every observation, as vertices under two box sizes."""

    small: list[Vector]
    large: list[Vector]
    constraints: tuple[Constraint, ...] = ()
    """What cut it out (so another source's rows can be added: capacity/known.py)."""

    @classmethod
    def build(cls, constraints: Sequence[Constraint], box: Sequence[Fraction]) -> Polytope:
        return cls(vertices(constraints, box), vertices(constraints, [b * 4 for b in box]), tuple(constraints))

    @property
    def feasible(self) -> bool:
        return bool(self.small)

    def bounds(self, weights: Sequence[Fraction | int], offset: Fraction | int = 0) -> Interval:
        """[min, max] of weights . x + offset; a side is None when the data leaves it unbounded."""
        def value(point: Vector) -> Fraction:
            return sum((Fraction(w) * x for w, x in zip(weights, point, strict=True)), Fraction(offset))

        return self.extremes(value)

    def extremes(self, fn: Callable[[Vector], Fraction]) -> Interval:
        """[min, max] of fn over the vertices; a side is None when it moves as the box grows.

        Exact for linear fn; for a ratio of linear functions with a positive denominator (the
        largest pool that fits), the extremes also lie at vertices.
        """
        if not self.small:
            raise ValueError("no parameter values satisfy every observation")
        small = [fn(p) for p in self.small]
        large = [fn(p) for p in self.large]
        low = min(small) if min(small) == min(large) else None
        high = max(small) if max(small) == max(large) else None
        return Interval(low, high)

    def each(self) -> list[Vector]:
        """The vertices (of the small box), for quantities that are not linear in the parameters."""
        return self.small

    def unbounded(self) -> bool:
        return self.small != self.large
