"""capacity.json fitted again from what it was fitted from, by this ninferkit.

capacity.json is derived: its observations are the launches' logs read into numbers, its answer and decision
table a fit of them. A run published by an older ninferkit kept that version's fit (the vLLM example's table
said "borderline | ?" at every row where today's fit says it fits with 137 GiB to spare: issue 38), and
`ninferkit report` rendered it as it was. `refit` reads every recorded observation again from its log where the
run folder still holds it (a moved folder too), keeps the searches' launches as the facts they are, and fits
them with the run's recorded profile: the same function the capacity step calls (gather.capacity_record).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ninferkit.capacity.gather import capacity_record
from ninferkit.capacity.launches import reread
from ninferkit.capacity.observations import Observation
from ninferkit.capacity.search import SearchResult
from ninferkit.engines import get_adapter
from ninferkit.errors import ProfileError
from ninferkit.params.profile import Profile
from ninferkit.rundir.runs import RunDir

KEPT = ("created", "python", "platform", "profile_hash", "serving_id")
"""Fields of the recorded file a re-fit keeps: when and where the capacity step ran, and what it ran for."""


def refit(profile: Profile, run_dir: RunDir, recorded: Mapping[str, Any]) -> dict[str, Any]:
    """capacity.json's fields fitted again from its own observations and searches (each observation re-read from
    its log where the log is there), with the recorded file's own `KEPT` fields. Raises CannotRefit where the
    recorded fit read the model's KV layout from a file this machine lacks (a GGUF in the H200's cache, vLLM's
    config.json at capacity.vllm_config): a fit without it is a worse fit of the same data, not a newer one."""
    kind = profile.engine.kind
    rule = get_adapter(kind).capacity_pool
    observations = [reread(run_dir, kind, Observation.from_dict(row), rule)
                    for row in recorded.get("observations") or [] if isinstance(row, dict)]
    searches = [SearchResult.from_dict(row) for row in recorded.get("searches") or [] if isinstance(row, dict)]
    try:
        fields = capacity_record(profile, observations, searches).model_dump(mode="json", exclude_unset=True)
    except ProfileError as exc:  # a file the recorded profile names is not here (vLLM's config.json on the GPU box)
        raise CannotRefit(f"the fit reads what this machine lacks: {exc}") from exc
    was, now = str(recorded.get("bytes_per_token_source") or ""), str(fields.get("bytes_per_token_source") or "")
    if was.startswith("architecture") and not now.startswith("architecture"):
        raise CannotRefit("the model file its KV layout was read from is not on this machine (the fit without it "
                          f"would take bytes per token from {now or 'nothing'})")
    fields.update({name: recorded[name] for name in KEPT if name in recorded})
    return fields


class CannotRefit(Exception):
    """The fit cannot be made again here as it was made (what it read is not here); the recorded one stands."""
