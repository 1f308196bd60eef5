"""The write-up of a run whose profile and records carry hostile text (raw HTML, a javascript: link, a
remote image, an injected heading, a list, a secret): both index.md and index.html show it as text.
index.md is read back with mistune, a Markdown renderer that lets raw HTML through, so what it makes
of the file is what a careless viewer would show."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ninferkit.report import write_report
from ninferkit.rundir.runs import append_jsonl, open_run
from tests.conftest import LOCAL_CPU

mistune = pytest.importorskip("mistune")

HOSTILE = ('<img src="http://evil.example/beacon.png"> <script>alert(1)</script> '
           '[click](javascript:alert(1)) ![x](http://evil.example/i.png)\n# Injected heading\n1. listed')
SECRET = "sk-report-secret-40417"


def _hostile_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NINFERKIT_REPORT_TEST_KEY", SECRET)
    text = LOCAL_CPU.read_text().replace("max_context: 4096", "max_context: 4096  # " + HOSTILE.replace("\n", " "))
    text += "\nreport:\n  title: \"" + HOSTILE.replace('"', '\\"').replace("\n", "\\n") + "\"\n"
    profile = tmp_path / "hostile.yaml"
    profile.write_text(text)
    run = open_run(profile, tmp_path / "run", ["serve.api_key_env=NINFERKIT_REPORT_TEST_KEY"])
    run.dir.record_step("sweeps", status="failed", error=HOSTILE)
    append_jsonl(run.dir.sweep_cells, {"cell_id": "c1", "sweep": "context", "attempt": "a1", "status": "failed",
                                       "reason": HOSTILE, "profile_hash": run.profile_hash})
    run.dir.server_log.parent.mkdir(parents=True, exist_ok=True)
    run.dir.server_log.write_text(f"main: server is listening on http://127.0.0.1:8088 key {SECRET}\n")
    return run.dir.path


def test_hostile_text_is_shown_as_text_in_both_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = write_report(_hostile_run(tmp_path, monkeypatch))
    markdown = report.files["markdown"].read_text()
    shown = mistune.create_markdown(escape=False, plugins=["table"])(markdown)
    assert "<script" not in shown and 'href="javascript:' not in shown
    assert all(src.startswith("figures/") for src in re.findall(r'<img[^>]* src="([^"]*)"', shown))
    assert re.findall(r"<h1>", shown) == ["<h1>"]
    assert "Injected heading" not in " ".join(re.findall(r"<h[1-6]>(.*?)</h[1-6]>", shown)[1:])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown  # shown, as text
    page = report.files["html"].read_text()
    assert "<script" not in page and 'href="javascript:' not in page and "evil.example/i.png\"" not in page
    assert "&lt;img src=" in page


def test_the_report_carries_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = _hostile_run(tmp_path, monkeypatch)
    report = write_report(run_dir)
    for path in report.files.values():
        assert SECRET not in path.read_text()
    assert SECRET not in (run_dir / "manifest.json").read_text()
