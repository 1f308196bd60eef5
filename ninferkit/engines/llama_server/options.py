"""The `serve` section of a llama-server profile."""

from __future__ import annotations

from pydantic import Field

from ninferkit.params.serve import ServeSection


class Serve(ServeSection):
    threads: int | None = Field(None, ge=1, le=1024, description="-t: CPU threads for generation")
