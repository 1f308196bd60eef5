"""Results in and out in the formats people already have: one module per format, behind one registry.

A module of this folder that defines `FORMAT` (a `base.Format`) is a format: `vllm_bench` (`vllm bench serve
--save-result`), `aiperf` (AIPerf 0.13's profile_export files), `guidellm` (GuideLLM 0.8.1's benchmarks JSON)
and `csv` (one flat row per request). A format that can be written has `export`; one that can be read has
`read`. The metric names map in `metrics.MAPPING`, the table docs/interop.md shows.

    >>> get_format("guidellm").name
    'guidellm'
"""

from __future__ import annotations

from ninferkit.errors import BadInput
from ninferkit.interop.base import Format
from ninferkit.registry import Registry

_FORMATS: Registry[Format] = Registry("format", BadInput)


def get_format(name: str) -> Format:
    """The format of that name; BadInput naming the formats there are for a name that is none."""
    _discover()
    return _FORMATS.get(name)


def names(*, exports: bool = False, imports: bool = False) -> list[str]:
    """The formats' names (those that can be written, or read, when asked)."""
    _discover()
    found = [_FORMATS.get(name) for name in _FORMATS.names()]
    return [f.name for f in found if (not exports or f.export is not None) and (not imports or f.read is not None)]


def _discover() -> None:
    _FORMATS.discover(__name__, "FORMAT")


__all__ = ["Format", "get_format", "names"]
