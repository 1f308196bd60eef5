"""What a profile names is what runs (issue 44 item 9): a sweep kind the profile leaves out is off, not on with
the GPU-sized defaults, so deleting a section shortens a run."""

from __future__ import annotations

from pathlib import Path

from ninferkit.params import load_profile
from tests.conftest import LOCAL_CPU, REPO


def _profile(tmp_path: Path, sweeps: str) -> Path:
    text = (LOCAL_CPU.read_text().split("\nsweeps:")[0] + "\n" + sweeps + "\n"
            + "capacity:" + LOCAL_CPU.read_text().split("\ncapacity:")[1])
    path = tmp_path / "trimmed.yaml"
    path.write_text(text)
    return path


def _on(path: Path, overrides: list[str] | None = None) -> list[str]:
    sweeps = load_profile(path, overrides or []).profile.sweeps
    kinds = ("context", "tasks", "concurrency", "rate", "prefix_reuse", "sessions", "agent", "trace")
    return [kind for kind in kinds if getattr(sweeps, kind).enabled]


def test_the_embedded_default_names_its_four_kinds() -> None:
    assert _on(LOCAL_CPU) == ["context", "tasks", "concurrency", "prefix_reuse"]


def test_a_kind_left_out_is_off_and_a_named_one_runs(tmp_path: Path) -> None:
    only_context = _profile(tmp_path, "sweeps:\n  context: {targets: [256], repetitions: 1}")
    assert _on(only_context) == ["context"]
    assert _on(only_context, ["sweeps.tasks.depths=[0]"]) == ["context", "tasks"]  # an override names it
    assert _on(_profile(tmp_path, "sweeps: {repeats: 1}")) == []  # a sweeps section that names no kind
    assert _on(_profile(tmp_path, "sweeps:\n  tasks: {enabled: false}\n  rate: {enabled: true}")) == ["rate"]


def test_the_tp2_profile_runs_the_concurrency_sweep_it_names() -> None:
    assert _on(REPO / "params" / "ninfer-2xv100-sxm2-tp2.yaml") == ["concurrency"]
