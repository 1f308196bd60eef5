"""KV bytes per token from a model's architecture: the slope of every engine's memory formula.

Only layers whose cache grows with the pool count: full-attention layers (and NInfer's MTP layer
when speculative decoding is on). Recurrent (Gated-DeltaNet, Mamba) layers hold a fixed state per
sequence and sliding-window layers a fixed window; both belong to the fixed part, not the slope.
Quantized layouts include their scales (NInfer INT8-G64: one FP16 per 64 values; ggml q8_0: one FP16
per 32-value block), which naive calculators miss. Each engine derives its layout from its own model
format (engines/<kind>/kv_layout.py); this is the shape they share, beside PoolRule.
Sources: shared/reference/capacity-model.md §1.5, §1.6, §2, §3 and ninfer-interface.md §7.1.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class KVLayout:
    """The per-token KV cost of one model at one cache type, and how it was derived."""

    bytes_per_token: int
    kv_layers: int
    detail: str
    fixed_layers: dict[str, int] = field(default_factory=dict)
    """Layers with KV-like state that does not grow per pool token (recurrent, sliding window)."""
    compute_bytes_per_token: int = 0
    """Compute-buffer bytes the engine reserves per pool token beside the cache (llama.cpp on CUDA with
    a quantized cache); the engine's KV lines do not show them, its compute-buffer line does."""

    @property
    def runtime_bytes_per_token(self) -> int:
        """The memory formula's slope b: the cache and the compute buffer's share per pool token."""
        return self.bytes_per_token + self.compute_bytes_per_token


# ---------------------------------------------------------------- NInfer Qwen3.x hybrid targets
