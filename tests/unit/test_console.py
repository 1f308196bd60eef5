"""The console's tables and lines: at most 100 columns (fewer on a narrower terminal), plain text wherever
they are printed, every cell's text kept (wrapped, never cut)."""

from __future__ import annotations

import re

import pytest

from ninferkit.console import WIDTH, table, wrapped

LONG = "target_prompt_tokens=2048, api=chat, a where text long enough that a 100-column table must wrap it twice"


def test_a_table_too_wide_for_100_columns_wraps_its_text_and_keeps_every_word(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")  # as a Jupyter kernel sets it: still no colour
    header = ["metric", "where", "best", "p50", "p99"]
    rows = [["Decode (server)", LONG, "74.0", "58.2", "73.7"], ["TTFT (client)", "concurrency 2", "2,360", "2,590",
                                                               "2,810"]]
    text = table(header, rows, right={2, 3, 4}, no_wrap={2, 3, 4})
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH and len(lines) > len(rows) + 2  # wrapped, not cut
    assert not re.search(r"[\x1b\r]", text)
    words = " ".join(text.split())
    assert all(word in words for word in LONG.split())
    first = next(line for line in lines if line.startswith("Decode"))
    assert first.split()[-3:] == ["74.0", "58.2", "73.7"]  # numbers whole, on the row's first line


def test_a_narrow_terminal_gets_a_narrower_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    text = table(["metric", "where"], [["Decode (server)", LONG]])
    assert max(len(line) for line in text.splitlines()) <= 60


def test_a_long_line_wraps_with_its_continuation_indented(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    formula = "runtime(C, S, K) = F(C, S) + b x K, " * 12
    lines = wrapped(formula.strip(), "    ").splitlines()
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert all(line.startswith("    ") for line in lines[1:])
    assert " ".join(line.strip() for line in lines) == formula.strip()
