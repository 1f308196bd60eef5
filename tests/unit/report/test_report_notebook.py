"""05_writeup.ipynb: thin (one library call per cell), committed clean, and runs headless under papermill."""

from __future__ import annotations

import json
from pathlib import Path

import papermill as pm

from tests.unit.report.test_report import REPO, RUN_A, copy_run

NOTEBOOK = REPO / "notebooks" / "05_writeup.ipynb"


def test_notebook_runs_headless_and_writes_the_write_up(tmp_path: Path) -> None:
    run_dir = copy_run(RUN_A, tmp_path)
    output = tmp_path / "05_writeup.ipynb"
    pm.execute_notebook(str(NOTEBOOK), str(output), kernel_name="python3", progress_bar=False,
                        cwd=str(NOTEBOOK.parent), parameters={"run_dir": str(run_dir)})  # the run's own profile
    report = run_dir / "report"
    assert (report / "index.md").exists() and (report / "index.html").exists()
    assert len(list((report / "figures").glob("*.png"))) == 4
    executed = json.loads(output.read_text())
    shown = [output for cell in executed["cells"] if cell["cell_type"] == "code" for output in cell["outputs"]]
    markdown = "".join("".join(o["data"]["text/markdown"]) for o in shown if "text/markdown" in o.get("data", {}))
    assert "## Headline" in markdown and markdown.count("data:image/png;base64,") == 4
    html = ["".join(o["data"]["text/html"]) for o in shown if "text/html" in o.get("data", {})]
    profile, headline = (text for text in html if 'class="ninferkit-report"' in text)  # the write-up's own tables
    assert "<th>run profile</th>" in profile and f"{run_dir.name}</td>" in profile
    assert "<th>" in headline and "\n<table>\n" in headline and "..." not in headline
    plain = "".join("".join(o["data"]["text/plain"]) for o in shown if "text/html" in o.get("data", {}))
    assert "| run profile | value |" in plain  # where only text is shown (papermill's log), the Markdown


def test_every_rule_of_a_notebook_table_style_is_scoped_to_its_box() -> None:
    """`.ninferkit-report th, td` scoped th alone: td fell to JupyterLab's right alignment in every notebook table
    (issue 44). Every selector of every rule now starts with the box, with an element more than JupyterLab's."""
    from ninferkit.report.document import Table
    from ninferkit.report.render import FRAGMENT_SCOPE, html_fragment

    style = html_fragment([]).split("<style>\n", 1)[1].split("\n</style>", 1)[0]
    selectors = [selector.strip() for rule in style.splitlines() for selector in rule.split("{", 1)[0].split(",")]
    assert len(selectors) > len(style.splitlines())  # a comma list is among them
    assert all(selector.startswith(f"{FRAGMENT_SCOPE} ") for selector in selectors), selectors
    # two classes and two elements: more than JupyterLab 4's `:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td`
    cells = next(rule for rule in style.splitlines()
                 if rule.startswith(f"{FRAGMENT_SCOPE} .scroll th, {FRAGMENT_SCOPE} .scroll td {{"))
    assert "text-align: left;" in cells and '<div class="scroll">' in html_fragment([Table(("a",), (("b",),))])
