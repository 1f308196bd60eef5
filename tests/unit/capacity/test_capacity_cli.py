"""`ninferkit capacity fit` on saved logs: the JSON keys other tools read, and clear errors."""

from __future__ import annotations

import json
import re

import pytest

from ninferkit.cli import main
from tests.conftest import DATA, GENERATED_CPU, REPO

LOGS = sorted(str(p) for p in (DATA / "llama_server_logs").glob("*.log"))
NINFER = DATA / "ninfer_capacity"


def test_fit_json_has_the_contract_keys(capsys: pytest.CaptureFixture[str]) -> None:
    # the logs are of the generated model (tests/data/llama_server_logs/README.md): its profile gives the architecture
    assert main(["capacity", "fit", *LOGS, "--profile", str(GENERATED_CPU), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bytes_per_token"] == 2048
    for key in ("fixed_bytes", "free_after_weights_bytes", "max_kv_tokens_interval"):
        low, high = out[key]
        assert low <= high
    assert isinstance(out["max_kv_tokens"], int)
    assert {"concurrency", "context_per_slot", "reading", "fits", "margin_gib"} <= set(out["decision_table"][0])


def test_fit_text_names_pinned_and_open_terms(capsys: pytest.CaptureFixture[str]) -> None:
    profile = REPO / "params" / "ninfer-rtx3090-groupwise.yaml"
    args = ["capacity", "fit", str(NINFER / "g2_refusal_auto_mtp3.log"), "--profile", str(profile),
            "-p", "serve.max_concurrency=1", "-p", "serve.max_context=262144", "-p", "serve.kv.dtype=int8",
            "-p", "serve.kv.capacity=auto", "-p", "capacity.known.free_after_weights=7000000000",
            "-p", "capacity.contexts=[262144]", "-p", "capacity.kv_dtypes=[int8]"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "35904 (architecture)" in text
    assert "open:   kv=int8 spec=mtp3 chunk=1024: fixed part per extra slot (only concurrency [1] observed)" in text
    # one slot: the pool that starts is the full one, so its two readings are one row
    assert re.search(r"1\s+262,144\s+starts and full\s+262,144\s+no\s+.*short by [\d.]+ GiB", text)  # 9.84 GB
    # 2 slots: the per-slot term is open, but a fixed part never shrinks as slots grow: still short, by at least
    # (a one-sided interval in words, never "11.41–?")
    assert re.search(r"2\s+262,144\s+full\s+524,288\s+no\s+at most -[\d.]+\s+short by at least [\d.]+ GiB "
                     r"\(at least [\d,]+ tokens\)", text)
    assert "–?" not in text and "?–" not in text


def test_fit_with_a_bad_profile_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capacity", "fit", *LOGS[:1], "-p", "capacity.known.free_after_weights=[3, 1]"]) == 2
    assert "capacity.known.free_after_weights" in capsys.readouterr().err
