"""A server started again in a run folder keeps the earlier launch's log (the sweeps step relaunches the run's
server after its variants; the rows that launch answered are joined to its log). The log text is a line of a real
llama-server startup (tests/data/llama_server_logs)."""

from __future__ import annotations

from pathlib import Path

from ninferkit.redaction import remember
from ninferkit.server.process import keep_earlier_log
from tests.conftest import DATA

RECORDED = sorted((DATA / "llama_server_logs").glob("*.log"))[0]
LINE = next(line for line in RECORDED.read_text().splitlines() if line)


def test_each_earlier_log_is_kept_under_the_next_number(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "server.log"
    log.parent.mkdir()
    for launch in (1, 2):
        log.write_text(f"{LINE}\nlaunch {launch}\n")
        assert keep_earlier_log(log) == log.with_name(f"server.{launch}.log") and not log.exists()
    assert [path.read_text().splitlines()[-1] for path in sorted(log.parent.glob("server.*.log"))] == \
        ["launch 1", "launch 2"]


def test_nothing_is_kept_of_an_empty_or_missing_log_or_a_link(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    assert keep_earlier_log(log) is None
    log.write_text("")
    assert keep_earlier_log(log) is None and log.exists()
    log.unlink()
    target = tmp_path / "elsewhere.log"
    target.write_text(LINE)
    log.symlink_to(target)
    assert keep_earlier_log(log) is None and target.read_text() == LINE  # a link is never followed or moved


def test_a_kept_log_holds_no_secret_this_process_knows(tmp_path: Path) -> None:
    """A server that died was never stopped, so its log was never scrubbed: keeping it scrubs it."""
    secret = "sk-kept-log-0123456789abcdef"
    remember(secret, "a test key")
    log = tmp_path / "server.log"
    log.write_text(f"{LINE}\nargv: --api-key {secret}\n")
    kept = keep_earlier_log(log)
    assert kept is not None and secret not in kept.read_text() and LINE in kept.read_text()
