"""Reasoning accounted in the tables and the write-up: a cell's median time to the first answer token and its
reasoning events, shown only where its requests reasoned.

The requests are llama-server's recorded streams (tests/data/sse/README.md): `chat_reasoning.sse` streams
SmolLM2's text as reasoning_content and never reaches an answer within max_tokens; `chat.sse` is all answer.
Each is replayed through the client into a context cell of the embedded profile (no server in a unit test;
tests/live/test_reasoning.py sends them live).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ninferkit.engines import get_adapter
from ninferkit.measure.client import RequestSpec, StreamingClient
from ninferkit.report import write_report
from ninferkit.rundir.records import ServerRecord
from ninferkit.rundir.runs import open_run
from ninferkit.rundir.servings import run_servings
from ninferkit.sweeps.execute import Recorder, SweepContext, _append_outcome, base_row, ended_outcome
from ninferkit.sweeps.plan import build_plan
from ninferkit.sweeps.tables import build_tables, save_tables
from tests.conftest import LOCAL_CPU
from tests.unit.measure.test_client import HAIKU, replay


def test_the_tables_and_the_write_up_carry_the_first_answer_token_and_the_reasoning_events(tmp_path: Path) -> None:
    run = open_run(LOCAL_CPU, tmp_path / "run", ["sweeps.context.targets=[256, 512]"])
    adapter = get_adapter("llama_server")
    ctx = SweepContext(run, adapter, "http://recorded", "embedded", {}, None, [],  # type: ignore[arg-type]
                       base_row(run, adapter, ServerRecord(), run_servings(run.dir).main), 60.0, None,
                       run_servings(run.dir).main)
    for cell, stream in zip(build_plan(run.profile, adapter, ["context"], explicit=True),
                            ("chat_reasoning.sse", "chat.sse"), strict=True):
        async def send(record: Recorder, stream: str) -> None:
            async with StreamingClient("http://recorded", adapter, "embedded", transport=replay(stream)) as client:
                await record(await client.send(RequestSpec("chat", HAIKU, 8)), 0, False)

        record = Recorder(ctx, cell, "replay")
        asyncio.run(send(record, stream))
        _append_outcome(ctx, cell, ended_outcome(ctx, record))
    table = build_tables(run, ["context"])["context"].set_index("target_prompt_tokens")
    reasoned, answered = table.loc[256], table.loc[512]
    assert reasoned["reasoning_events_median"] > 0 and reasoned["ttft_answer_client_s_median"] != \
        reasoned["ttft_answer_client_s_median"]  # NaN: no answer token came, unknown and not 0
    assert answered["reasoning_events_median"] == 0
    assert answered["ttft_answer_client_s_median"] == answered["ttft_client_s_median"]
    save_tables(run.dir, build_tables(run, ["context"]))
    text = write_report(run.dir.path, ["markdown"]).markdown.read_text()
    assert "first answer token, s (client; reasoning events)" in text
    events = int(reasoned["reasoning_events_median"])
    lines = text.splitlines()
    assert any(f"no answer token ({events} reasoning events)" in line for line in lines if line.startswith("| 256 |"))
    assert not any("reasoning events" in line for line in lines if line.startswith("| 512 |"))
