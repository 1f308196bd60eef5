"""Records an engine's streamed answers to the agent sweep's own first request (its system prompt, question and
tools: ninferkit/sweeps/kinds/agent.py, ninferkit/measure/agent_tools.py) under three tool choices: "required",
a named function, and "auto". Each answer's status, headers and body as the server sent them go to
OUT/NAME.json, for tests/data (the unit tests parse them with ninferkit's own stream reader).

    python3 scripts/carry/tool-streams-http.py OUT BASE_URL MODEL
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx

from ninferkit.measure.agent_tools import TOOLS
from ninferkit.sweeps.kinds.agent import QUESTION, SYSTEM

CHOICES: dict[str, Any] = {"required": "required", "named": {"type": "function", "function": {"name": "calculate"}},
                           "auto": "auto"}


def main(out: Path, base: str, model: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with httpx.Client(base_url=base, timeout=300) as client:
        for name, choice in CHOICES.items():
            body = {"model": model, "stream": True, "max_tokens": 128, "temperature": 0, "seed": 1,
                    "stream_options": {"include_usage": True}, "tools": list(TOOLS), "tool_choice": choice,
                    "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]}
            answer = client.post("/v1/chat/completions", json=body)
            (out / f"tool_{name}.json").write_text(json.dumps(
                {"method": "POST", "path": "/v1/chat/completions", "request": json.dumps(body),
                 "status": answer.status_code, "headers": dict(answer.headers), "body": answer.text}, indent=1))
            print(f"tool_{name}: {answer.status_code}, {len(answer.text)} bytes")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
