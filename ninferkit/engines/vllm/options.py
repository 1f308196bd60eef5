"""The `serve` section of a vLLM profile."""

from __future__ import annotations

from pydantic import Field

from ninferkit.params.serve import ServeSection


class Serve(ServeSection):
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="fraction of total GPU memory")
    weights_dtype: str | None = Field(None, description="--dtype: compute dtype of the weights, e.g. float16")
    swap_space_gib: float | None = Field(None, ge=0, le=4096, description="CPU swap space per GPU")
    tensor_parallel: int = Field(1, ge=1, le=8, description="GPUs one model is split over (serve.gpu_devices)")
    trust_remote_code: bool = Field(False, description="--trust-remote-code: run the checkpoint's own model code")
