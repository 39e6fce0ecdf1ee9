"""What a driver team needs to start, from the installed nnts: ``nnts init`` makes a driver package
from the template, a conftest, a property test (``nnts.compare`` over the hypothesis strategies)
and CI for GitHub Actions and GitLab CI whose shards, run here one after the other and merged,
give the unsharded run's totals; ``nnts docs`` reaches every document the README links, in the
wheel too; ``[all]`` installs what the strategies need."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import nnts
from nnapi_ref.vectors import load_file
from nnts.formats.paths import CORPUS
from tests.test_installed import _run, installed  # noqa: F401 (the wheel in a fresh environment)

ROOT = Path(__file__).resolve().parents[1]
SELECTION = ["-k", "nnts_add_float32 or nnts_add_quant8_relu or nnts_mul_broadcast_float32", "--variants",
             "sync,burst"]


def env() -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NNTS_", "PYTEST_", "PYTHONPATH"))}
    return dict(clean, PYTHONDONTWRITEBYTECODE="1", PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                                                          os.environ.get("PATH", "")]))


def nnts_command(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnts", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env())


def test_init_makes_a_project_and_changes_none(tmp_path):
    done = nnts_command("init", "proj", "--name", "acme", "--shards", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    made = {str(p.relative_to(tmp_path / "proj")) for p in (tmp_path / "proj").rglob("*") if p.is_file()}
    assert made == {"acme/__init__.py", "acme/driver.py", "conftest.py", "tests/test_properties.py", "pyproject.toml",
                    ".github/workflows/nnts.yml", ".gitlab-ci.yml", "README.md"}
    assert "def make_device" in (tmp_path / "proj" / "acme" / "driver.py").read_text()
    assert "shard: [1, 2, 3]" in (tmp_path / "proj" / ".github" / "workflows" / "nnts.yml").read_text()
    assert "parallel: 3" in (tmp_path / "proj" / ".gitlab-ci.yml").read_text()
    again = nnts_command("init", "proj", "--name", "acme", cwd=tmp_path)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "exists; nothing written" in again.stderr
    bad = nnts_command("init", "x", "--name", "not-a-name", cwd=tmp_path)
    assert bad.returncode == 2 and "not a usable Python package name" in bad.stderr and not (tmp_path / "x").exists()


def ci_commands(project: Path) -> tuple[list[str], str, list[str]]:
    """The shard and merge commands of both CI files, their shard variables replaced by K."""
    github = (project / ".github" / "workflows" / "nnts.yml").read_text()
    gitlab = (project / ".gitlab-ci.yml").read_text()
    shards = len(re.search(r"shard: \[(.*)\]", github).group(1).split(","))
    gh_test = re.search(r"run: (nnts test .*)", github).group(1)
    gl_test = re.search(r"- (nnts test .*)", gitlab).group(1)
    merge = re.search(r"run: (nnts report merge .*)", github).group(1)
    assert re.search(r"- (nnts report merge .*)", gitlab).group(1) == merge
    return ([gh_test.replace("${{ matrix.shard }}", str(k)) for k in range(1, shards + 1)], merge,
            [gl_test.replace("$CI_NODE_INDEX", str(k)) for k in range(1, shards + 1)])


def test_the_ci_shards_merged_give_the_unsharded_totals(tmp_path):
    assert nnts_command("init", "proj", "--name", "acme", "--shards", "2", cwd=tmp_path).returncode == 0
    project = tmp_path / "proj"
    github, merge, gitlab = ci_commands(project)
    assert github == gitlab  # one command on both, the shard variable aside
    shell = dict(env(), DRIVER="acme.driver:make_device")
    extra = " ".join(f"'{a}'" for a in SELECTION) + " -n 0 --no-shared-vectors -q"
    for command in github:  # each CI machine's command, one after the other here
        done = subprocess.run(f"{command.replace('-n auto', '')} {extra}", shell=True, cwd=project, env=shell,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    done = subprocess.run(merge, shell=True, cwd=project, env=shell, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    whole = subprocess.run(f"nnts test --driver \"$DRIVER\" --report out/whole.json {extra}", shell=True, cwd=project,
                           env=shell, capture_output=True, text=True, timeout=600)
    assert whole.returncode in (0, 1), whole.stdout[-2000:]
    merged = json.loads((project / "out" / "conformance.json").read_text())
    unsharded = json.loads((project / "out" / "whole.json").read_text())
    assert merged["totals"] == unsharded["totals"] and merged["pytest"] == unsharded["pytest"]
    assert unsharded["totals"]["passed"] > 0 and unsharded["totals"]["unsupported"] > 0  # ADD float32 only
    assert (project / "out" / "conformance.html").is_file()


def test_the_generated_property_test_passes_on_the_template_driver(tmp_path):
    pytest.importorskip("hypothesis", reason="needs hypothesis (pip install 'nnts[all]')")
    assert nnts_command("init", "proj", "--name", "acme", cwd=tmp_path).returncode == 0
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
                          cwd=tmp_path / "proj", capture_output=True, text=True, timeout=600, env=env())
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:]


def test_compare_runs_a_model_on_a_driver_against_the_reference():
    test = next(t for f in sorted(CORPUS.glob("*.json")) for t in load_file(f) if t.name == "nnts_add_quant8_relu")
    assert nnts.compare(test, "reference").status == "passed"
    found = nnts.compare(test.model, "nnapi_ref.drivers.broken:wrong_add_quant8", inputs=test.inputs)
    assert not found and found.status == "failed" and "worst at [0]" in found.message
    with pytest.raises(AssertionError, match=r"operations: ADD \(fused activation RELU\)"):
        found.check()
    sys.path.insert(0, str(ROOT / "examples" / "python_driver"))
    try:
        skipped = nnts.compare(test, "toy_driver:make_device")
    finally:
        sys.path.remove(str(ROOT / "examples" / "python_driver"))
    assert skipped and skipped.status == "skipped" and "ADD on TENSOR_QUANT8_ASYMM" in skipped.message


def test_the_all_extra_installs_what_the_strategies_need():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("hypothesis") for dep in extras["all"])


def test_docs_reach_every_document_the_readme_links():
    linked = set(re.findall(r"\]\((?:docs/(?:conformance/)?|examples/)([\w.-]+?)(?:\.md|/)?\)",
                            (ROOT / "README.md").read_text()))
    listed = nnts_command("docs", cwd=ROOT)
    assert listed.returncode == 0
    names = {line.split()[0] for line in listed.stdout.splitlines() if line and not line.startswith("`")}
    assert {n.replace("_", "-") for n in linked} <= names, (linked, names)
    shown = nnts_command("docs", "remote-protocol", cwd=ROOT)
    assert shown.returncode == 0 and shown.stdout == (ROOT / "docs" / "remote-protocol.md").read_text()


def test_init_and_docs_from_the_wheel(installed, tmp_path):  # noqa: F811
    bin_, vendor = installed
    status, out = _run([str(bin_ / "nnts"), "docs"], cwd=vendor)
    assert status == 0 and "site-packages" in out and "remote-protocol" in out and "python-driver" in out, out
    status, out = _run([str(bin_ / "nnts"), "docs", "test-vectors"], cwd=vendor)
    assert status == 0 and out.startswith("# The test-vector format"), out[:300]
    status, out = _run([str(bin_ / "nnts"), "init", str(tmp_path / "team"), "--name", "team"], cwd=vendor)
    assert status == 0 and "def make_device" in (tmp_path / "team" / "team" / "driver.py").read_text(), out
