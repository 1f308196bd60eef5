"""An engine's /metrics, read by prometheus_client's own parser (the Prometheus text exposition format).

Two hand-written line matchers read it before, telemetry's and the vLLM adapter's: each skipped any line it
did not match, so a sample it misread vanished without a word, and a label value holding ``}`` or an
escaped quote ended the match early. The parser of the library that writes vLLM's /metrics reads the whole
format (escapes, NaN and ±Inf, timestamps); a text it cannot read is one BadInput saying so, never a
partial set of numbers. The parser holds the text whole: callers read the body bounded first
(bounded.METRICS_BYTES, the client's capped get_text).
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from ninferkit.errors import BadInput


def samples(text: str, where: str = "/metrics") -> list[Sample]:
    """Every sample of the text, in its order: name, labels, value. A counter's samples are named with `_total`
    even where the text leaves it off (the parser's OpenMetrics naming)."""
    try:
        return [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    except ValueError as error:
        raise BadInput(f"{where} is not Prometheus text that prometheus_client's parser reads: {error}") from None


def sample_key(sample: Sample) -> str:
    """The sample as the exposition writes it: `name` or `name{label="value",...}` (values escaped)."""
    if not sample.labels:
        return sample.name
    labels = ",".join(f'{name}="{_escaped(value)}"' for name, value in sample.labels.items())
    return f"{sample.name}{{{labels}}}"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
