"""The project's own rules: one list of requirements, an explicit public surface, thin notebooks."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml
from papermill.translators import PythonTranslator

import ninferkit
from tests.conftest import REPO


def _requirement(text: str) -> tuple[str, str]:
    match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", text)
    assert match, text
    return match[1].lower().replace("_", "-"), match[2].replace(" ", "")


def test_environment_yml_lists_the_same_requirements_as_pyproject() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    from_pyproject = dict(_requirement(dep) for dep in project["dependencies"])
    environment = yaml.safe_load((REPO / "environment.yml").read_text())
    conda_only = {"python", "pip", "cmake", "make", "compilers"}  # toolchain for the embedded llama-server build
    from_conda = dict(_requirement(dep) for dep in environment["dependencies"] if isinstance(dep, str))
    assert {k: v for k, v in from_conda.items() if k not in conda_only} == from_pyproject


def test_public_surface_is_explicit_and_sorted() -> None:
    assert ninferkit.__all__ == sorted(ninferkit.__all__)
    for name in ninferkit.__all__:  # subpackages load on first use; each public name must resolve
        assert getattr(ninferkit, name) is not None, name


def _code_cells(path: Path) -> list[nbformat.NotebookNode]:
    return [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]


OWN_PARAMETERS = {"06_deploy.ipynb": ["deploy", "from_capacity"]}
"""Parameters a notebook has beyond the four every notebook shares: 06 starts a service only when asked."""


def test_notebooks_are_committed_without_outputs_and_with_parameters() -> None:
    notebooks = sorted((REPO / "notebooks").glob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        notebook = nbformat.read(path, as_version=4)
        assert (notebook.nbformat, notebook.nbformat_minor) == (4, 5), path
        assert all(cell.get("id") for cell in notebook.cells), path
        cells = _code_cells(path)
        assert all(not cell.outputs and cell.execution_count is None for cell in cells), path
        assert "parameters" in cells[0].metadata.get("tags", []), path
        parameters = ast.parse(cells[0].source).body
        assert all(isinstance(node, ast.AnnAssign) and isinstance(node.value, (ast.Constant, ast.List))
                   for node in parameters), f"{path.name}: the parameters cell holds typed literals only"
        documented = PythonTranslator.inspect(cells[0])  # what `papermill --help-notebook` prints
        own = OWN_PARAMETERS.get(path.name, [])
        assert [p.name for p in documented] == ["profile", "run_dir", "overrides", "allow_profile_change", *own], \
            path.name
        assert all(p.inferred_type_name != "None" and p.help for p in documented), path.name


FORBIDDEN_IN_CELLS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.While, ast.Try, ast.With)


def test_notebook_cells_only_call_the_library() -> None:
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        for cell in _code_cells(path)[1:]:
            tree = ast.parse(cell.source)
            bad = [type(node).__name__ for node in ast.walk(tree) if isinstance(node, FORBIDDEN_IN_CELLS)]
            assert not bad, f"{path.name}: logic belongs in ninferkit/, found {bad} in:\n{cell.source}"
            imports = [alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                       for alias in node.names]
            assert set(imports) <= {"ninferkit", "IPython.display", "display", "Markdown", "HTML"}, imports


ENGINE_NAMES = ("ninfer", "llama_server", "vllm")


def test_engine_names_are_compared_only_inside_engines() -> None:
    offenders = []
    for path in (REPO / "ninferkit").rglob("*.py"):
        if "engines" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    if isinstance(side, ast.Constant) and side.value in ENGINE_NAMES:
                        offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not offenders


def test_version_names_the_package_version_and_the_commit(capsys: pytest.CaptureFixture[str]) -> None:
    from ninferkit.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out.strip()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert out.startswith(f"ninferkit {ninferkit.__version__} (git {commit[:7]}"), out


def test_version_imports_no_command_and_no_heavy_library() -> None:
    # `ninferkit --version` took 300-370 ms importing pydantic to run two git commands (issue 43 item 5)
    probe = ("import sys; from ninferkit.cli import main\ntry: main(['--version'])\nexcept SystemExit: pass\n"
             "print(sorted(m for m in ('pydantic', 'httpx', 'pandas', 'ninferkit.cli.sweep') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    line, loaded = done.stdout.strip().splitlines()
    assert line.startswith(f"ninferkit {ninferkit.__version__} (") and loaded == "[]", done.stdout


def test_the_command_line_starts_without_the_heavy_libraries() -> None:
    # `ninferkit --help` took 8.5 s on a loaded 2-core machine when every subpackage loaded at start-up:
    # the parser must need none of them (each command imports what it uses when it runs).
    probe = ("import sys; from ninferkit.cli import build_parser; build_parser(); "
             "print(sorted(m for m in ('pandas', 'matplotlib', 'pydantic', 'httpx', 'papermill', 'numpy') "
             "if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert loaded.stdout.strip() == "[]"


def test_verify_of_one_file_imports_only_the_checks_of_a_file(tmp_path: Path) -> None:
    # `ninferkit verify --file` on 1 GiB took 3.4 s against sha256sum's 1.0 s while its hashing ran at 1.16x
    # sha256sum: the rest was the profile step's imports (the report's pandas and matplotlib, the profile's models)
    model = tmp_path / "model.bin"
    model.write_bytes(b"ninferkit")
    probe = ("import sys; from ninferkit.cli import main\n"
             f"code = main(['verify', '--file', {str(model)!r}, '--size', '9', '--json', '--quiet'])\n"
             "print(code, sorted(m for m in ('pandas', 'matplotlib', 'pydantic', 'numpy', 'ninferkit.steps', "
             "'ninferkit.engines', 'ninferkit.artifact.fetch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert '"ok": true' in done.stdout and done.stdout.strip().splitlines()[-1] == "0 []", done.stdout


def test_the_artifact_package_gives_each_name_from_its_module() -> None:
    # its names load on first use (verify --file needs none of the heavy ones); each is the module's own object,
    # never a submodule of the same name (importing one sets the package's attribute to the module)
    import importlib

    from ninferkit import artifact

    for module, names in artifact._HOMES.items():
        for name in names:
            assert getattr(artifact, name) is getattr(importlib.import_module(module), name), name
            assert not (REPO / "ninferkit" / "artifact" / f"{name}.py").exists(), name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        artifact.nothing  # noqa: B018


def test_the_help_lists_what_the_commands_accept(capsys: pytest.CaptureFixture[str]) -> None:
    from ninferkit.cli import main
    from ninferkit.steps.catalog import runbook_steps, url_steps
    from ninferkit.sweeps.plan import sweep_names

    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--help"])  # the steps come from the catalog, looked up only for the help
    assert exit_info.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines to the terminal's width
    assert f"steps, in order: {','.join(runbook_steps())}; a --url run takes {','.join(url_steps())}" in shown
    assert all(kind in sweep_names() for kind in ("context", "tasks"))  # the examples `sweep --only` gives


def test_every_command_module_is_named_once_and_only_the_one_asked_for_is_imported() -> None:
    from ninferkit.cli import COMMANDS

    modules = sorted(path.stem for path in (REPO / "ninferkit" / "cli").glob("[a-z]*.py"))
    assert sorted(module for module, _ in COMMANDS.values()) == modules
    probe = ("import sys; from ninferkit.cli import main\ntry: main(['sweep', '--help'])\nexcept SystemExit: pass\n"
             "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('ninferkit.cli.') "
             "and not m.rsplit('.', 1)[1].startswith('_')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert "run the measurement sweeps" not in done.stdout and "--only" in done.stdout  # sweep's own parser
    assert done.stdout.strip().splitlines()[-1] == "['sweep']"
    listed = subprocess.run([sys.executable, "-m", "ninferkit", "--help"], capture_output=True, text=True, cwd=REPO,
                            check=True).stdout
    assert all(name in listed and " ".join(summary.split()[:3]) in " ".join(listed.split())
               for name, (_, summary) in COMMANDS.items())


def test_no_markdown_cell_says_a_placeholder_that_jupyterlab_would_take_for_a_tag() -> None:
    """JupyterLab renders Markdown as HTML: `tables/<name>.csv` outside a code span showed as "tables/.csv" in
    03 (issue 44). A <word> placeholder stays inside backticks."""
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                prose = re.sub(r"`[^`]*`", "", cell.source)
                assert not re.search(r"<[A-Za-z_][\w-]*>", prose), f"{path.name}: {cell.source}"
