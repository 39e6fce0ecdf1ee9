"""``nnts init [FOLDER] [--name NAME] [--shards N]``: what a driver team needs to start, made from
what nnts installs: a driver package (the Python driver template, ``examples/python_driver``,
to fill in with calls into the accelerator), a conftest and a property test of the team's own
(``nnts.compare`` over ``nnts.generators.strategies``), and CI for GitHub Actions and GitLab CI
that runs ``nnts test`` in N shards on N machines and merges their reports with ``nnts report
merge``. Nothing is overwritten: a file that exists stops it before anything is written."""
from __future__ import annotations

import keyword
import re
import sys
from pathlib import Path

from nnts.formats import paths
from nnts.formats.files import write_atomic

DEFAULT_SHARDS = 4


def register(sub) -> None:
    p = sub.add_parser("init", help="make a driver project: a driver package from the template, a conftest, a "
                                    "property test and CI running nnts test in shards (GitHub Actions, GitLab CI)")
    p.add_argument("folder", nargs="?", default=".", help="where (default: the current folder)")
    p.add_argument("--name", default=None, help="the driver package's name (default: the folder's name)")
    p.add_argument("--shards", type=int, default=DEFAULT_SHARDS,
                   help=f"machines the CI runs the conformance suites on, one shard each (default {DEFAULT_SHARDS})")
    p.set_defaults(func=run)


def package_name(folder: Path, name: str | None) -> str:
    """``name``, or the folder's name made a Python identifier; ValueError when it cannot be one."""
    chosen = name or re.sub(r"\W+", "_", folder.resolve().name).strip("_").lower() or "driver"
    if not chosen.isidentifier() or keyword.iskeyword(chosen) or chosen in ("nnts", "nnapi_ref", "tests"):
        raise ValueError(f"--name {chosen}: not a usable Python package name (letters, digits and _; not a keyword, "
                         "nnts, nnapi_ref or tests)")
    return chosen


def driver_module(name: str) -> str:
    """The template driver, its module docstring saying where it came from and what to do."""
    template = (paths.examples_folder() / "python_driver" / "toy_driver.py").read_text(encoding="utf-8")
    body = template.split('"""', 2)[2].lstrip("\n")  # the template's own docstring tells how to run the example
    return (f'"""The {name} NNAPI driver, made by `nnts init` from nnts\'s Python driver template\n'
            "(`nnts docs python-driver`): ADD on TENSOR_FLOAT32, computed with numpy. Replace the numpy\n"
            "parts with calls into your accelerator, and report what it supports.\n\n"
            f"    nnts test -n auto --driver {name}.driver:make_device\n"
            '"""\n' + body)


