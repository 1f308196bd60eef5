"""The write-up reads as a post (issue 38): it leads as the field reports lead, quotes the right engine lines,
keeps notes to the run's author in an appendix and shows what stays running.

Data, none of it edited: tests/data/ninfer_live/g1-h200-2x120k/run/ (a copy of shared/ninfer-live/g1-h200-2x120k:
a real `ninfer-serve` driven by ninferkit on an H200 with report 000's flags; its SOURCE.md and README.md), the
published example docs/examples/h200-vllm/ (vLLM on an H200, a 135M model whose prompt time is ~19 ms at every
length), and report 000's own engine lines in §2.4(d) (tests/data/seeds/000_77605b501239fca0.txt), read by the
NInfer adapter as it reads a log. Each run is copied to tmp_path and written there.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

from ninferkit.engines import get_adapter
from ninferkit.params import load_profile
from ninferkit.report import write_report
from ninferkit.report.data import load_run
from ninferkit.report.derive import rederive
from ninferkit.report.field_tables import whole_decode
from ninferkit.report.fmt import number
from ninferkit.report.lead import prefill_is_overhead
from ninferkit.rundir.runs import RunDir
from tests.conftest import DATA, REPO, whole
from tests.unit.report.test_report import markdown_table

LIVE = DATA / "ninfer_live" / "g1-h200-2x120k" / "run"
VLLM = REPO / "docs" / "examples" / "h200-vllm"
SEED_000 = DATA / "seeds" / "000_77605b501239fca0.txt"
NOTES = "Appendix: to fill the missing tables"


def post(run: Path, where: Path) -> tuple[Path, str]:
    """The copy of `run` written up, and its write-up: the post, then its appendix."""
    copy = where / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report", "*.parquet"))
    return copy, whole(write_report(copy, ["markdown"]))


def section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def throughput_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if " throughput " in line]


def test_starving_quotes_two_running_one_prefilling_one_ready(tmp_path: Path) -> None:
    _, text = post(LIVE, tmp_path)
    log = throughput_lines((LIVE / "logs" / "server.log").read_text())
    both = [line for line in log if re.search(r"running=2 prefilling=1 decode_ready=1 ", line)]
    lone = [line for line in log if re.search(r"running=1 prefilling=0 decode_ready=1 ", line)]
    assert len(both) == 5 and lone  # the log has both kinds; only the first shows prefill starving decode
    lanes = section(text, "Concurrency, lane by lane")
    quoted = lanes.split("Prefill starving decode", 1)[1].split("```\n", 2)[1].strip()
    assert quoted == both[0].strip() and lone[0].strip() not in lanes


def test_a_window_where_one_request_ended_is_no_batch_rate(tmp_path: Path) -> None:
    adapter = get_adapter("ninfer")
    log = throughput_lines((LIVE / "logs" / "server.log").read_text())
    parsed = [adapter.parse_throughput(line) or {} for line in log]
    tails = [(before, line) for before, line in zip(parsed, parsed[1:], strict=False)
             if line.get("prefill_tok_s") == 0 and (line.get("decode_tok_s") or 0) > 0]
    assert tails and not any(whole_decode(before, line) for before, line in tails)  # the 2.4 tok/s tail among them
    assert any(line["decode_tok_s"] == pytest.approx(2.4) for _, line in tails)
    _, text = post(LIVE, tmp_path)
    assert "Decode batching" not in text and "2.40" not in section(text, "Concurrency, lane by lane")
    (note,) = [row for row in section(text, NOTES).splitlines() if "batching: no table" in row]
    assert "only decoded from open to close" in note


def test_report_000s_own_lines_read_as_starving_then_decode_alone() -> None:
    adapter = get_adapter("ninfer")
    lines = [line for line in SEED_000.read_text().splitlines() if line.startswith("throughput |")]
    serial, starving, alone = (adapter.parse_throughput(line) for line in lines)
    assert starving and alone and starving["running"] == 3 and starving["decode_ready"] == 2
    assert whole_decode(starving, alone) and alone["batch"] == pytest.approx(3.98)
    assert not whole_decode(serial, starving)  # it prefilled 4,096 tokens


def test_the_live_post_leads_with_model_gpu_engine_and_its_best_figures(tmp_path: Path) -> None:
    """Seed 000's title carries the model, the GPU, the power limit, the best figures and the engine's build; the
    live run's probe read 700 W on its H200 (probe.json), and its model is the artifact it loaded (the served id is
    the profile's alias). The figures at the reports' precision: the title as 000 titles ("93.9", "1019"), the
    at-a-glance table as 000's 成绩速览 (1,019.0 tok/s, 0.13 s), the second lane's queue from the engine's record
    (the join `ninferkit report` re-derives with this ninferkit)."""
    copy = tmp_path / LIVE.name
    shutil.copytree(LIVE, copy, ignore=shutil.ignore_patterns("report", "*.parquet"))
    rederive(RunDir(copy))
    text = whole(write_report(copy, ["markdown"]))
    run = load_run(copy)
    context = run.measured("context")
    decode = max(float(r.decode_tok_s_server or 0) for r in [*context, *run.measured("tasks")])
    prefill = max(float(r.prefill_tok_s_server or 0) for r in context)
    assert json.loads((copy / "probe.json").read_text())["facts"]["gpu"]["gpus"][0]["power_limit_w"] == 700
    title = text.splitlines()[0]
    assert title == (f"# qwen3.6-27b groupwise-int on NVIDIA H200 at 700 W: decode {decode:.1f} tok/s, prefill "
                     f"{prefill:,.0f} tok/s (NInfer ziworkslab/ninfer-3090-ubuntu / sm_90; speculation mtp, 3 draft "
                     "tokens; KV int8)")
    lead = markdown_table(text, "Headline", 0)
    assert [row["figure"] for row in lead] == ["decode", "prefill", "TTFT (client)", "concurrency", "memory"]
    assert lead[1]["best (conditions)"] == f"{prefill:,.1f} tok/s (4.1K-token prompt)"
    assert re.fullmatch(r"\d+\.\d{2} s @4\.1K → \d+\.\d{2} s @32\.8K", lead[2]["range"])
    # Two 122,880-token requests: what the cell showed, not an aggregate rate over two requests; the second's wait is
    # the engine's TTFT less its prepare and prefill times (its request log writes no queue field)
    assert lead[3]["best (conditions)"] == "2 requests of 122.9K prompt tokens each, served together"
    second = next(line for line in map(json.loads, (copy / "engine-request-log.jsonl").read_text().splitlines())
                  if line.get("event") == "request_done" and line["request"]["request_id"] == 7)["timings_seconds"]
    queued = second["ttft"] - second["prepare"] - second["vision"] - second["prefill"]
    assert round(queued, 2) == 67.11
    assert lead[3]["range"] == "the second waited 67.11 s (1 m 7.1 s) in the engine's queue"


def test_the_live_runs_of_one_model_name_it_one_way(tmp_path: Path) -> None:
    """The three live runs loaded one model: two from a repository named local/qwen3.6-27b-random, one from a local
    file q36_27b_random.ninfer (no repository). Titled by repository else file stem, the posts named it two ways;
    each container names itself (identity qwen3.6-27b, weights groupwise-int), and every post now uses that name,
    in its title and in its recipe, whatever its repository or file name."""
    runs = (LIVE, DATA / "ninfer_live" / "g1-h200" / "run", DATA / "ninfer_live" / "g1-h200-v100flags")
    repos = {str(json.loads((run / "manifest.json").read_text())["profile"]["artifact"].get("repo")) for run in runs}
    assert repos == {"None", "local/qwen3.6-27b-random"}  # as recorded: the two ways the titles took
    for index, run in enumerate(runs):
        identity = json.loads((run / "artifact.json").read_text())["container"]["identity"]
        assert identity == {"model_id": "qwen3.6-27b", "weights_id": "groupwise-int"}
        _, text = post(run, tmp_path / str(index))
        assert text.startswith("# qwen3.6-27b groupwise-int on NVIDIA H200 ")
        assert "| model (as the artifact names itself) | qwen3.6-27b groupwise-int |" in section(text, "Pinned recipe")
        assert "q36_27b_random on" not in text and "qwen3.6-27b-random on" not in text


def test_report_000s_conditions_lead_its_title(tmp_path: Path) -> None:
    """Report 000's profile on the live run's files, with its probe as a 200 W V100 would read (the limit the report
    sets with nvidia-smi -pl 200): the title names the model the profile pins, the card, 200 W, and the engine's
    fork, architecture and CUDA runtime, as 000's own title does ("…200W 下 decode 93.9 tok/s、prefill 1019 tok/s
    （NInfer SM70 / CUDA 12.8）"). With no limit read, the title says nothing of power."""
    run = tmp_path / "run"
    shutil.copytree(LIVE, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["profile"] = load_profile(REPO / "params" / "ninfer-v100-pcie-nvfp4.yaml").profile.model_dump(mode="json")
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "artifact.json").unlink()  # the live run's file names itself qwen3.6-27b: the profile's repo names 000's
    probe = json.loads((run / "probe.json").read_text())
    probe["facts"]["gpu"]["gpus"][0].update(name="Tesla V100-PCIE-32GB", power_limit_w=200.0)
    (run / "probe.json").write_text(json.dumps(probe))
    title = write_report(run, ["markdown"]).markdown.read_text().splitlines()[0]
    assert re.fullmatch(r"# Qwen3\.8-27B-nvfp4-NInfer on Tesla V100-PCIE-32GB at 200 W: decode [\d.]+ tok/s, "
                        r"prefill [\d,]+ tok/s \(NInfer hamawang/ninfer-v100-20260916 / sm_70 / CUDA 12\.8\.0; "
                        r"speculation mtp, 3 draft tokens; KV int8\)", title), title
    probe["facts"]["gpu"]["gpus"][0]["power_limit_w"] = None  # NVML read no limit
    (run / "probe.json").write_text(json.dumps(probe))
    title = write_report(run, ["markdown"]).markdown.read_text().splitlines()[0]
    assert " W" not in title and "power" not in title


