"""The best setting for a target (issue 39) on the embedded llama-server: goodput as the figure a search maximizes
over a variant's launch, and the largest context that keeps a limit, answered from the base's own context cells.

Each answer is checked against figures computed here from requests.jsonl's raw lines, and the post is checked to
say it, the launches it took, and what each launch showed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ninferkit import steps
from ninferkit.report.build import write_report
from ninferkit.rundir.runs import RunDir, open_run
from ninferkit.server import process as server
from ninferkit.steps.sweeps import sweeps
from tests.conftest import LOCAL_CPU, free_port


def _measured(tmp_path: Path, overrides: list[str], kind: str) -> Path:
    """The embedded default with the overrides, launched, swept (one kind) and stopped; its run directory."""
    run = open_run(LOCAL_CPU, tmp_path / "run", overrides)
    steps.launch(run, progress=False)
    try:
        sweeps(run, only=kind, progress=False)
    finally:
        server.stop(run.dir)
    return run.dir.path


def _rows(run_dir: Path, sweep: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    return [row for row in rows if row["sweep"] == sweep and not row.get("warmup")]


def _post(run_dir: Path) -> str:
    """The post's objective section, up to the next section; checked to say the answer the sweeps step recorded
    (both settle it from the files: sweeps/settle.py)."""
    text = write_report(run_dir, ["markdown"]).markdown.read_text()
    section = text[text.index("## The best setting for the target"):]
    section = section[:section.find("\n## ", 3)] if "\n## " in section else section
    answered = RunDir(run_dir).read_manifest().steps["sweeps"].objective_answer
    assert f"Answer: {answered}." in section, (answered, section)
    return section


def test_the_launch_with_the_highest_goodput_is_the_answer(tmp_path: Path, llama_server: Path) -> None:
    """The base and one variant (one slot instead of two) at 2 clients: goodput under a TTFT target set at the
    median TTFT of the base's own warm-up-free requests is the good requests over the cell's wall time, and the
    answer is the launch with more of it."""
    overrides = [f"serve.port={free_port()}", "sweeps.concurrency.levels=[2]",
                 "sweeps.concurrency.requests_per_client=2", "sweeps.concurrency.prompt_tokens=64",
                 "sweeps.concurrency.output_tokens=8", "sweeps.telemetry=false",
                 "variants=[{name: slots-1, set: {serve.max_concurrency: 1}}]",
                 "objective={sweep: concurrency, cell: {concurrency: 2}, maximize: goodput_rps, "
                 "goodput: {ttft_s: 1.0}}"]
    run_dir = _measured(tmp_path, overrides, "concurrency")
    rows = _rows(run_dir, "concurrency")
    goodput = {}
    for name in ("base", "slots-1"):
        own = [row for row in rows if row["cell"].get("variant", "base") == name]
        good = sum(row["status"] == "ok" and row["ttft_client_s"] <= 1.0 for row in own)
        goodput[name] = good / (max(row["t_done"] for row in own) - min(row["t_send"] for row in own))
    post = _post(run_dir)
    outcomes = {line.split(" | ")[0].strip("| "): line for line in post.splitlines() if line.startswith("| ")}
    for name, value in goodput.items():
        assert f"goodput_rps {value:.4g}; 4 requests" in outcomes[name]
    best = max(goodput, key=lambda name: goodput[name])
    if goodput["base"] == goodput["slots-1"]:
        best = "base"  # a tie names the first in order
    assert f"Answer: {best}: the highest goodput_rps ({goodput[best]:.4g})" in post
    assert "It took 1 of 1 variant launch(es) besides the base" in post and "vLLM's request goodput" in post


def test_the_largest_context_that_keeps_the_limit_comes_from_the_bases_own_cells(tmp_path: Path,
                                                                                llama_server: Path) -> None:
    """No variant: the context sweep's three cells decide. The limit on the prompt's own token count (the server's
    usage) falls between the 128- and 256-token cells, so the answer is 128 and the 256 cell refutes the next; the
    decode floor is checked on the same cell's rows."""
    overrides = [f"serve.port={free_port()}", "sweeps.context.targets=[64, 128, 256]", "sweeps.context.repetitions=1",
                 "sweeps.context.output_tokens=8", "sweeps.telemetry=false",
                 "objective={sweep: context, largest: target_prompt_tokens, at_most: {prompt_tokens: 200}, "
                 "at_least: {decode_tok_s_server: 0.1}}"]
    run_dir = _measured(tmp_path, overrides, "context")
    rows = {row["cell"]["target_prompt_tokens"]: row for row in _rows(run_dir, "context")}
    assert rows[128]["prompt_tokens"] <= 200 < rows[256]["prompt_tokens"]
    post = _post(run_dir)
    assert "Answer: base: the largest target_prompt_tokens (128)" in post
    assert "The base's own cells decide: no launch beyond the base's." in post
    decode = rows[128]["decode_tok_s_server"]
    assert (f"target_prompt_tokens 128, prompt_tokens {rows[128]['prompt_tokens']}, decode_tok_s_server "
            f"{decode:.4g}; 1 request): the next measured, target_prompt_tokens 256, misses: prompt_tokens "
            f"{rows[256]['prompt_tokens']} > 200") in post