def files(name: str, shards: int) -> dict[str, str]:
    """Every file of the project, by path relative to its folder."""
    driver = f"{name}.driver:make_device"
    test = (f'nnts test -n auto --driver "$DRIVER" --shard {{shard}}/{shards} --report out/shard-{{shard}}.json '
            f"--junitxml out/shard-{{shard}}.xml")
    merge = "nnts report merge out/shard-*.json --html out/conformance.html --json out/conformance.json"
    github_shards = ", ".join(str(k) for k in range(1, shards + 1))
    return {
        f"{name}/__init__.py": f'"""The {name} NNAPI driver."""\n\nDRIVER = "{driver}"  # its --driver string\n',
        f"{name}/driver.py": driver_module(name),
        "conftest.py": f'''"""pytest's configuration of the team's own tests (tests/, `pytest`): the driver under test.

The conformance suites run with `nnts test --driver {driver}`, in CI in {shards} shards
(.github/workflows/nnts.yml, .gitlab-ci.yml), merged with `nnts report merge`."""
import pytest

from {name} import DRIVER


@pytest.fixture(scope="session")
def driver_under_test() -> str:
    """The --driver string of this project's driver."""
    return DRIVER
''',
        "tests/test_properties.py": f'''"""The driver against nnts's reference on random models (nnts.compare over
nnts.generators.strategies)."""
import pytest

import nnts

hypothesis = pytest.importorskip("hypothesis", reason="needs hypothesis (pip install 'nnts[all]')")
from hypothesis import given, settings  # noqa: E402
from nnts.generators.strategies import models  # noqa: E402

from {name} import DRIVER  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(models(operations=["ADD"], types=["TENSOR_FLOAT32"], max_operations=3))
def test_add_agrees_with_the_reference(graph):
    nnts.compare(graph, DRIVER).check()  # skipped models (unsupported) pass; a mismatch fails, in words
''',
        "pyproject.toml": f'''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{name.replace("_", "-")}"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["numpy"]

[project.optional-dependencies]
test = ["nnts[all]"]

[tool.setuptools]
packages = ["{name}"]

[tool.pytest.ini_options]
testpaths = ["tests"]
''',
        ".github/workflows/nnts.yml": f'''# nnts's conformance suites against the {name} driver on {shards} machines,
# one shard each (a test is in shard crc32(name) mod N + 1: the shards are the whole run,
# without overlap), then one report of all of them. Made by `nnts init`.
name: nnts conformance
on: [push, pull_request]
env:
  NNTS: "nnts[all]"          # where the team installs nnts from: a wheel, a git URL, an index
  DRIVER: "{driver}"
jobs:
  conformance:
    runs-on: ubuntu-latest
    strategy:
      fail-fast: false
      matrix:
        shard: [{github_shards}]
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - run: pip install "$NNTS"
      - name: nnts test, shard ${{{{ matrix.shard }}}} of {shards}
        run: {test.format(shard="${{ matrix.shard }}")}
      - uses: actions/upload-artifact@v4
        if: always()
        with:
          name: shard-${{{{ matrix.shard }}}}
          path: out/
  report:
    needs: conformance
    if: always()
    runs-on: ubuntu-latest
    steps:
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - run: pip install "$NNTS"
      - uses: actions/download-artifact@v4
        with:
          pattern: shard-*
          path: out
          merge-multiple: true
      - name: one report of the {shards} shards
        run: {merge}
      - uses: actions/upload-artifact@v4
        with:
          name: conformance
          path: out/conformance.*
''',
        ".gitlab-ci.yml": f'''# nnts's conformance suites against the {name} driver on {shards} machines, one
# shard each, then one report of all of them. Made by `nnts init`.
stages: [test, report]
variables:
  NNTS: "nnts[all]"          # where the team installs nnts from: a wheel, a git URL, an index
  DRIVER: "{driver}"

conformance:
  stage: test
  image: python:3.11
  parallel: {shards}
  script:
    - pip install "$NNTS"
    - {test.format(shard="$CI_NODE_INDEX")}
  artifacts:
    when: always
    paths: [out/]
    reports:
      junit: out/shard-*.xml

report:
  stage: report
  image: python:3.11
  when: always
  needs: [conformance]
  script:
    - pip install "$NNTS"
    - {merge}
  artifacts:
    when: always
    paths: [out/conformance.html, out/conformance.json]
''',
        "README.md": f'''# The {name} NNAPI driver

Made by `nnts init`. The driver is `{name}/driver.py` (`make_device()`), from nnts's template:
ADD on TENSOR_FLOAT32 in numpy, every HAL method written out; replace the numpy parts with calls
into the accelerator and report what it supports.

```sh
pip install 'nnts[all]'
nnts test -n auto --driver {driver} --report out/conformance.html --report out/conformance.json
pytest                                   # the team's own tests (tests/), with nnts.compare
nnts docs                                # nnts's documentation, installed with it
```

CI (`.github/workflows/nnts.yml`, `.gitlab-ci.yml`) runs `nnts test` in {shards} shards, one per
machine (`--shard K/{shards}`), and merges them with `nnts report merge` into one report.
''',
    }


def run(args) -> int:
    folder = Path(args.folder)
    try:
        name = package_name(folder, args.name)
        if args.shards < 1:
            raise ValueError(f"--shards {args.shards}: at least 1")
    except ValueError as e:
        print(f"nnts init: {e}", file=sys.stderr)
        return 2
    try:
        made = files(name, args.shards)
    except ModuleNotFoundError as e:  # an editable install made before nnts.examples existed
        print(f"nnts init: {e.name} is not installed: reinstall nnts (pip install -e .)", file=sys.stderr)
        return 2
    there = [p for p in made if (folder / p).exists()]
    if there:
        print(f"nnts init: {folder / there[0]} exists; nothing written (init makes a project, it changes none)",
              file=sys.stderr)
        return 2
    for relative, text in made.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    print(f"nnts init: the {name} driver project in {folder}: {', '.join(made)}")
    print(f"next: cd {folder} && nnts test -n auto --driver {name}.driver:make_device -m op_ADD")
    return 0