def test_the_embedded_post_leads_with_its_model_not_its_alias(tmp_path: Path) -> None:
    """The embedded default serves SmolLM2-135M-Instruct under the id "embedded" (params/local-cpu.yaml): the
    title names the model file it loaded. Data: tests/data/run_dirs/embedded-spec-ab (a real embedded run)."""
    _, text = post(DATA / "run_dirs" / "embedded-spec-ab", tmp_path)
    title = text.splitlines()[0]
    assert title.startswith("# SmolLM2-135M-Instruct.Q4_1 on CPU: decode ") and "embedded" not in title
    assert title.endswith("(llama.cpp llama-server 11434.0.0; speculation ngram-mod; KV f16)")


def test_a_prefill_rate_over_a_fixed_overhead_never_leads(tmp_path: Path) -> None:
    copy, text = post(VLLM, tmp_path)
    context = load_run(copy).measured("context")
    flat = prefill_is_overhead(context)
    times = [float(r.prompt_s_server) for r in context if r.prompt_s_server is not None]
    assert flat is not None and max(times) < 0.025  # 256 to 8,000 tokens, each under 25 ms
    assert "prefill" not in text.splitlines()[0]
    (prefill,) = [row for row in markdown_table(text, "Headline", 0) if row["figure"] == "prefill"]
    assert prefill["best (conditions)"].startswith("not measured")
    assert "462,229" not in section(text, "Headline")


