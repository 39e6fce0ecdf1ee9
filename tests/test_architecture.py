"""The layers of docs/architecture.md hold: the import-linter contract of pyproject.toml passes on
the installed layout (the suite's folders under ``nnts``, as the wheel has them), fails on an
import that points up, and no module imports itself through others, counting the imports inside
functions."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def installed_layout(dest: Path) -> Path:
    """The project's modules laid out as installed (``[tool.setuptools.package-dir]`` applied) in
    ``dest``, with pyproject.toml: grimp finds a package's modules by walking its folder, and in a
    clone ``nnts.cts`` is ``cts/``, not ``nnts/cts/``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = {"nnapi_ref": "nnapi_ref", "nnts": "nnts", **config["tool"]["setuptools"]["package-dir"]}
    for package, folder in folders.items():
        for source in (ROOT / folder).rglob("*.py"):
            target = dest.joinpath(*package.split("."), source.relative_to(ROOT / folder))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    shutil.copyfile(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("importlinter", reason="needs import-linter (pip install 'nnts[dev]')")
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--config", "pyproject.toml", "--no-cache"],
                          cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> Path:
    return installed_layout(tmp_path_factory.mktemp("installed"))


def test_the_layers_contract_holds(layout):
    done = lint_imports(layout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 kept, 0 broken" in done.stdout


@pytest.mark.parametrize("importer, imported", [
    ("nnapi_ref.types", "nnts.reports.results"),      # NNAPI's reference using the tool
    ("nnapi_ref.hal", "nnapi_ref.runtime.execution"),  # the driver interface using the runtime
    ("nnapi_ref.runtime.model", "nnapi_ref.runtime.compilation"),  # the model builder using its compiler
    ("nnts.runners.cases", "nnts.cts.test_api"),      # a runner using a suite
])
def test_an_import_that_points_up_breaks_the_contract(tmp_path, importer, imported):
    planted = installed_layout(tmp_path / "planted")
    module = planted.joinpath(*importer.split(".")).with_suffix(".py")
    module.write_text(module.read_text(encoding="utf-8") + f"\n\ndef _planted():\n    import {imported}\n",
                      encoding="utf-8")
    done = lint_imports(planted)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{importer} -> {imported}" in done.stdout


def module_imports(tree: Path) -> dict[str, set[str]]:
    """Every module of ``nnapi_ref`` and ``nnts`` in ``tree`` with the modules it imports, at the top
    or inside a function (grimp's graph: each import statement, wherever it is), built in a process
    of its own so that ``tree``'s packages, not this installation's, are found."""
    pytest.importorskip("grimp", reason="needs import-linter's grimp (pip install 'nnts[dev]')")
    code = ("import json, grimp; g = grimp.build_graph('nnapi_ref', 'nnts', cache_dir=None); "
            "print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m)) for m in g.modules}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return {module: set(imported) for module, imported in json.loads(done.stdout).items()}


def circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in imports:
                    continue
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(imports[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_circles_finds_a_circle_through_several_modules():
    imports = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert circles(imports) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others(layout):
    imports = module_imports(layout)
    assert len(imports) > 150  # the whole product, not an empty graph
    assert circles(imports) == []
