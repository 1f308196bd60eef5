"""The HTTP half of vllm-h200-capture.sh: each request's status, headers and body as the server sent them, and
/metrics before and after, into OUT/http/NAME.json. Run there as `python3 vllm-h200-http.py OUT BASE_URL`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

MODEL = "smollm2-135m"


def main(out: Path, base: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    client = httpx.Client(base_url=base, timeout=120)

    def save(name: str, response: httpx.Response) -> None:
        (out / f"{name}.json").write_text(json.dumps(
            {"method": response.request.method, "path": response.request.url.path,
             "request": response.request.content.decode(errors="replace")[:2000],
             "status": response.status_code, "headers": dict(response.headers), "body": response.text}, indent=1))

    def post(name: str, path: str, body: object) -> None:
        save(name, client.post(path, content=body if isinstance(body, str) else json.dumps(body),
                               headers={"Content-Type": "application/json"}))

    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 32,
            "temperature": 0, "seed": 1}
    save("health", client.get("/health"))
    save("models", client.get("/v1/models"))
    save("metrics_before", client.get("/metrics"))
    post("chat", "/v1/chat/completions", chat)
    save("metrics_after_chat", client.get("/metrics"))
    post("chat_stream", "/v1/chat/completions", {**chat, "stream": True, "max_tokens": 48,
         "messages": [{"role": "user", "content": "Count from one to ten in words."}],
         "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    save("metrics_after_stream", client.get("/metrics"))
    post("completions", "/v1/completions", {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 16,
                                            "temperature": 0})
    post("tokenize", "/tokenize", {"model": MODEL, "prompt": "Hello world, this is a test.",
                                   "add_special_tokens": False})
    post("wrong_model", "/v1/chat/completions", {**chat, "model": "nope"})
    post("over_context", "/v1/completions", {"model": MODEL, "prompt": "word " * 9000, "max_tokens": 4})
    post("bad_json", "/v1/chat/completions", '{"model": "smollm2-135m", "messages": [')
    post("responses", "/v1/responses", {"model": MODEL, "input": "Say hi.", "max_output_tokens": 16})
    post("messages", "/v1/messages", {"model": MODEL, "max_tokens": 16,
                                      "messages": [{"role": "user", "content": "Say hi."}]})
    long = " ".join(f"The quick brown fox jumps over the lazy dog number {i}." for i in range(300))
    for turn in ("first", "second"):
        post(f"prefix_{turn}", "/v1/completions", {"model": MODEL, "prompt": long, "max_tokens": 8, "temperature": 0})
        save(f"metrics_after_prefix_{turn}", client.get("/metrics"))
    repetitive = {"model": MODEL, "max_tokens": 128, "temperature": 0, "messages": [{"role": "user", "content":
                  "Repeat this line ten times: the cat sat on the mat."}]}
    save("metrics_before_spec", client.get("/metrics"))
    post("chat_repetitive", "/v1/chat/completions", repetitive)
    save("metrics_after_spec", client.get("/metrics"))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