def test_notes_to_the_author_leave_the_readers_text(tmp_path: Path) -> None:
    copy, text = post(LIVE, tmp_path)
    reader = (copy / "report" / "index.md").read_text()
    for phrase in ("add 1 to sweeps.concurrency.levels", "No capacity.json", "sweeps.tasks.depths"):
        assert phrase not in reader and phrase in section(text, NOTES)
    assert "\n## Capacity\n" not in text  # a section with no data is not written
    assert "None" not in reader and not re.search(r"\b\d+\.0 output tokens|\{'", reader)
    assert "free_after_startup_bytes" not in text and "| free after startup |" in section(
        text, "Appendix: the startup ledger")


def test_one_request_shows_one_value_never_three_percentiles(tmp_path: Path) -> None:
    _, text = post(LIVE, tmp_path)
    rows = markdown_table(text, "Appendix: latency", 0)
    one = [row for row in rows if row["requests"] == "1"]
    assert one and all(" / " not in row["TTFT, ms"] for row in one)


def test_the_recipe_shows_what_stays_running(tmp_path: Path) -> None:
    _, text = post(LIVE, tmp_path)
    recipe = section(text, "Pinned recipe")
    launch, stays = re.findall(r"```\n(.*?)\n```", recipe, re.S)
    assert stays.startswith("# systemd unit ninferkit-h200-ninfer-g1-turn3.service runs: ninfer-serve ")
    assert stays.split(" runs: ", 1)[1].split()[1:] == launch.split()[1:]  # the flags the run measured with


