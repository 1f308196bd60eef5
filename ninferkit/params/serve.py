"""The `serve` section fields every engine shares; each engine's adapter adds its own.

A profile's `serve` section is validated by the class of the engine it names (`engine.kind`):
`ninferkit.engines.<kind>.options`, a subclass of `ServeSection` here. So an option of one engine
written into another engine's profile is an unknown field, with the allowed fields listed.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import Field, field_validator

from ninferkit.params.base import Section

_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def host_name_or_address(value: str) -> str:
    """`value` when it is an IP address or a host name (dot-separated labels of letters, digits and '-'); else
    ValueError. The host goes into the engine's argv and into the URL every step connects to: `127.0.0.1/x?#`
    passed a looser check and made a URL whose path and fragment the engine never served (issue 29)."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if len(value) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in value.split(".")):
        return value
    raise ValueError(f"must be a host name or an IP address (e.g. 127.0.0.1, 0.0.0.0, ::1, gpu-box.lab); got "
                     f"{value!r}")


class KVSection(Section):
    dtype: str | None = Field(None, description="engine-specific, e.g. int8, rk8v4, f16, q8_0")
    capacity: int | Literal["auto"] | None = Field(None, description="total KV tokens, or 'auto'")

    @field_validator("capacity")
    @classmethod
    def _positive(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and value < 1:
            raise ValueError("must be a positive token count or 'auto'")
        return value


class ServeSection(Section):
    host: str = "127.0.0.1"
    port: int = Field(8088, ge=1, le=65535)
    container_port: int | None = Field(None, ge=1, le=65535,
                                       description="the engine's port inside Docker (default: port)")
    model_id: str | None = Field(None, description="public model id; null: the engine's own (NInfer: the "
                                                   "artifact's identity), read from /v1/models at launch")
    max_context: int = Field(4096, ge=256, le=16_777_216, description="tokens per request (per slot)")
    max_concurrency: int = Field(1, ge=1, le=64)
    kv: KVSection = KVSection()
    prefill_chunk: int | None = Field(None, ge=1, le=1_048_576)
    api_key_env: str | None = Field(None, description="name of the environment variable holding the key")
    docker: bool = False
    docker_env: dict[str, str] = Field(default_factory=dict, description="settings passed into the container "
                                       "(-e NAME=value); never a key: api_key_env passes that by name")
    gpu_devices: list[int] | None = None
    extra_args: list[str] = Field(default_factory=list)
    startup_timeout_s: float = Field(300.0, gt=0, le=86_400)

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return host_name_or_address(value)

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError("must be an environment variable NAME (e.g. NINFER_API_KEY), never the key")
        return value

    @field_validator("docker_env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [name for name in value if not _ENV_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"keys are environment variable names (e.g. NVIDIA_VISIBLE_DEVICES); got {bad}")
        return value

    def tensor_parallel_size(self) -> int:
        """GPUs one copy of the model is split over (engines that can split it override this)."""
        return 1

    def speculation(self) -> tuple[str | None, int | None]:
        """(method, draft tokens) of speculative decoding: part of what a memory formula depends on."""
        return None, None
