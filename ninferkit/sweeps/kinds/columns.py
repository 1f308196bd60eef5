"""The columns of a kind's write-up table, as data: a header, the table column it reads, and its shape.

How a shape is shown (a median with its range, a percentage, the GPU's power and clock) is the write-up's
(report/views.py: SHAPES); a kind whose table needs a shape no kind has yet adds its formatter there. The
columns several kinds show are here, so a kind's view reads `columns.DECODE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Shape = Literal["param", "plain", "spread", "percent", "requests", "engine_decode", "gpu", "wait_before_prefill",
                "goodput", "kept_up", "decode", "acceptance", "hit_tokens", "answer", "slowest"]


@dataclass(frozen=True)
class ViewColumn:
    """A column of the write-up's table: its header, the table column it reads (the stem of a
    `_median/_min/_max` spread; unused by the shapes that read several columns), and how it is shown."""

    header: str
    column: str = ""
    shape: Shape = "param"
    scale: float = 1.0
    decimals: int | None = None
    """Fixed decimal places (report/fmt.py number), where a table stands beside a field report's; None: 3
    significant digits."""


RATE_DECIMALS = 1
"""A rate to 0.1 tok/s and a time to 0.01 s, as seed 000 §2.1 prints them (1,019.0 tok/s, 250.27 s)."""
TIME_DECIMALS = 2
REQUESTS = ViewColumn("requests", shape="requests")
PREFILL = ViewColumn("prefill, tok/s (server)", "prefill_tok_s_server", "spread")
DECODE = ViewColumn("decode, tok/s (server)", "decode_tok_s_server", "decode")
"""The engine's decode rate, with the client's beside it where they differ beyond the run's spread (a stall)."""
ENGINE = ViewColumn("engine decode windows, mean / peak tok/s", shape="engine_decode")
TTFT = ViewColumn("TTFT, s (client)", "ttft_client_s", "spread")
END_TO_END = ViewColumn("per request end to end, s (client): median; slowest", "e2e_client_s", "slowest")
"""Each request's send to last byte, as its median and its slowest (report 001 §6.4: per-request latency as the
clients grow, beside the aggregate)."""
ACCEPTANCE = ViewColumn("acceptance (server): accepted / drafted", shape="acceptance")
TTFT_SERVER = ViewColumn("TTFT, s (server: prompt time, without queueing)", "prompt_s_server_median", "plain")
PROMPT = ViewColumn("prompt tokens (measured)", "prompt_tokens_median", "plain")
PER_ROUND = ViewColumn("tokens per round (server)", "tokens_per_round_server_median", "plain")
GPU = ViewColumn("GPU: power, SM clock (median)", shape="gpu")
API = ViewColumn("api", "api")
ANSWER = ViewColumn("first answer token, s (client; reasoning events)", shape="answer")
"""Where the model reasoned first: when the first answer token came (TTFT counts the reasoning) and how many
events carried reasoning; empty where no request reasoned."""
