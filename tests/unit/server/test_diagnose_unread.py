"""A line a diagnosis explains is not also "not understood" (issue 38 item 8).

The lines: report 000 §2.5's symptom as the report quotes it, and the same failure as the dynamic loader
prints it (`<program>: error while loading shared libraries: <lib>: cannot open shared object file: ...`, glibc's
ld.so wording), which starts like a NInfer message (`ninfer-serve: `) and so was also listed as not understood.
"""

from __future__ import annotations

import pytest

from ninferkit.engines import get_adapter
from ninferkit.server.diagnose import diagnose_log, summary_text

LOADER = ("ninfer-serve: error while loading shared libraries: libcudart.so.12: cannot open shared object file: "
          "No such file or directory")


@pytest.mark.parametrize("line", ["cannot open shared object file: libcudart.so.12", LOADER])
def test_a_diagnosed_line_is_not_also_unread(line: str) -> None:
    report = diagnose_log(line + "\n", get_adapter("ninfer"))
    assert [entry["code"] for entry in report["errors"]] == ["cuda_runtime_missing"]
    assert not report["unread"]
    assert "not understood" not in summary_text(report)


def test_an_unexplained_line_stays_unread() -> None:
    report = diagnose_log(LOADER + "\nninfer-serve: frobnicated the widget 3 times\n", get_adapter("ninfer"))
    assert [item["line"] for item in report["unread"]] == [2]