def test_errors_met_names_the_revision_of_the_runs_own_profile(tmp_path: Path) -> None:
    """Report 000's profile (params/ninfer-v100-pcie-nvfp4.yaml) put in a copy of the live run, whose server log is
    the engine's recorded refusal of a container v3 file (g1-h200/startup-errors/v3_header.log): the write-up has
    the run's profile at hand, so its fix names the revision to pin, as `diagnose --profile` does."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "ninfer_live" / "g1-h200" / "run", run)
    shutil.copy(DATA / "ninfer_live" / "g1-h200" / "startup-errors" / "v3_header.log", run / "logs" / "server.log")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["profile"] = load_profile(REPO / "params" / "ninfer-v100-pcie-nvfp4.yaml").profile.model_dump(mode="json")
    (run / "manifest.json").write_text(json.dumps(manifest))
    text = write_report(run, ["markdown"]).markdown.read_text()
    (row,) = [line for line in section(text, "Errors met").splitlines() if "artifact_container_mismatch" in line]
    assert "pin artifact.revision to 204e3d92c30d (container v2)" in row


def test_a_column_no_row_has_a_value_in_is_not_written(tmp_path: Path) -> None:
    """The live run measured no task without speculation: the speculation table has no "without" columns, and the
    line saying how to measure them is in the appendix."""
    _, text = post(LIVE, tmp_path)
    table = markdown_table(text, "Speculative decoding, task by task", 0)
    assert table and all("decode tok/s without" not in row and row["acceptance"] == "0%" for row in table)
    assert "speculation_ab: true runs each task both ways" in section(text, NOTES)
    # nor does the caption describe a side the run lacks, or a drafter it did not use (MTP, not n-gram)
    caption = section(text, "Speculative decoding, task by task")
    assert "measured right after" not in caption and "n-gram" not in caption
    assert "no task was measured with speculation off" in caption


def test_the_published_posts_read_as_posts_and_link_their_raw_detail() -> None:
    """Issue 38 item 7 on the published examples: no Python repr or raw field name in the post, a 32-lane table cut
    to its first and last lanes admitted, per-cell latency, the ledger and the flags' keys in the appendix it links."""
    for example in (VLLM, REPO / "docs" / "examples" / "h200-llamacpp"):
        post, detail = ((example / "report" / f"{stem}.md").read_text() for stem in ("index", "appendix"))
        assert "[Appendix: the raw detail](appendix.md)" in post and "[The post](index.md)" in detail
        assert not re.search(r"\{'|\bNone\b|_tok_s_|_bytes\b", post), example
        for heading in ("Appendix: latency", "Appendix: the startup ledger", "Appendix: the launch flags",
                        "Provenance"):
            assert f"\n## {heading}\n" in detail and f"\n## {heading}\n" not in post
    # the cut, on the llama-server side of the vLLM example (vLLM's own lanes have no engine numbers: no table)
    llama = (VLLM / "h200-llamacpp-smollm2" / "report" / "index.md").read_text()
    lanes = [line for line in section(llama, "Concurrency, lane by lane").splitlines()
             if line.startswith("| 32 clients at 1,024 prompt tokens | L")]
    assert [line.split(" | ")[1].split()[0] for line in lanes] == ["L1", "L2", "L3", "L4", "L29", "L30", "L31", "L32"]
    assert "32 clients at 1,024 prompt tokens: the first 4 and the last 4 of 32 lanes admitted, the other 24 are " \
           "rows of requests.jsonl" in llama
    assert "| 32 clients at 1,024 prompt tokens | L" not in (VLLM / "report" / "index.md").read_text()


def test_the_task_tables_caption_says_what_a_depth_is(tmp_path: Path) -> None:
    """Issue 38, the audit's gap 1: seed 000 §2.3's "8K / 64K 档" were no prompt lengths (its prompts were tens of
    tokens at both), so the table heads each column with what was sent before the instruction, and its caption
    says what a depth is. The live run measured its tasks after 4,096 document tokens."""
    _, text = post(LIVE, tmp_path)
    tasks = section(text, "Tasks at each depth")
    assert "A depth is the tokens of document placed before the task's instruction (0: the instruction alone" in tasks
    (header,) = [line for line in tasks.splitlines() if line.startswith("| task |")]
    assert header.split(" | ")[2:] == ["after 4,096 document tokens: prompt time, s (server)",
                                       "after 4,096 document tokens: decode tok/s (server) / acceptance |"]


