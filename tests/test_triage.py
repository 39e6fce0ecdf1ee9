"""A driver team's triage loop through the installed ``nnts`` command, run from an empty folder:
known failures listed by the ids the summary prints (every kind of test), stale and passing entries
named, pytest's conventions (argument order, ``--lf``), and the header. The driver computes
float32 in float16, which fails random operations, sequences and generated tests alike."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

NNTS = str(Path(sys.executable).parent / "nnts")
DRIVER = "nnapi_ref.drivers.broken:float16_arithmetic"
COMMON = ("-p", "no:randomly", "--no-shared-vectors", "--random-ops", "30", "--random-graphs", "4",
          "--driver", DRIVER, "-rfxX")


def nnts(folder: Path, *args: str, timeout: int = 600) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NNTS_", "PYTEST_"))}
    done = subprocess.run([NNTS, *args], check=False, cwd=folder, capture_output=True, text=True, timeout=timeout,
                          env=dict(env, PYTHONDONTWRITEBYTECODE="1"))
    return done.returncode, done.stdout + done.stderr


def summary_ids(output: str, word: str = "FAILED") -> list[str]:
    return re.findall(rf"^{word} (\S+)", output, re.MULTILINE)


def counts(output: str) -> dict[str, int]:
    line = [ln for ln in output.splitlines() if re.search(r"\d+ (passed|failed|xfailed)", ln)][-1]
    return {outcome: int(n) for n, outcome in re.findall(r"(\d+) (\w+)", line)}


SELECTION = "test_random_operation or test_sequences or (test_generated and nnts_add_float32)"


def test_expected_failures_list_every_kind_of_test_by_the_id_the_summary_prints(tmp_path):
    # the ids from a run in one process, listed for a run under xdist (whose workers match them)
    code, out = nnts(tmp_path, "test", "-k", SELECTION, *COMMON)
    failed = summary_ids(out)
    assert code == 1 and failed, out[-3000:]
    assert all(i.startswith(("cts/", "vts/")) and "site-packages" not in i for i in failed), failed
    kinds = {i.split("::")[0] for i in failed}
    assert {"cts/test_random_operation.py", "cts/test_sequences.py", "vts/test_sequences.py"} <= kinds, kinds
    # every failure listed: as printed, the VTS sequences by a glob with its reason, a generated
    # test's variants by the variant id; one entry stale, one for a test that passes
    random_ops = [i for i in failed if "test_random_operation" in i]
    generated = [i for i in failed if "test_generated" in i]
    passing = "cts/test_random_operation.py::test_random_operation[ADD-seed0]"
    assert passing not in failed
    listed = tmp_path / "known.txt"
    listed.write_text("\n".join(
        [f"{i}   # float16 accumulation" for i in random_ops + generated]
        + [i for i in failed if i.startswith("cts/test_sequences.py")]
        + ["vts/test_sequences.py::*   # sequences compare float32 exactly",
           "cts/test_sequences.py::test_no_such_test   # renamed long ago",
           f"{passing}   # fixed since"]) + "\n")
    code, out = nnts(tmp_path, "test", "-n", "2", "-k", SELECTION, *COMMON, "--expected-failures", str(listed))
    assert code == 0, out[-3000:]
    assert counts(out).get("failed", 0) == 0 and counts(out)["xfailed"] == len(failed), out[-3000:]
    assert sorted(summary_ids(out, "XFAIL")) == sorted(failed)
    assert re.search(r"XFAIL vts/test_sequences.py::\S+ - sequences compare float32 exactly", out)
    stale = out[out.index("match no test of this run"):]
    assert "known.txt:" in stale and "cts/test_sequences.py::test_no_such_test  # renamed long ago" in stale
    assert summary_ids(out, "XPASS") == [passing]
    # strict: the entry that passes fails the run
    code, out = nnts(tmp_path, "test", "-k", SELECTION, *COMMON, "--expected-failures", str(listed),
                     "--strict-expected-failures")
    assert code == 1 and summary_ids(out) == [passing], out[-3000:]


def test_the_summary_id_selects_and_deselects(tmp_path):
    one = "cts/test_random_operation.py::test_random_operation[ADD-seed0]"
    code, out = nnts(tmp_path, "test", "-k", one, *COMMON, "-q")
    assert code == 0 and counts(out)["passed"] == 1, out[-2000:]
    code, out = nnts(tmp_path, "test", *COMMON, "-q", one)  # as a positional argument too
    assert code == 0 and counts(out)["passed"] == 1, out[-2000:]
    code, out = nnts(tmp_path, "test", "-k", "test_random_operation and (seed0] or seed1])", "--deselect", one,
                     *COMMON, "-q")
    assert code == 0 and counts(out)["passed"] == 1, out[-2000:]


def test_any_argument_order_last_failed_and_a_header_that_says_where_ids_are_from(tmp_path):
    code, out = nnts(tmp_path, "test", "-n", "2", "-k", "test_random_operation", *COMMON, "cts")
    failed = summary_ids(out)
    assert code == 1 and failed, out[-3000:]
    assert "dev/null" not in out and re.search(r"^rootdir: .*test ids cts/", out, re.MULTILINE), out[:2000]
    assert (tmp_path / ".pytest_cache").is_dir()  # where pytest keeps it, run here
    code, out = nnts(tmp_path, "test", "--lf", "-k", "test_random_operation", *COMMON, "cts")
    assert code == 1 and sorted(summary_ids(out)) == sorted(failed) and counts(out).get("passed", 0) == 0, out[-3000:]
    # "-k vts": a value, not the suite; the suite named after it is
    code, out = nnts(tmp_path, "test", "--co", "-q", "-k", "vts", "--no-shared-vectors", "vts")
    assert code == 0 and re.search(r"^vts/test_basic.py::", out, re.MULTILINE) and "cts/" not in out, out[-2000:]


def test_a_dash_writes_to_the_standard_output_and_help_names_no_source_file(tmp_path):
    model = next(Path(__file__).resolve().parents[1].glob("cts/corpus/*.json"))
    code, out = nnts(tmp_path, "graph", str(model), "--dot", "-")
    assert code == 0 and out.startswith("digraph") and not list(tmp_path.iterdir()), out[-2000:]
    code, out = nnts(tmp_path, "vectors", "run", str(model), "-j", "1", "-q", "--json", "-")
    assert code == 0 and '"passed":' in out and not list(tmp_path.iterdir()), out[-2000:]
    for command in ("bench", "gate", "stress", "vectors run", "graph"):
        code, out = nnts(tmp_path, *command.split(), "--help")
        assert code == 0 and not re.search(r"\w+/\w+\.py\b", out), (command, out)
    code, out = nnts(tmp_path, "test", "--help-pytest")
    assert code == 0 and not re.search(r"\(\w+/\w+\.py\)", out[out.index("NNAPI driver conformance"):]), out[-3000:]
    code, out = nnts(tmp_path, "--version")
    assert code == 0 and re.fullmatch(r"nnts \d+\.\d+\.\d+\S*\n", out), out


def test_nnts_trace_writes_the_whole_run_of_both_processes_as_the_trace_option_does(tmp_path):
    model = str(next(Path(__file__).resolve().parents[1].glob("cts/corpus/*.json")))
    code, out = nnts(tmp_path, "vectors", "run", model, "-q", "--isolate", "--trace", "option.json")
    assert code == 0, out
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NNTS_", "PYTEST_"))}
    done = subprocess.run([NNTS, "vectors", "run", model, "-q", "--isolate"], check=False, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env=dict(env, NNTS_TRACE="variable.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["option.json", "variable.json"]  # one file each

    def events(name):
        found = json.loads((tmp_path / name).read_text())
        return [e for e in (found["traceEvents"] if isinstance(found, dict) else found) if e["ph"] != "M"]  # spans
    option, variable = events("option.json"), events("variable.json")
    assert len({e["pid"] for e in variable}) == 2 and len(variable) == len(option) > 100, (len(variable), len(option))
    assert sorted({e["name"] for e in variable}) == sorted({e["name"] for e in option})
