"""Will `--kv-capacity auto` start? The room it has on the GPU, estimated from the setup step's facts.

`auto` refuses to start unless the memory left after the weights holds the engine's runtime minimum
(the smallest legal pool and a fixed part) plus 1 GiB of headroom (capacity-model.md §1.4); the reports
met that refusal on a V100 (seed 000 §2.5) and on a 3090 (seed 003). The fixed part is what those
reports measured, for the 27B on their GPUs only; elsewhere the estimate is a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from ninferkit.engines.ninfer.flags import POOL
from ninferkit.engines.ninfer.kv_layout import ninfer_kv_layout
from ninferkit.errors import ProfileError
from ninferkit.finding import Finding
from ninferkit.params.profile import Profile
from ninferkit.rundir.records import GpuInfo
from ninferkit.units import GIB

AUTO_ESTIMATE_SLACK = GIB // 2
"""How far free memory less the artifact may sit above what the engine itself finds after loading
the weights: +0.24 and -0.09 GiB in the two live H200 runs (probe.json's free memory less artifact.json's
size against the request log's available_after_weights_bytes), so twice the larger is "borderline"."""


@dataclass(frozen=True)
class FixedPart:
    """NInfer's runtime memory besides the KV pool, as a field report measured it on one GPU architecture."""

    fixed_bytes: int
    slots: int
    per_extra_slot_bytes: int
    source: str

    def at(self, slots: int) -> int:
        return max(0, self.fixed_bytes + (slots - self.slots) * self.per_extra_slot_bytes)


_V100_27B = FixedPart(round(2.75 * GIB), 2, round(0.37 * GIB),
                      "seed 000 §2.5, V100 with int8 KV and MTP3 at 2 slots: 2.75 GiB + pool x 35,904 B; "
                      "0.37 GiB a slot more, capacity-model.md §1.7")
_RTX3090_27B = FixedPart(round(0.553 * GIB), 1, round(0.38 * GIB),
                         "capacity-model.md §1.8, RTX 3090 with rk8v4 KV and MTP3: 0.553 GiB + 27,719 B x pool, "
                         "0.38 GiB a slot more")
NINFER_FIXED_PARTS: dict[tuple[str, str], FixedPart] = {
    (model, arch): part for model in ("qwen3.6-27b", "qwen3.8-27b")
    for arch, part in (("sm_70", _V100_27B), ("sm_86", _RTX3090_27B))
}
"""(capacity.model, GPU arch) -> the fixed part the reports measured (the 27B only)."""


@dataclass(frozen=True)
class AutoRoom:
    """What `--kv-capacity auto` has to work with on one GPU, and what it needs to start."""

    gpu: GpuInfo
    free_bytes: int
    """NVML's free memory; its total where the probe recorded no free figure."""
    artifact_bytes: int
    pool_tokens: int
    bytes_per_token: int
    fixed: FixedPart | None
    fixed_bytes: int
    headroom_bytes: int

    @property
    def available_bytes(self) -> int:
        """Free memory less the artifact: the engine's free memory after weights, estimated."""
        return self.free_bytes - self.artifact_bytes

    @property
    def kv_bytes(self) -> int:
        return self.pool_tokens * self.bytes_per_token

    @property
    def need_bytes(self) -> int:
        """The engine's runtime minimum (smallest legal pool and fixed part) plus auto's headroom."""
        return self.fixed_bytes + self.kv_bytes + self.headroom_bytes

    def describe(self) -> str:
        fixed = (f"{self.fixed_bytes / GIB:.2f} GiB fixed ({self.fixed.source})" if self.fixed is not None else
                 f"a fixed part no report measured on {self.gpu.arch}, left out, so this is the least it needs")
        free = "free" if self.gpu.memory_free_bytes else "in all (no free figure recorded)"
        return (f"GPU {self.gpu.index} ({self.gpu.name}) has {self.free_bytes / GIB:.2f} GiB {free}; less the "
                f"artifact's {self.artifact_bytes / GIB:.2f} GiB that leaves {self.available_bytes / GIB:.2f} GiB, "
                f"and auto needs the engine's runtime minimum, {self.pool_tokens:,} tokens x "
                f"{self.bytes_per_token:,} B = {self.kv_bytes / GIB:.2f} GiB of KV pool plus {fixed}, and "
                f"{self.headroom_bytes / GIB:.2f} GiB of headroom: {self.need_bytes / GIB:.2f} GiB")


def auto_room(profile: Profile, gpus: list[GpuInfo]) -> AutoRoom | None:
    """The room `--kv-capacity auto` has on the GPU the profile runs on, from the probe's facts (GPU memory)
    and the profile (artifact.size_bytes, capacity.model's KV geometry, the engine's pool rule); None when
    the profile does not ask for auto or a number is missing. Two GPUs (tensor parallel) split weights and
    pool: not modelled."""
    serve = profile.serve
    gpu = _serving_gpu(profile, gpus)
    size = profile.artifact.size_bytes
    rule = POOL
    memory = None if gpu is None else gpu.memory_free_bytes or gpu.memory_total_bytes
    if (serve.kv.capacity != "auto" or gpu is None or memory is None or size is None or rule.auto_headroom_bytes is None
            or serve.tensor_parallel_size() > 1):
        return None
    try:
        layout = ninfer_kv_layout(profile.capacity.model, serve.kv.dtype or rule.default_kv_dtype,
                                  serve.speculation()[0]) if profile.capacity.model else None
    except ProfileError:
        return None  # a KV dtype without a byte layout: the launch's own check names it
    if layout is None:
        return None  # no KV geometry (capacity.model): nothing to weigh the pool with
    part = NINFER_FIXED_PARTS.get(((profile.capacity.model or "").lower(), str(gpu.arch)))
    return AutoRoom(gpu, memory, size,
                    rule.pool_range(serve.max_concurrency, serve.max_context)[0], layout.runtime_bytes_per_token,
                    part, part.at(serve.max_concurrency) if part is not None else 0, rule.auto_headroom_bytes)


def kv_auto_findings(profile: Profile, gpus: list[GpuInfo]) -> list[Finding]:
    """`--kv-capacity auto` refuses to start unless the memory left after the weights holds the engine's
    runtime minimum plus its headroom (capacity-model.md §1.4); the reports met that refusal on a V100
    (seed 000 §2.5) and a 3090 (seed 003)."""
    room = auto_room(profile, gpus)
    if room is None:
        return []
    margin = room.available_bytes - room.need_bytes
    fix = ("set serve.kv.capacity to an explicit pool, as the reports do (a whole number of 64-token pages "
           "between max_context and max_concurrency x max_context; `ninferkit capacity search` finds the "
           "largest that starts)")
    if margin < 0:
        return [Finding("error", "kv_auto_no_room", f"--kv-capacity auto will refuse to start: {room.describe()}, "
                        f"short by {-margin / GIB:.2f} GiB", fix)]
    if margin < AUTO_ESTIMATE_SLACK:
        return [Finding("warning", "kv_auto_no_room", f"--kv-capacity auto may refuse to start: {room.describe()}, "
                        f"only {margin / GIB:.2f} GiB to spare, less than this estimate's error allows for (seed "
                        "003: auto did not start on a 24 GB 3090)", fix)]
    return []


def _serving_gpu(profile: Profile, gpus: list[GpuInfo]) -> GpuInfo | None:
    """The GPU the engine runs on: the first of serve.gpu_devices, else GPU 0."""
    index = (profile.serve.gpu_devices or [0])[0]
    return next((g for g in gpus if g.index == index), None)
