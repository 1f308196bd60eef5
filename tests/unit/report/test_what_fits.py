"""One answer per question in the write-up's What-fits table (issue 38 item 4): where a search found less than the
fit's memory figure, the table's largest pool is the search's, with memory's beside it, and the engine's cap is
called a cap.

The data is the published H200 llama-server run's capacity.json (docs/examples/h200-llamacpp, recorded on the
GPU): its search at q8_0 and 1 slot answered 1,048,576 tokens, the model's trained context where llama-server caps
a slot, while the fit says memory allows 1,692,672.
"""

from __future__ import annotations

import json

from ninferkit.report.views import what_fits
from ninferkit.rundir.records import CapacityRecord
from tests.conftest import REPO

RECORDED = REPO / "docs" / "examples" / "h200-llamacpp" / "capacity.json"


def _rows(record: CapacityRecord) -> dict[tuple[str, str], str]:
    table = what_fits(record.decision_table, record.searches)
    return {(row[0], row[1]): row[2] for row in table.rows}


def test_the_searched_pool_is_the_answer_with_memorys_beside_it() -> None:
    record = CapacityRecord.model_validate(json.loads(RECORDED.read_text()))
    rows = _rows(record)
    # written before searches said what bounded them (bounded_by): the search's answer, memory's beside it
    assert rows[("q8_0", "1")] == "1,048,576, the search's answer (memory would allow 1,692,672)"
    assert rows[("q4_0", "1")] == "1,048,576, the search's answer (memory would allow 3,032,320)"
    assert rows[("q8_0", "8")] == "1,710,080"  # the search and the fit agree: one figure
    # as the search records it today (capacity/search.py sets bounded_by "engine" at the trained context)
    for found in record.searches:
        if found.answer_kv_tokens == 1_048_576:
            found.bounded_by = "engine"
    assert _rows(record)[("q8_0", "1")] == "1,048,576, the engine's cap (memory would allow 1,692,672)"
