"""Imports run one way, down the neighbourhoods of docs/architecture.md, and never in a circle.

Read from the source: every `ninferkit` import, those inside functions and `TYPE_CHECKING` blocks counted too
(a lazy import ties two modules as much as one at the top). A layer is a set of packages (a folder of ninferkit)
and of the few loose modules every layer uses; a new package or loose module must be placed in LAYERS; a new
upward import fails here until the design says why (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "ninferkit"
LAYERS = (
    {"cli", "__main__", "fleet"},
    {"steps"},
    {"report", "interop", "capacity", "sweeps", "deploy"},
    {"server", "measure", "artifact"},
    {"engines"},
    {"host"},
    {"params", "rundir", "pip_download", "os_errors"},
    {"errors", "units", "registry", "transports", "progress", "finding", "redaction", "cache", "bounded",
     "plain_output", "version", "prometheus_text", "console"},
)
"""Top to bottom: the command line and the fleet; the runbook's steps; what the steps do (the write-up, other
tools' runs, capacity, sweeps, deployment); the server, the measurements and the model file; the engines; the
host; the profile schema and the run directory; the leaves every layer uses."""
UPWARD: set[tuple[str, str]] = set()
"""The imports that run up, and why: docs/architecture.md, "Layers"."""


@cache
def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


def layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) == 1:
        return None  # ninferkit/__init__.py loads its subpackages on first use
    return next(i for i, names in enumerate(LAYERS) if parts[1] in names)


def imports(path: Path, everywhere: bool = False) -> set[str]:
    """The modules an import runs: `from package import submodule` runs the submodule (and the package's
    __init__, which test_no_import_circle adds), `from module import name` the module. `everywhere` reads
    the imports inside functions and `TYPE_CHECKING` blocks too."""
    names = modules()
    found = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree) if everywhere else tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ninferkit"):
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(names)
            found |= submodules
            if len(submodules) < len(node.names):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("ninferkit"))
    return found


def lazy_attributes(module: str, path: Path) -> set[str]:
    """A package's own submodules that its __init__ names under `if TYPE_CHECKING:` only, to type the
    attributes it loads on first use (PEP 562, as ninferkit/__init__.py does): no import runs, none is named."""
    if path.name != "__init__.py":
        return set()
    typed: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for inner in node.body:
                if isinstance(inner, ast.ImportFrom) and inner.module and inner.module.startswith(module):
                    typed |= {inner.module} | {f"{inner.module}.{alias.name}" for alias in inner.names}
    return {name for name in typed if name.startswith(module + ".")}


def test_every_module_has_a_layer_and_imports_run_down() -> None:
    upward = set()
    for module, path in modules().items():
        mine = layer(module)  # a module outside LAYERS fails here: place it
        for target in imports(path, everywhere=True) - lazy_attributes(module, path):
            theirs = layer(target)
            if mine is not None and theirs is not None and theirs < mine:
                upward.add((module, target))
    assert upward == UPWARD


def assert_no_circle(edges: dict[str, set[str]]) -> None:
    """Depth first over module -> imported modules; a circle fails naming its modules in order."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges.get(module, ())):
            assert state.get(target) != 1, " -> ".join([*path[path.index(target):], target])
            if target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])


def test_no_import_circle() -> None:
    """Module-level imports, each with the package __init__ files it runs, have no cycle."""
    found = modules()
    edges: dict[str, set[str]] = {}
    for module, path in found.items():
        targets = {t for t in imports(path) if t in found and t != module}
        parents = {".".join(t.split(".")[:i]) for t in targets for i in range(2, t.count(".") + 1)}
        edges[module] = targets | {p for p in parents if p in found and p != module and not module.startswith(p + ".")}
    assert_no_circle(edges)


def test_no_import_circle_counting_every_import() -> None:
    """File to file, imports inside functions and type-only imports counted too: no circle either. A lazy
    import that closes a circle still ties the two modules to each other; what several floors need lives in
    a leaf (gpu.py, cache.py, version.py, finding.py, engines/kinds.py) instead."""
    found = modules()
    edges = {module: {t for t in imports(path, everywhere=True) - lazy_attributes(module, path)
                      if t in found and t != module}
             for module, path in found.items()}
    assert_no_circle(edges)


def test_the_sweep_kinds_import_only_the_pieces() -> None:
    """The plan, the tables, the write-up and preflight ask the registry (ninferkit.sweeps.kinds) for the
    kinds, and the registry loads each kind's module on first use; a kind module imports none of the modules
    that ask it, so the one lazy load is the only way back (docs/architecture.md, "Sweep kinds")."""
    found = modules()
    askers = {module for module, path in found.items() if "ninferkit.sweeps.kinds" in imports(path)}
    assert {"ninferkit.sweeps.plan", "ninferkit.sweeps.tables", "ninferkit.report.views"} <= askers
    kinds = {module: path for module, path in found.items() if module.startswith("ninferkit.sweeps.kinds.")}
    assert {module: imports(path) & askers for module, path in kinds.items()} == {module: set() for module in kinds}
