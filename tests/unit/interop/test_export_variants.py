"""`ninferkit export` of a run with variants (issue 39): every launch's cells, each naming its variant.

Data: tests/data/run_dirs/embedded-variants/ (real llama-server launches of the embedded default: the base, `ub32`
and `spec-off`, README there). The expected rows are counted here from requests.jsonl's raw lines.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ninferkit.interop import get_format
from ninferkit.interop.source import run_source
from tests.conftest import DATA

RUN = DATA / "run_dirs" / "embedded-variants"


def raw_measured() -> dict[str, int]:
    """Measured requests (ok or errored, no warm-ups) per launch, from the raw lines."""
    found: dict[str, int] = {}
    for line in (RUN / "requests.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["status"] in ("ok", "errored") and not row.get("warmup"):
            name = row["cell"].get("variant", "base")
            found[name] = found.get(name, 0) + 1
    return found


def test_the_csv_holds_every_launch_rows_each_naming_its_variant(tmp_path: Path) -> None:
    source = run_source(RUN)
    export = get_format("csv").export
    assert export is not None
    written = export(source, tmp_path / "requests.csv")[0]
    with written.open() as handle:
        rows = list(csv.DictReader(handle))
    counted: dict[str, int] = {}
    for row in rows:
        assert row["variant"] == (json.loads(row["cell"]).get("variant") or "base")
        counted[row["variant"]] = counted.get(row["variant"], 0) + 1
    assert counted == raw_measured() and set(counted) == {"base", "ub32", "spec-off"}
    assert [row["variant"] for row in rows][:counted["base"]] == ["base"] * counted["base"]  # the base's first


def test_each_cell_names_the_server_that_measured_it(tmp_path: Path) -> None:
    source = run_source(RUN)
    urls = {name: json.loads((RUN / "variants" / name / "server.json").read_text())["url"]
            for name in ("ub32", "spec-off")} | {"base": json.loads((RUN / "server.json").read_text())["url"]}
    assert len(set(urls.values())) == 3  # each launch had its own port
    export = get_format("guidellm").export
    assert export is not None
    report = json.loads(export(source, tmp_path / "benchmarks.json")[0].read_text())
    for benchmark in report["benchmarks"]:
        name = benchmark["config"]["requests"]["ninferkit_variant"]
        assert benchmark["config"]["backend"]["target"] == urls[name]
        assert (benchmark["config"]["requests"]["ninferkit_cell"].get("variant") or "base") == name
    summary = get_format("summary").export
    assert summary is not None
    with summary(source, tmp_path / "summary.csv")[0].open() as handle:
        cells = list(csv.DictReader(handle))
    assert {row["variant"] for row in cells} == {"base", "ub32", "spec-off"}
    assert sum(int(row["requests"]) for row in cells) == sum(raw_measured().values())
