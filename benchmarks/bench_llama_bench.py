"""A finished run's server rates against `llama-bench`: same build, same model, same GPU.

llama-bench drives llama.cpp's compute with no HTTP, no scheduler and no sampling loop, so its rates
are what the llama-server of the run could reach at best. This script reads the run's profile and
context-sweep table, builds the `llama-bench` target once into the same cache folder as the run's
`llama-server` (same source, backend and CUDA architecture), and measures:

- prefill: `ppN` for each prompt length N of the context sweep (from an empty cache), against the
  server's median `prefill_tok_s_server` at that target;
- decode: `tg<out>` at depth N (`-d N`: N tokens already in the cache), against the server's median
  `decode_tok_s_server` after an N-token prompt.

Flash attention and batch sizes are left at their defaults in both (auto, 2048/512). Run it after
the runbook, while no server holds the GPU:

    python benchmarks/bench_llama_bench.py RUN_DIR [--repetitions 3]

Prints a table with the ratios (server / llama-bench) and writes RUN_DIR/llama_bench.json with the
raw llama-bench results beside them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from ninferkit.artifact import model_path
from ninferkit.engines.llama_server.embedded import build_llama_cpp
from ninferkit.params.profile import Profile
from ninferkit.rundir.records import BenchComparison, LlamaBenchRecord
from ninferkit.rundir.runs import RunDir, read_json, utc_now, write_record


def llama_bench(binary: Path, model: Path, args: list[str], offload: bool) -> list[dict[str, Any]]:
    argv = [str(binary), "-m", str(model), "-o", "json", *args]
    if offload:
        argv += ["-ngl", "999"]
    print("$", " ".join(argv), flush=True)
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"llama-bench failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    run_dir = RunDir(args.run_dir)
    profile = Profile.model_validate(read_json(run_dir.manifest)["profile"])
    if profile.engine.kind != "llama_server":
        sys.exit(f"{args.run_dir} ran {profile.engine.kind}; llama-bench compares llama-server runs only")
    context = pd.read_csv(run_dir.table("context"))
    context = context[context["status"] == "done"]
    targets = [int(t) for t in context["target_prompt_tokens"]]
    output_tokens = profile.sweeps.context.output_tokens
    binary = build_llama_cpp(profile.engine.built, ("llama-server", "llama-bench"))["llama-bench"]
    model = model_path(profile)
    offload = profile.engine.built.backend == "cuda"
    repetitions = ["-r", str(args.repetitions)]
    prefill = llama_bench(binary, model, ["-p", ",".join(map(str, targets)), "-n", "0", *repetitions], offload)
    decode = llama_bench(binary, model, ["-p", "0", "-n", str(output_tokens), "-d", ",".join(map(str, targets)),
                                          *repetitions], offload)
    pp = {int(row["n_prompt"]): float(row["avg_ts"]) for row in prefill}
    tg = {int(row["n_depth"]): float(row["avg_ts"]) for row in decode}
    rows = []
    for _, cell in context.iterrows():
        target = int(cell["target_prompt_tokens"])
        server_prefill, server_decode = cell["prefill_tok_s_server_median"], cell["decode_tok_s_server_median"]
        rows.append({"prompt_tokens": target, "prefill_tok_s_server": server_prefill,
                     "prefill_tok_s_llama_bench": pp[target], "prefill_ratio": server_prefill / pp[target],
                     "decode_tok_s_server": server_decode, "decode_tok_s_llama_bench": tg[target],
                     "decode_ratio": server_decode / tg[target]})
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.3f}" if v < 10 else f"{v:,.0f}"))
    print(f"decode server / llama-bench: median {table['decode_ratio'].median():.3f} "
          f"(min {table['decode_ratio'].min():.3f}, max {table['decode_ratio'].max():.3f})")
    print(f"prefill server / llama-bench: median {table['prefill_ratio'].median():.3f} "
          f"(min {table['prefill_ratio'].min():.3f}, max {table['prefill_ratio'].max():.3f})")
    out = run_dir.llama_bench
    write_record(out, LlamaBenchRecord(schema_version=LlamaBenchRecord.SCHEMA_VERSION, created=utc_now(),
                                       binary=str(binary), model=str(model), repetitions=args.repetitions,
                                       comparison=[BenchComparison(**row) for row in rows],
                                       llama_bench_prefill=prefill, llama_bench_decode=decode))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
