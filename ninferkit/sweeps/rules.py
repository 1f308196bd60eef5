"""Stop rules: named conditions that end a cell early, so a broken setup does not run for hours.

A rule looks at the tally of the cell so far and returns the reason to stop, or None. The cell is
then marked failed with that reason, and the sweep goes on to the next cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ninferkit.measure.client import error_summary


@dataclass
class CellTally:
    """What a cell has done so far."""

    sent: int = 0
    ok: int = 0
    errored: int = 0
    incomplete: int = 0
    last_error: str | None = None
    http_statuses: list[int] = field(default_factory=list)

    def add(self, status: str, error: str | None, http_status: int | None) -> None:
        self.sent += 1
        if status == "ok":
            self.ok += 1
        elif status == "errored":
            self.errored += 1
            self.last_error = error
        else:
            self.incomplete += 1
            self.last_error = error
        if http_status is not None:
            self.http_statuses.append(http_status)


class StopRule(Protocol):
    def check(self, tally: CellTally) -> str | None: ...


@dataclass(frozen=True)
class MaxErrors:
    """Stop a cell after `limit` failed (errored or incomplete) requests."""

    limit: int

    def check(self, tally: CellTally) -> str | None:
        failed = tally.errored + tally.incomplete
        if failed >= self.limit:
            return (f"max_errors: {failed} failed requests (limit {self.limit}); last error: "
                    f"{error_summary(tally.last_error)}")
        return None

    def __str__(self) -> str:
        return f"max_errors@{self.limit}"