def test_the_leads_best_decode_and_ttft_draw_on_the_tasks_and_the_prefix_cache(tmp_path: Path) -> None:
    """Issue 38, the audit's gap 4: seed 000 leads with its coding task's 93.9 tok/s and a 100%-hit resend's 0.13 s,
    not only the context sweep's figures. The live run's best TTFT is a prefix-reuse scenario the cache served
    whole, its median recomputed here from requests.jsonl, named with its conditions; the TTFT range stays the
    context sweep's, and decode's range names both sweeps it spans."""
    copy, text = post(LIVE, tmp_path)
    run = load_run(copy)
    lead = {row["figure"]: row for row in markdown_table(text, "Headline", 0)}
    by_scenario: dict[str, list[float]] = {}
    for row in run.measured("prefix_reuse"):
        if row.cached_tokens_server and row.prompt_tokens and row.cached_tokens_server >= row.prompt_tokens / 2:
            by_scenario.setdefault(str((row.cell or {})["scenario"]), []).append(float(row.ttft_client_s or 0))
    scenario, best = min(((name, statistics.median(times)) for name, times in by_scenario.items()),
                         key=lambda item: item[1])
    context_best = min(float(r.ttft_client_s or 0) for r in run.measured("context"))
    assert best < context_best  # a cache hit is faster than any cold prompt
    assert lead["TTFT (client)"]["best (conditions)"] == (
        f"{number(best)} s (prefix reuse: {scenario}, 16.4K-token prompt, 100% of it from the cache)")
    assert lead["TTFT (client)"]["range"].startswith("1.62 s @4.1K")  # the context sweep's, cold
    assert lead["decode"]["range"].endswith("tok/s (context sweep and tasks sweep)")
    assert "prefix-reuse scenarios the cache served" in section(text, "Headline")


def test_counts_print_as_counts_in_the_published_posts() -> None:
    """Issue 38 item 7: a median of two token counts is no count. The llama.cpp example's cold prefix-reuse cell hit
    15 and 16 tokens (requests.jsonl, the engine's count); its post said "15.5". The vLLM example's json_extraction
    task without speculation stopped at 41 and ran to 320 tokens; its post said "180", the half between them
    rounded. Both now show the counts they lie between."""
    rows = [json.loads(line) for line in (REPO / "docs" / "examples" / "h200-llamacpp" / "requests.jsonl")
            .read_text().splitlines()]
    cold = sorted(row["cached_tokens_server"] for row in rows if row["sweep"] == "prefix_reuse" and not row["warmup"]
                  and row.get("prefix_role") == "measured" and row["cell"]["scenario"] == "cold")
    assert cold == [15, 16]
    post = (REPO / "docs" / "examples" / "h200-llamacpp" / "report" / "index.md").read_text()
    (line,) = [line for line in post.splitlines() if line.startswith("| cold | chat |")]
    assert "| 15 – 16 (engine) |" in line and "15.5" not in post
    vllm = [json.loads(line) for line in (VLLM / "requests.jsonl").read_text().splitlines()]
    off = sorted(row["completion_tokens"] for row in vllm if row["sweep"] == "tasks" and not row["warmup"]
                 and row["status"] == "ok" and row["cell"]["task"] == "json_extraction"
                 and row["cell"].get("speculation") == "off")
    assert off == [41, 320]
    (task,) = [line for line in (VLLM / "report" / "index.md").read_text().splitlines()
               if line.startswith("| json_extraction | 512 | repetitive |")]
    assert task.endswith("| 41 – 320 (length, stop) |") and "180" not in task


def test_a_bare_os_error_of_an_older_run_says_what_is_known_and_what_to_do(tmp_path: Path) -> None:
    """The live run's sweeps step failed after its last cell with a bare "[Errno 2] No such file or directory": the
    ninferkit that made it (1af22a9) recorded no file and kept no traceback, and the post showed the words alone.
    It now says where the error is recorded, that no file was named, and the command that names it."""
    manifest = json.loads((LIVE / "manifest.json").read_text())
    assert manifest["steps"]["sweeps"]["error"] == "[Errno 2] No such file or directory"  # as recorded
    copy, text = post(LIVE, tmp_path)
    (row,) = markdown_table(text, "Errors met", 0)
    assert row["where"] == "step sweeps" and row["source"] == "manifest.json (steps.sweeps.error)"
    assert row["error"].startswith("[Errno 2] No such file or directory: the OS named no file")
    # every cell had run (13 of 13), so the sweeps step rebuilds its tables without a server; the failure left the
    # capacity and write-up steps of the plan unrun
    assert (manifest["steps"]["sweeps"]["cells_run"], manifest["steps"]["sweeps"]["cells_failed"]) == (13, 0)
    assert manifest["planned_steps"][-3:] == ["sweeps", "capacity", "writeup"] and "capacity" not in manifest["steps"]
    assert row["fix"] == (f"run the steps left again with this ninferkit (`ninferkit run PROFILE --run-dir {copy.name} "
                          "--steps sweeps,capacity,writeup`): it names the file and the call that met it, and keeps "
                          "the traceback in logs/ninferkit-errors.log")
