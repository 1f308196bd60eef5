"""The post's "What this run does not reproduce": read from the profile the run recorded, one bullet per entry.

Data: tests/data/run_dirs/embedded-1/ (a real run of the embedded default, README there), its recorded profile given
the entries a seed profile carries (params/ninfer-2xv100-sxm2-tp2.yaml's not_reproduced, as that profile states it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ninferkit.params import load_profile
from ninferkit.report.build import build_document, write_report
from ninferkit.report.data import load_run
from ninferkit.report.document import Bullets, Section
from ninferkit.report.not_reproduced import TITLE
from tests.conftest import DATA, REPO

RUN = DATA / "run_dirs" / "embedded-1"
TP2 = REPO / "params" / "ninfer-2xv100-sxm2-tp2.yaml"


def _with_entries(tmp_path: Path, entries: list[dict[str, str]]) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["profile"]["not_reproduced"] = entries
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def _sections(run: Path) -> list[Section]:
    return [section for section in build_document(load_run(run), {}).sections if section.title == TITLE]


def test_the_recorded_profiles_entries_are_one_short_section_of_the_post(tmp_path: Path) -> None:
    stated = [entry.model_dump() for entry in load_profile(TP2).profile.not_reproduced]
    run = _with_entries(tmp_path, stated)
    [section] = _sections(run)
    assert not section.appendix  # the post itself, where a reader holding the report looks
    [bullets] = section.blocks
    assert isinstance(bullets, Bullets)
    assert bullets.items == tuple(f"{entry['item']}: {entry['why']}" for entry in stated)
    post = write_report(run, ["markdown"]).markdown.read_text()
    assert f"## {TITLE}" in post and "seed 004 §四: the Swift-1.5 + MTP5 row" in post


def test_a_run_whose_profile_names_none_has_no_such_section(tmp_path: Path) -> None:
    assert _sections(RUN) == []
    assert _sections(_with_entries(tmp_path, [])) == []


def test_entries_this_ninferkit_cannot_read_are_pointed_to_not_dropped(tmp_path: Path) -> None:
    [section] = _sections(_with_entries(tmp_path, [{"item": "seed 004 §四", "reason": "an older key"}]))
    assert "see the profile in the run's manifest.json" in str(section.blocks[0])
