"""A Slurm `--constraint` read as Slurm reads it, to say which nodes of a partition can run a fleet task before
anything is submitted: checking feature names alone passed `a100&ib` where one node had a100 and another ib, and
sbatch then refused it only once an earlier array was queued.

Slurm 22.05's reading, as its sbatch man page gives it and as the test cluster answered (tests/live/test_fleet.py;
each form below was submitted to a real slurmctld with `-w` naming one node, and Slurm refused or ran it):
- `&` (and `,`, which Slurm rewrites to `&`) is AND, `|` is OR, and they are applied left to right with no
  precedence: `ib|fast&big` is `(ib|fast)&big` (refused on a node with ib and fast but not big);
- parentheses group (`fast|(big&fast)`);
- `[a|b]`, matching OR, makes every node of the job take the same alternative: on the one node of a fleet task it
  is `a|b`;
- `name*N` counts nodes: the job needs N nodes with it (`fast*2` is refused where one node has fast), and
  `[a*1&b*1]` (multiple counts) gives the job one node of each, two in all. A fleet task runs on one node, so a
  count is not evaluated per node: only that enough nodes of the partition match each counted term (a count no
  partition can meet is refused; one it can is Slurm's to place, and said);
- inside brackets an AND must carry counts (`[fast&big]` is refused by sbatch), and a trailing operator is ignored
  (`fast&` is `fast`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME = re.compile(r"[A-Za-z0-9_.-]+")
"""A feature name as a fleet file may write it (spec.Host.constraint)."""


class ConstraintSyntax(ValueError):
    """A constraint Slurm would refuse as written; the message says where and why."""


@dataclass(frozen=True)
class Term:
    """A feature, or a parenthesised group, with its node count (0: none asked)."""

    name: str | None
    group: Expression | None
    count: int


@dataclass(frozen=True)
class Expression:
    """Terms joined by operators, applied left to right (`ops[i]` joins `terms[i]` and `terms[i + 1]`);
    `bracket`: a matching-OR or multiple-counts set."""

    terms: tuple[Term | Expression, ...]
    ops: tuple[str, ...]
    bracket: bool = False

    def names(self) -> set[str]:
        """Every feature the constraint names."""
        found: set[str] = set()
        for term in self.terms:
            if isinstance(term, Expression):
                found |= term.names()
            elif term.group is not None:
                found |= term.group.names()
            elif term.name is not None:
                found.add(term.name)
        return found

    def counted(self) -> list[tuple[str, Term]]:
        """The terms that ask for a number of nodes (`name*N`), each with its text."""
        found: list[tuple[str, Term]] = []
        for term in self.terms:
            if isinstance(term, Expression):
                found += term.counted()
            else:
                if term.count:
                    found.append((spelled(term), term))
                if term.group is not None:
                    found += term.group.counted()
        return found

    def holds(self, features: set[str]) -> bool:
        """Whether one node with `features` satisfies it (counts read as the feature alone)."""
        result = _holds(self.terms[0], features)
        for op, term in zip(self.ops, self.terms[1:], strict=True):
            value = _holds(term, features)
            result = (result and value) if op == "&" else (result or value)
        return result


def _holds(term: Term | Expression, features: set[str]) -> bool:
    if isinstance(term, Expression):
        return term.holds(features)
    if term.group is not None:
        return term.group.holds(features)
    return term.name in features


def spelled(term: Term | Expression) -> str:
    """A term as Slurm groups it: each mixed run of & and | bracketed from the left, so `ib|fast&big` reads
    `(ib|fast)&big`."""
    if isinstance(term, Expression):
        text = spelled(term.terms[0])
        for place, (op, nxt) in enumerate(zip(term.ops, term.terms[1:], strict=True)):
            if place and op != term.ops[place - 1] and not term.bracket:
                text = f"({text})"
            text += op + spelled(nxt)
        return f"[{text}]" if term.bracket else text
    inner = f"({spelled(term.group)})" if term.group is not None else str(term.name)
    return inner + (f"*{term.count}" if term.count else "")


def parse(text: str) -> Expression:
    """The constraint as Slurm reads it; ConstraintSyntax where sbatch would refuse it."""
    reader = _Reader(text.replace(",", "&"))
    expression = reader.expression(closing="")
    if reader.brackets > 1:
        raise ConstraintSyntax(f"{text}: Slurm takes one bracketed set per job, and this has {reader.brackets}")
    return expression


class _Reader:
    def __init__(self, text: str) -> None:
        self.text, self.at, self.brackets = text, 0, 0

    def fail(self, why: str) -> ConstraintSyntax:
        return ConstraintSyntax(f"{self.text}: {why} at character {self.at + 1}")

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def expression(self, closing: str, bracket: bool = False) -> Expression:
        terms: list[Term | Expression] = [self.term(bracket)]
        ops: list[str] = []
        while self.peek() in ("&", "|"):
            op = self.peek()
            self.at += 1
            if self.peek() in ("", closing) and closing != "]":  # Slurm ignores a trailing operator
                break
            ops.append(op)
            terms.append(self.term(bracket))
        if self.peek() != closing:
            raise self.fail(f"expected {closing!r}, found {self.peek()!r}" if closing else
                            f"unexpected {self.peek()!r}")
        if bracket and "&" in ops and not all(isinstance(term, Term) and term.count for term in terms):
            raise self.fail("inside brackets an AND needs a count on every term ([a*2&b*1]); sbatch refuses "
                            "it without")
        return Expression(tuple(terms), tuple(ops), bracket)

    def term(self, in_bracket: bool) -> Term | Expression:
        if self.peek() == "[":
            if in_bracket:
                raise self.fail("brackets do not nest")
            self.brackets += 1
            self.at += 1
            inner = self.expression(closing="]", bracket=True)
            self.at += 1
            return inner
        if self.peek() == "(":
            self.at += 1
            group = self.expression(closing=")")
            self.at += 1
            return Term(None, group, self.count())
        found = NAME.match(self.text, self.at)
        if found is None:
            raise self.fail("expected a feature name" + (f", found {self.peek()!r}" if self.peek() else ""))
        self.at = found.end()
        return Term(found.group(), None, self.count())

    def count(self) -> int:
        if self.peek() != "*":
            return 0
        found = re.compile(r"[0-9]+").match(self.text, self.at + 1)
        if found is None or int(found.group()) == 0:
            raise self.fail("a count after '*' is a whole number above 0")
        self.at = found.end()
        return int(found.group())

