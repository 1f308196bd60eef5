"""Which rows of requests.jsonl a run counts, and how many it leaves out, and why.

requests.jsonl is appended to by the sweeps step and by nobody else, but it is a plain file: a row pasted in
from another run, one from another profile of this run, or a line written twice (a copy, a torn write
repaired by hand) was counted like a measurement (a 21st request in a cell of 20, a range up to 99,999 tok/s
from a foreign row, a request counted twice; issue 29). A row counts once, by its `request_uid`, when it
names this run (`run_id`) and a profile hash this run has had, and belongs to the attempt its cell's last ledger
entry names. Rows left out are counted by reason, so the write-up says how many and why, never silently.
A row that does not say (an older row without `request_uid`, an imported one without a profile hash) is
not left out for what it does not say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass

from ninferkit.rundir.records import CellEntry, RequestRow


@dataclass(frozen=True)
class Counted:
    """The rows a run's tables count, and how many of the others were left out for each reason."""

    rows: list[RequestRow]
    other_run: int = 0
    """Rows naming another run_id."""
    other_profile: int = 0
    """Rows naming another profile hash."""
    duplicates: int = 0
    """Second and later copies of a request_uid."""
    superseded: int = 0
    """Rows of an attempt a later rerun of their cell replaced (or of a cell with no ledger entry)."""

    def foreign_note(self) -> str | None:
        """The write-up's caveat for rows that are not this run's measurements (None when there are none)."""
        parts = [f"{count} {what}" for count, what in (
            (self.other_run, "name another run (run_id)"),
            (self.other_profile, "name another profile hash"),
            (self.duplicates, "repeat a request_uid already counted")) if count]
        if not parts:
            return None
        return (f"Rows of requests.jsonl left out: {'; '.join(parts)}. They are not this run's measurements (a "
                "line copied in from elsewhere or written twice); no number here counts them.")


def count_rows(rows: Iterable[RequestRow], outcomes: Mapping[str, CellEntry], run_id: str | None,
               profile_hashes: Set[str]) -> Counted:
    """The rows to count. `outcomes`: cell_id -> last ledger entry (empty: no ledger, every attempt counts);
    `run_id`: this run's (None: not checked); `profile_hashes`: every hash this run's profile has had (a
    rerun with a changed profile keeps its earlier rows; the ledger says which attempt counts); empty: not
    checked."""
    attempts = {(cell_id, entry.attempt) for cell_id, entry in outcomes.items()}
    kept: list[RequestRow] = []
    seen: set[str] = set()
    other_run = other_profile = duplicates = superseded = 0
    for row in rows:
        if run_id is not None and row.run_id is not None and row.run_id != run_id:
            other_run += 1
        elif profile_hashes and row.profile_hash is not None and row.profile_hash not in profile_hashes:
            other_profile += 1
        elif row.request_uid is not None and row.request_uid in seen:
            duplicates += 1
        elif attempts and (row.cell_id, row.attempt) not in attempts:
            superseded += 1
        else:
            if row.request_uid is not None:
                seen.add(row.request_uid)
            kept.append(row)
    return Counted(kept, other_run, other_profile, duplicates, superseded)
