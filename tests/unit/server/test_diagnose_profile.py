"""Diagnoses that use what the profile knows (issue 25): a container refusal names the revision to pin from
artifact.container_revisions, as `verify` does; a log of request errors alone is not "no line of this log is
ninfer's". The log lines are seed 000's own (tests/seed_excerpts.py)."""

from __future__ import annotations

import pytest

from ninferkit.params import load_profile
from ninferkit.server.diagnose import diagnose
from tests.conftest import REPO
from tests.seed_excerpts import CONTEXT_REJECTED, QUEUE_TIMEOUT, STARTUP_REFUSED

V100 = REPO / "params" / "ninfer-v100-pcie-nvfp4.yaml"
MAIN = "a107ba1b"  # seed 000 §1.4: the hub's main, container v3 (the only digits the report prints)


def _mismatch(report: dict[str, object]) -> dict[str, str]:
    [found] = [e for e in report["errors"] if e["code"] == "artifact_container_mismatch"]  # type: ignore[attr-defined]
    return found  # type: ignore[no-any-return]


def test_a_v3_file_on_the_v2_engine_names_the_revision_to_pin() -> None:
    """The profile pointed at main (v3): the fix is seed 000 §1.7's, the revision 204e3d92c30d."""
    profile = load_profile(V100, [f"artifact.revision={MAIN}"]).profile
    fix = _mismatch(diagnose(STARTUP_REFUSED.text, profile))["fix"]
    assert fix.startswith("pin artifact.revision to 204e3d92c30d (container v2, artifact.container_revisions; "
                          "this build reads v2)")


def test_a_profile_already_pinned_to_v2_says_the_file_is_not_that_revisions() -> None:
    fix = _mismatch(diagnose(STARTUP_REFUSED.text, load_profile(V100).profile))["fix"]
    assert fix.startswith("pin artifact.revision to 204e3d92c30d (container v2): the profile already pins it")


def test_without_a_profile_the_rule_keeps_its_general_fix() -> None:
    assert "204e3d92c30d" not in _mismatch(diagnose(STARTUP_REFUSED.text))["fix"]


@pytest.mark.parametrize("with_profile", [True, False], ids=["profile", "no-profile"])
def test_request_errors_alone_are_a_serving_log(with_profile: bool) -> None:
    log = CONTEXT_REJECTED.text + "\n" + QUEUE_TIMEOUT.text + "\n"
    report = diagnose(log, load_profile(V100).profile if with_profile else None)
    assert "no line of this log" not in report["verdict"]
    assert report["verdict"].startswith("serving, with request errors (context_length_exceeded, "
                                        "request_queue_timeout)")
    assert report["request_errors"] == ["context_length_exceeded", "request_queue_timeout"]
