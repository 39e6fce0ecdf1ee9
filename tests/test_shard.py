"""``--shard K/N``: the N shards of a run are the whole run, each test in exactly one of them, about
1/N each; in the pytest plugin and in ``nnts vectors run``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nnts import cli
from nnts.runners import shard

ROOT = Path(__file__).resolve().parents[1]


def test_parse_accepts_k_of_n_and_names_what_is_wrong():
    assert shard.parse("2/3") == (2, 3) and shard.parse(None) is None
    for bad in ("0/3", "4/3", "3", "a/b", "1/0", "-1/2", ""):
        with pytest.raises(ValueError, match="expected K/N"):
            shard.parse(bad)


def test_shards_partition_names_evenly():
    names = [f"CONV_2D-TENSOR_FLOAT32-conv_{i}-sync" for i in range(6000)]
    parts = [[n for n in names if shard.selects((k, 3), n)] for k in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(names)           # each name in exactly one shard
    assert all(abs(len(p) - 2000) < 150 for p in parts), [len(p) for p in parts]


def _collected(*args) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "cts/test_generated.py", "--collect-only", "-q",
                           "-p", "no:randomly", "--no-shared-vectors", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_plugin_shards_are_the_whole_run_without_overlap():
    whole = _collected()
    parts = [_collected("--shard", f"{k}/3") for k in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(whole) and len(whole) > 100
    assert all(len(p) > len(whole) / 4 for p in parts), [len(p) for p in parts]


def test_plugin_refuses_a_bad_shard_in_one_line():
    done = subprocess.run([sys.executable, "-m", "pytest", "cts/test_generated.py", "--collect-only", "-q",
                           "--shard", "4/3"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stdout + done.stderr
    assert "--shard '4/3': expected K/N" in done.stderr


def test_vectors_run_shards_are_the_whole_run(tmp_path, capsys):
    corpus = str(ROOT / "cts" / "corpus" / "activations.json")

    def names(*args) -> list[str]:
        out = tmp_path / "r.json"
        assert cli.main(["vectors", "run", corpus, "-j", "1", "-q", "--json", str(out), *args]) == 0
        return [r["name"] for r in json.loads(out.read_text())["results"]]

    whole = names()
    parts = [names("--shard", f"{k}/3") for k in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(whole) and all(parts)
    with pytest.raises(SystemExit) as e:
        cli.main(["vectors", "run", corpus, "--shard", "3"])
    assert e.value.code == 2 and "expected K/N" in capsys.readouterr().err


def test_three_merged_shards_give_the_unsharded_verdicts(tmp_path):
    """The shards' --report JSON, merged by ``nnts report merge``, holds every test of the
    unsharded run with the same verdict, and the same totals."""
    selection = ["cts/test_generated.py", "vts/test_validate_request.py", "-k", "(ADD or RELU) and TENSOR_FLOAT32",
                 "-q", "-p", "no:randomly", "-p", "no:xdist", "--no-shared-vectors"]

    def run(*args):
        done = subprocess.run([sys.executable, "-m", "pytest", *selection, *map(str, args)], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    run("--report", tmp_path / "whole.json")
    for k in (1, 2, 3):
        run("--shard", f"{k}/3", "--report", tmp_path / f"shard{k}.json")
    assert cli.main(["report", "merge", *(str(tmp_path / f"shard{k}.json") for k in (1, 2, 3)),
                     "--json", str(tmp_path / "merged.json")]) == 0
    whole, merged = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("whole", "merged"))
    verdicts = {t["id"]: t["status"] for t in whole["tests"]}
    assert {t["id"]: t["status"] for t in merged["tests"]} == verdicts and len(verdicts) > 50
    assert merged["totals"] == whole["totals"]
