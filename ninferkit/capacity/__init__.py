"""Capacity: the server's memory formula from its own logs, the largest KV pool, and what-if tables.

    runtime(C, S, K) = F(C, S) + b x K        starts iff runtime <= free memory after weights A,
                                             serves iff runtime + U <= A (U: taken at first use)

The engine adapter gives b from the model (`kv_layout`, engines/<kind>/kv_layout.py) and its pool rule
(engines/pool.py); `observations` turns ledgers and refusals into intervals,
`fit` finds every (F, b) consistent with them, `table` answers "C x S: fits or short by X GiB",
`search` finds the largest pool with few launches, `gather` makes the record of them (the
04_capacity_fit step, ninferkit/steps/capacity.py, launches and writes it).
"""

from ninferkit.capacity.fit import CapacityFit, FamilyFit, Priors, fit
from ninferkit.capacity.gather import (
    fit_logs,
    fit_observations,
    observations_frame,
    search_launches_frame,
    searches_frame,
    table_frame,
    terms_frame,
)
from ninferkit.capacity.interval import Interval
from ninferkit.capacity.observations import Observation, Setting, from_ledger, from_log, from_refusal

__all__ = [
    "CapacityFit",
    "FamilyFit",
    "Interval",
    "Observation",
    "Priors",
    "Setting",
    "fit",
    "fit_logs",
    "fit_observations",
    "from_ledger",
    "from_log",
    "from_refusal",
    "observations_frame",
    "search_launches_frame",
    "searches_frame",
    "table_frame",
    "terms_frame",
]
