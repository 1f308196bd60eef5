"""The `serve` section of a vLLM profile."""

from __future__ import annotations

from pydantic import Field

from ninferkit.params.serve import ServeSection


class Serve(ServeSection):
    """vLLM sizes its KV pool itself, so `max_concurrency` is what the runbook plans with (capacity cells); the
    scheduler's own cap on sequences in one batch is `max_num_seqs`, left at vLLM's default unless set."""

    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="fraction of total GPU memory")
    weights_dtype: str | None = Field(None, description="--dtype: compute dtype of the weights, e.g. float16")
    swap_space_gib: float | None = Field(None, ge=0, le=4096, description="CPU swap space per GPU")
    tensor_parallel: int = Field(1, ge=1, le=8, description="GPUs one model is split over (serve.gpu_devices)")
    max_num_seqs: int | None = Field(None, ge=1, le=65_536, description="--max-num-seqs: sequences in one batch; "
                                     "null: vLLM's default (it depends on the version and the GPU)")
    trust_remote_code: bool = Field(False, description="--trust-remote-code: run the checkpoint's own model code")

    def tensor_parallel_size(self) -> int:
        return self.tensor_parallel
