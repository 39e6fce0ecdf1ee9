"""``nnts vectors import-aosp``: the shared corpus (``../shared/vectors/aosp``) was made from the two
AOSP snapshots in ``../shared/aosp``; importing them with their own generator gives the same test
models, which pass on the reference. A spec the generator fails on is one problem, not the end."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nnts import cli

ROOT = Path(__file__).resolve().parents[1]
AOSP = ROOT.parent / "shared" / "aosp"
VECTORS = ROOT.parent / "shared" / "vectors" / "aosp"
pytestmark = pytest.mark.skipif(not (AOSP.is_dir() and VECTORS.is_dir()),
                                reason="needs ../shared/aosp and ../shared/vectors (the AOSP snapshots and the corpus made from them)")


def nnts(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnts", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


@pytest.mark.parametrize("snapshot, version", [("frameworks_ml", "V1_0"), ("modules", "AIDL_V3")])
def test_import_reproduces_the_shared_corpus_and_passes_on_the_reference(tmp_path, snapshot, version):
    out = tmp_path / "imported"
    done = nnts("vectors", "import-aosp", AOSP / snapshot, "--out", "imported", "--versions", version, "--check", VECTORS,
                cwd=tmp_path)  # a relative --out: the generator's process runs elsewhere
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"compared, 0 differ" in done.stdout and "test models of" in done.stdout
    assert len(list((out / version).glob("*.json"))) >= len(list((VECTORS / version).glob("*.json"))) > 0
    # Every model the generator makes, the shared corpus's part and the rest, passes on the reference.
    done = nnts("vectors", "run", out, "-j", "2", "-q")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " 0 failed" in done.stdout


def test_a_spec_the_generator_fails_on_is_a_problem_not_the_end(tmp_path, capsys):
    checkout = tmp_path / "ml" / "nn"
    shutil.copytree(AOSP / "frameworks_ml" / "nn" / "tools", checkout / "tools")
    specs = checkout / "runtime" / "test" / "specs" / "V1_0"
    specs.mkdir(parents=True)
    shutil.copy(AOSP / "frameworks_ml" / "nn" / "runtime" / "test" / "specs" / "V1_0" / "add.mod.py", specs)
    (specs / "broken.mod.py").write_text("model = Model()\nraise ValueError('a spec with a mistake')\n")
    status = cli.main(["vectors", "import-aosp", str(tmp_path / "ml"), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert status == 1 and "PROBLEM V1_0/broken.mod.py: ValueError: a spec with a mistake" in out
    assert (tmp_path / "out" / "V1_0" / "add.json").is_file() and not (tmp_path / "out" / "V1_0" / "broken.json").exists()


def test_a_folder_without_a_generator_is_one_line(tmp_path, capsys):
    assert cli.main(["vectors", "import-aosp", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no NNAPI test generator" in err
