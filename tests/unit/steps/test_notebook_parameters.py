"""The notebooks' `overrides` parameter: its two forms, and one clear error for anything else (issue 24, item 5).

`papermill -p overrides '[serve.port=8090]'` passes the list as its text; read as one override it failed deep in
the profile with "did you mean 'serve'?".
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ninferkit.errors import ProfileError
from ninferkit.steps import notebook_run
from ninferkit.steps.runner import NOTEBOOKS_DIR, STEPS
from tests.conftest import LOCAL_CPU, REPO


@pytest.mark.parametrize("overrides", ["serve.port=8091", ["serve.port=8091"], ("serve.port=8091", "")])
def test_one_string_or_a_list_of_key_value_strings(tmp_path: Path, overrides: object) -> None:
    run = notebook_run(str(LOCAL_CPU), str(tmp_path / "run"), overrides, step="setup")  # type: ignore[arg-type]
    assert run.profile.serve.port == 8091


@pytest.mark.parametrize(("overrides", "told"), [
    ("[serve.port=8091]", "a list written as text"),
    (["[serve.port=8091, sweeps.seed=1]"], "a list written as text"),
    ([{"serve.port": 8091}], "a dict, not a key=value string"),
    ({"serve.port": 8091}, "is a dict"),
    (8091, "is a int"),
])
def test_any_other_value_is_refused_naming_the_parameter_and_its_forms(tmp_path: Path, overrides: object,
                                                                      told: str) -> None:
    with pytest.raises(ProfileError) as raised:
        notebook_run(str(LOCAL_CPU), str(tmp_path / "run"), overrides, step="setup")  # type: ignore[arg-type]
    message = str(raised.value)
    assert message.startswith("parameter overrides: ") and told in message
    assert "one key=value string" in message and "a YAML list of key=value strings" in message
    assert not (tmp_path / "run").exists()


def test_papermill_by_hand_with_a_list_as_text_says_what_to_write(tmp_path: Path) -> None:
    """papermill's own command line, as the README shows it, with the list written after -p."""
    done = subprocess.run(
        [sys.executable, "-m", "papermill", str(NOTEBOOKS_DIR / STEPS["setup"]), str(tmp_path / "out.ipynb"),
         "-p", "profile", str(LOCAL_CPU), "-p", "run_dir", str(tmp_path / "run"),
         "-p", "overrides", "[serve.port=8091]", "--no-progress-bar"],
        capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode != 0
    assert "parameter overrides: '[serve.port=8091]' is a list written as text" in done.stderr
    assert "did you mean" not in done.stderr
