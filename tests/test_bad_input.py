"""Every entry point survives bad input and loses nothing it computed. Each test is one
example of the issue: a usage line and exit 2 instead of a traceback, an error row instead of a
lost run, a CRASH or HANG row instead of a dead run, NnapiError(BAD_DATA) from the API."""
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import vectors
from nnapi_ref.errors import NnapiError
from nnapi_ref.runtime.model import Model, OperandType
from nnapi_ref.types import OperandCode as T, ResultCode
from nnts import cli

ROOT = Path(__file__).resolve().parents[1]
ARITHMETIC = ROOT / "cts" / "corpus" / "arithmetic.json"
FAULTY = "nnapi_ref.drivers.faulty:"


def usage_error(capsys, argv, command: str, *fragments) -> str:
    """Run ``nnts argv``: exit 2, one line on stderr naming the command and ``fragments``."""
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"nnts {command}: "), err
    for fragment in fragments:
        assert fragment in err, err
    return err


def deep_json(path: Path, depth: int = 200_000) -> Path:
    path.write_text("[" * depth + "]" * depth)
    return path


def wrong_types(path: Path) -> Path:
    path.write_text(json.dumps({"format": vectors.FORMAT, "tests": [{"name": "x", "main": "a string"}]}))
    return path


# -- the command line's own arguments, checked before the run --------------------------------------

@pytest.mark.parametrize("argv, command, fragments", [
    (["vectors", "run", "X", "--json", "{tmp}"], "vectors run", ["--json", "is a folder"]),
    (["vectors", "run", "X", "--junitxml", "/nonexistent/x.xml"], "vectors run", ["--junitxml", "does not exist"]),
    (["vectors", "run", "X", "--filter", "("], "vectors run", ["--filter", "not a regular expression"]),
    (["vectors", "run", "X", "--expected-failures", "{tmp}/missing.txt"], "vectors run", ["--expected-failures", "no such"]),
    (["vectors", "run", "X", "--expected-failures", "{tmp}/binary"], "vectors run", ["--expected-failures", "not a text"]),
    (["vectors", "run", "X", "--call-timeout", "-5"], "vectors run", ["--call-timeout"]),
    (["vectors", "run", "X", "--call-timeout", "nan"], "vectors run", ["--call-timeout"]),
    (["vectors", "run", "X", "--driver", ""], "vectors run", ["--driver"]),
    (["vectors", "run", "X", "--cache-dir", "{tmp}/binary"], "vectors run", ["--cache-dir", "not a folder"]),
    (["fuzz", "--harness", "model", "--max-time", "-1"], "fuzz", ["--max-time"]),
    (["fuzz", "--harness", "model", "--corpus", "{tmp}/binary"], "fuzz", ["--corpus", "not a folder"]),
    (["fuzz", "--harness", "model", "--artifacts", "{tmp}/binary"], "fuzz", ["--artifacts", "not a folder"]),
    (["fuzz", "--harness", "model", "--vectors", "{tmp}/binary"], "fuzz", ["--vectors", "binary"]),
    (["fuzz", "--harness", "model", "--vectors", "{tmp}/deep.json"], "fuzz", ["deep.json", "nested too deeply"]),
    (["bench", "--json", "{tmp}"], "bench", ["--json", "is a folder"]),
    (["bench", "--include", "{tmp}/missing.json"], "bench", ["--include", "no such file"]),
    (["bench", "--max-time", "-1"], "bench", ["--max-time"]),
    (["stress", "--junitxml", "/nonexistent/x.xml"], "stress", ["--junitxml", "does not exist"]),
    (["gate", "{tmp}/missing.json"], "gate", ["results", "no such file"]),
    (["serve", "reference", "--socket", "/nonexistent/s.sock"], "serve", ["--socket", "does not exist"]),
    (["serve", "reference", "--socket", "/tmp/" + "s" * 120], "serve", ["--socket", "limit"]),
])
def test_bad_arguments_are_one_usage_line(tmp_path, capsys, argv, command, fragments):
    (tmp_path / "binary").write_bytes(bytes(range(256)) * 4)
    deep_json(tmp_path / "deep.json")
    argv = [str(ARITHMETIC) if a == "X" else a.replace("{tmp}", str(tmp_path)) for a in argv]
    usage_error(capsys, argv, command, *fragments)


def test_serve_never_replaces_a_regular_file(tmp_path, capsys):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    usage_error(capsys, ["serve", "reference", "--socket", str(precious)], "serve", "not a socket")
    assert precious.read_text() == "keep me"


def test_serve_replaces_an_earlier_socket(tmp_path):
    from nnapi_ref.remote.server import check_socket_path
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
    check_socket_path(str(path))  # a socket left behind: allowed (serve_socket replaces it)


def test_a_bad_known_failures_file_is_found_before_the_run(tmp_path):
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "nnts", "vectors", "run", str(ARITHMETIC), "-v", "-j", "1",
                           "--expected-failures", str(tmp_path / "none.txt"), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith("nnts vectors run: ") and "none.txt" in done.stderr, done.stderr
    assert done.stdout == "" and not out.exists()  # no test ran (-v names each one that does)


def test_ops_into_a_closed_pipe_ends_quietly():
    done = subprocess.run(f"{sys.executable} -m nnts ops | head -1", shell=True, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.count("\n") == 1
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


# -- test-vector files ------------------------------------------------------------------------------

def test_deep_nesting_and_wrong_types_are_format_errors_naming_the_file(tmp_path):
    for path, why in ((deep_json(tmp_path / "deep.json"), "nested too deeply"),
                      (wrong_types(tmp_path / "wrong.json"), "malformed subgraph")):
        with pytest.raises(vectors.FormatError) as e:
            vectors.load_file(path)
        assert str(path) in str(e.value) and why in str(e.value)


def test_one_bad_file_among_good_ones_is_one_error_row(tmp_path):
    folder = tmp_path / "v"
    folder.mkdir()
    (folder / "good.json").write_text(ARITHMETIC.read_text())
    deep_json(folder / "deep.json")
    wrong_types(folder / "wrong.json")
    out, junit = tmp_path / "r.json", tmp_path / "r.xml"
    code = cli.main(["vectors", "run", str(folder), "-j", "2", "-q", "--json", str(out), "--junitxml", str(junit)])
    results = json.loads(out.read_text())
    assert code == 1
    errors = [r for r in results["results"] if r["status"] == "error"]
    assert sorted(r["name"] for r in errors) == ["deep.json", "wrong.json"]
    good = len(vectors.load_file(ARITHMETIC))
    assert results["passed"] == good
    assert len(list(ET.parse(junit).getroot().iter("testcase"))) == good + 2


def test_pytest_vectors_with_a_bad_file_runs_the_good_ones(tmp_path):
    folder = tmp_path / "v"
    folder.mkdir()
    (folder / "good.json").write_text(json.dumps({"format": vectors.FORMAT, "tests": [
        vectors.test_to_json(vectors.load_file(ARITHMETIC)[0])]}))
    deep_json(folder / "deep.json")
    name = vectors.load_file(ARITHMETIC)[0].name
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "cts/test_generated.py", "--vectors", str(folder), "--no-shared-vectors",
                           "-k", f"{name} or vectors", "--variants", "sync"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 failed" in done.stdout and "passed" in done.stdout, done.stdout[-3000:]
    assert "deep.json" in done.stdout and "nested too deeply" in done.stdout


def test_pytest_vectors_with_only_a_bad_file_selected_is_one_failure(tmp_path):
    """The bad file's test the first (here the only) one run: the run's description, taken from
    the first test's setup, must not ask it for fixtures it does not have (INTERNALERROR)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "cts/test_generated.py", "--vectors", str(deep_json(tmp_path / "deep.json")),
                           "--no-shared-vectors", "-k", "vectors"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "INTERNALERROR" not in done.stdout + done.stderr, done.stdout[-3000:]
    assert "1 failed" in done.stdout and "nested too deeply" in done.stdout, done.stdout[-3000:]


# -- drivers that crash or hang in process ------------------------------------------------------------

@pytest.mark.parametrize("fault, status, extra", [("aborts_on_mul", "crashed", []),
                                                  ("hangs_on_mul", "hung", ["--call-timeout", "3"])])
def test_an_in_process_driver_that_dies_costs_only_its_tests(tmp_path, fault, status, extra):
    out = tmp_path / "r.json"
    code = cli.main(["vectors", "run", str(ARITHMETIC), "-j", "2", "-q", "--driver", FAULTY + fault,
                     "--json", str(out)] + extra)
    results = json.loads(out.read_text())["results"]
    assert code == 1
    assert len(results) == len(vectors.load_file(ARITHMETIC))
    for r in results:  # every test that executes a MUL is the one row of its death; every other passes
        uses_mul = "mul" in r["name"]
        assert r["status"] == (status if uses_mul else "passed"), r
        if uses_mul:
            assert {"crashed": "CRASH", "hung": "HANG"}[status] in r["message"]
    if status == "crashed":
        assert all("SIGABRT" in r["message"] for r in results if r["status"] == "crashed")


def test_ctrl_c_writes_the_results_so_far_and_exits_130(tmp_path, monkeypatch):
    import nnts.runners.contained

    def interrupted(run_file, worker_state, job_args, files, jobs, report, budget):
        report([{"name": "done_before", "source": "f", "status": "passed", "message": ""}])
        raise KeyboardInterrupt
    monkeypatch.setattr(nnts.runners.contained, "run_contained", interrupted)
    out, junit = tmp_path / "r.json", tmp_path / "r.xml"
    code = cli.main(["vectors", "run", str(ARITHMETIC), "--json", str(out), "--junitxml", str(junit)])
    assert code == 130
    results = json.loads(out.read_text())
    assert results["interrupted"] and [r["name"] for r in results["results"]] == ["done_before"]
    assert len(list(ET.parse(junit).getroot().iter("testcase"))) == 1


# -- nnts fuzz -----------------------------------------------------------------------------------------

def test_replay_of_an_artifact_with_a_broken_sidecar_or_no_harness(tmp_path, capsys):
    artifact = tmp_path / "noharness"
    artifact.write_bytes(b"xx")
    usage_error(capsys, ["fuzz", "--replay", str(artifact)], "fuzz", "give --harness")
    artifact = tmp_path / "model-crash-1"
    artifact.write_bytes(b"xx")
    for sidecar in ("[1", "[1, 2]", '{"harness": 5}', '{"vectors": "notalist"}'):
        Path(str(artifact) + ".json").write_text(sidecar)
        usage_error(capsys, ["fuzz", "--replay", str(artifact)], "fuzz", "sidecar")


# -- nnts gate ------------------------------------------------------------------------------------------

def bench_row(**changes):
    row = {"model": "m.tflite", "sha256": "0", "status": "ok", "reason": None,
           "driver": {"latency_ms": {"p50": 1.0}}, "accuracy": {"snr_db": 40.0, "max_error_steps": 1}}
    row.update(changes)
    return row


@pytest.mark.parametrize("results, fragment", [
    ([], "a JSON list at the top"),
    ({"models": "m.tflite"}, "'models' is str"),
    ({"models": [{"model": "m.tflite"}]}, "no string 'status'"),
    ({"models": [bench_row(accuracy={"snr_db": "40"})]}, "snr_db is '40'"),
    ({"models": [bench_row(driver={"latency_ms": {"p50": "1.0"}})]}, "p50"),
])
def test_gate_results_of_wrong_types_are_one_line(tmp_path, capsys, results, fragment):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(results))
    usage_error(capsys, ["gate", str(path)], "gate", str(path), fragment)


def test_gate_deep_results_and_a_list_as_baseline(tmp_path, capsys):
    usage_error(capsys, ["gate", str(deep_json(tmp_path / "deep.json"))], "gate", "deep.json")
    good, baseline = tmp_path / "r.json", tmp_path / "b.json"
    good.write_text(json.dumps({"models": [bench_row()]}))
    baseline.write_text("[]")
    usage_error(capsys, ["gate", str(good), "--baseline", str(baseline)], "gate", "--baseline", "list")


@pytest.mark.parametrize("row, fragment", [(bench_row(accuracy={"snr_db": math.nan}), "snr_db nan"),
                                           (bench_row(accuracy={"snr_db": 40.0, "top1_agreement": math.nan,
                                                                "top5_agreement": 1.0}), "top1_agreement nan")])
def test_gate_nan_never_passes(tmp_path, capsys, row, fragment):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"models": [row]}))  # json writes NaN, and reads it back
    assert cli.main(["gate", str(path)]) == 1
    assert fragment in capsys.readouterr().out


def test_gate_nan_median_is_a_regression(tmp_path, capsys):
    now, before = tmp_path / "r.json", tmp_path / "b.json"
    now.write_text(json.dumps({"models": [bench_row(driver={"latency_ms": {"p50": math.nan}})]}))
    before.write_text(json.dumps({"models": [bench_row()]}))
    assert cli.main(["gate", str(now), "--baseline", str(before)]) == 1
    assert "latency: median nan" in capsys.readouterr().out


@pytest.mark.parametrize("toml, fragment", [("[accuracy]\nsnr_db_min = nan\n", "snr_db_min"),
                                            ("[accuracy]\nsnr_db_min = '20'\n", "snr_db_min"),
                                            ('[models]\n"x*" = 3\n', "not a table"),
                                            ("[accuracy\n", "not a TOML file")])
def test_gate_thresholds_that_would_switch_a_check_off(tmp_path, capsys, toml, fragment):
    results, thresholds = tmp_path / "r.json", tmp_path / "t.toml"
    results.write_text(json.dumps({"models": [bench_row()]}))
    thresholds.write_text(toml)
    usage_error(capsys, ["gate", str(results), "--thresholds", str(thresholds)], "gate", fragment)


# -- the NDK API ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dimensions", [[math.nan], "abc", [None], 5, ["1"]])
def test_operand_dimensions_that_are_not_integers_are_bad_data(dimensions):
    for build in (lambda: OperandType(T.TENSOR_FLOAT32, dimensions),
                  lambda: Model().add_operand(T.TENSOR_FLOAT32, dimensions)):
        with pytest.raises(NnapiError) as e:
            build()
        assert e.value.code == ResultCode.BAD_DATA


def test_operand_dimensions_past_uint32_and_a_string_scale_are_bad_data():
    with pytest.raises(NnapiError) as e:
        Model().add_operand(OperandType(T.TENSOR_FLOAT32, [2 ** 32]))
    assert e.value.code == ResultCode.BAD_DATA
    assert Model().add_operand(OperandType(T.TENSOR_BOOL8, [2 ** 32 - 1])) == 0  # 4 GiB less one byte: the most
    with pytest.raises(NnapiError) as e:  # the NDK's addOperand: a size past uint32_t (here 16 GiB) is BAD_DATA
        Model().add_operand(OperandType(T.TENSOR_FLOAT32, [2 ** 32 - 1]))
    assert e.value.code == ResultCode.BAD_DATA and "beyond NNAPI's uint32_t sizes" in e.value.message
    with pytest.raises(NnapiError) as e:
        OperandType(T.TENSOR_QUANT8_ASYMM, [1], "abc")
    assert e.value.code == ResultCode.BAD_DATA


@pytest.mark.parametrize("code, scale", [(T.TENSOR_INT32, 1e300), (T.TENSOR_QUANT16_ASYMM, 1e300),
                                         (T.TENSOR_QUANT8_ASYMM, -1e39), (T.TENSOR_INT32, math.inf)])
def test_a_scale_no_c_float_holds_is_bad_data(code, scale):
    """The NDK's scale is a C float: 1e300 would reach a driver as inf."""
    with pytest.raises(NnapiError) as e:
        Model().add_operand(code, [1], scale)
    assert e.value.code == ResultCode.BAD_DATA and "float32" in str(e.value)
    assert Model().add_operand(code, [1], float(np.finfo(np.float32).max)) == 0


# -- driver strings -------------------------------------------------------------------------------------

def test_a_factory_that_raises_and_an_unparsable_remote_command_are_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "badfactory.py").write_text("def make():\n    raise RuntimeError('factory broke')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for driver, fragment in (("badfactory:make", "make() raised RuntimeError: factory broke"),
                             ('remote:"unbalanced', "does not parse")):
        assert cli.main(["devices", "--driver", driver]) == 2
        err = capsys.readouterr().err
        assert err.startswith("nnts: ") and err.count("\n") == 1 and fragment in err, err


def test_under_xdist_a_worker_killed_by_an_in_process_driver_is_a_crash_verdict(tmp_path):
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                           "cts/test_generated.py", "--no-shared-vectors", "--driver", FAULTY + "aborts_on_mul",
                           "-k", "nnts_mul_broadcast_float32 or nnts_add_float32", "--variants", "sync", "--report", str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "CRASH: the pytest-xdist worker" in done.stdout, done.stdout[-3000:]
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    assert failed and all("nnts_mul_broadcast_float32" in line for line in failed), done.stdout[-3000:]
    assert " passed" in done.stdout.splitlines()[-1]  # the ADD tests ran on the restarted workers
    tests = json.loads(report.read_text())["tests"]
    crashed = [t for t in tests if t["status"] == "crashed"]
    assert crashed and all("nnts_mul_broadcast_float32" in t["id"] for t in crashed)
    for t in crashed:  # named like every other row: its operation, operand type and part
        assert (t["op"], t["dtype"], t["part"]) == ("MUL", "TENSOR_FLOAT32", "CTS generated"), t
    assert {(t["op"], t["dtype"]) for t in tests if t["status"] == "passed"} == {("ADD", "TENSOR_FLOAT32")}


@pytest.mark.parametrize("content", ["[1", "[" * 100000, '{"schema": 5}', '{"results": 1, "passed": 1}', "[1, 2]",
                                     '{"schema": "nnts-conformance/1", "driver": "d"}',  # fuzz: KeyError 'totals'
                                     '{"results": [1], "passed": 1}'])
def test_bench_include_files_are_checked_before_the_run(tmp_path, capsys, content):
    bad = tmp_path / "include.json"
    bad.write_text(content)
    usage_error(capsys, ["bench", "--include", str(bad)], "bench", "--include", "include.json")


def test_results_files_are_written_atomically(tmp_path, monkeypatch):
    from nnts.formats import files
    target = tmp_path / "r.json"
    target.write_text("old, complete")

    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, fd, *args, **kwargs):
            self.file = real_fdopen(fd, *args, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, text):
            self.file.write(text[:2])
            raise OSError("disk full")
    monkeypatch.setattr(files.os, "fdopen", FullDisk)
    with pytest.raises(OSError):
        files.write_atomic(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old, complete"  # never half a file
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # and no temporary left behind


@pytest.mark.parametrize("option, value, fragment", [("--expected-failures", "{tmp}/missing.txt", "no such file"),
                                                     ("--expected-failures", "{tmp}/binary", "not a text file"),
                                                     ("--call-timeout", "-5", "--call-timeout"),
                                                     ("--report", "{tmp}", "a folder")])
def test_pytest_options_naming_bad_files_are_usage_errors(tmp_path, option, value, fragment):
    (tmp_path / "binary").write_bytes(bytes(range(256)))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "cts/test_generated.py", "--no-shared-vectors", "-k", "nothing_matches_this",
                           option, value.replace("{tmp}", str(tmp_path))],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]  # pytest's usage error
    assert fragment in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("dimensions", ["12", [1, "2"], [True], [2.5]])
def test_test_vector_dimensions_must_be_a_list_of_integers(tmp_path, dimensions):
    doc = json.loads(ARITHMETIC.read_text())
    doc["tests"] = doc["tests"][:1]
    doc["tests"][0]["main"]["operands"][0]["dimensions"] = dimensions
    path = tmp_path / "v.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(vectors.FormatError, match="not a list of integers"):
        vectors.load_file(path)


def test_an_unreadable_subfolder_is_an_error_row_not_silence(tmp_path, monkeypatch):
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "a.json").write_text(ARITHMETIC.read_text())
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "b.json").write_text(ARITHMETIC.read_text())
    real_scandir = os.scandir

    def scandir(path="."):  # what chmod 0 does, also for root (who reads every folder)
        if not isinstance(path, int) and Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)
    monkeypatch.setattr(os, "scandir", scandir)
    files = list(vectors.find_files([tmp_path]))
    assert locked in files
    with pytest.raises(vectors.FormatError, match="locked"):
        vectors.load_file(locked)
    out = tmp_path / "r.json"
    assert cli.main(["vectors", "run", str(tmp_path), "-j", "1", "-q", "--json", str(out)]) == 1
    errors = [r for r in json.loads(out.read_text())["results"] if r["status"] == "error"]
    assert [r["name"] for r in errors] == ["locked"], errors


def test_gate_takes_a_null_accuracy_figure_as_absent(tmp_path, capsys):
    """gate harness finding: "top1_agreement": null compared with a float (TypeError)."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"models": [bench_row(accuracy={"snr_db": 40.0, "top1_agreement": None,
                                                               "max_error_steps": None})]}))
    assert cli.main(["gate", str(path)]) == 0, capsys.readouterr()


@pytest.mark.parametrize("name", ["tflite", "gate", "include", "sidecar"])
def test_the_input_format_harnesses_find_nothing_in_a_short_campaign(name, monkeypatch):
    import random

    from nnts.fuzz import harnesses, targets
    monkeypatch.setattr(harnesses, "FuzzedDataProvider", None)  # the plain provider: no atheris needed
    harness = targets.make(name)
    rng = random.Random(0)
    seeds = harness.seed_inputs()
    assert seeds
    for _ in range(300):
        harness(rng.choice(seeds) + bytes(rng.randrange(256) for _ in range(rng.randrange(64))))


def started_tests(folder: Path) -> list[str]:
    """The tests ``nnts vectors run``'s workers have started, from their progress files."""
    lines = [line for p in folder.glob("nnts-progress-*/*.jsonl") for line in p.read_text().splitlines()]
    return [json.loads(line)["name"] for line in lines if line.endswith("}") and '"kind": "start"' in line]


def test_ctrl_c_inside_a_file_keeps_its_completed_tests(tmp_path):
    """Ctrl-C while a worker is in the middle of a file: the tests of that file that completed are
    rows, the one running and the one not yet run are skipped rows saying so; JSON and JUnit written."""
    out, junit = tmp_path / "r.json", tmp_path / "r.xml"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    # A terminal's foreground job: SIGINT not ignored, even where this test's own process inherited
    # it ignored (started in the background by a script), which the run would inherit too.
    foreground = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                  "os.execv(sys.argv[1], sys.argv[1:])")
    run = subprocess.Popen([sys.executable, "-c", foreground, sys.executable, "-m", "nnts", "vectors", "run",
                            str(ARITHMETIC), "-j", "1", "-q", "--driver", FAULTY + "hangs_on_mul", "--json", str(out),
                            "--junitxml", str(junit)],
                           cwd=ROOT, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while "nnts_mul_broadcast_float32" not in started_tests(tmp_path):
            assert run.poll() is None and time.monotonic() < deadline, "the hanging test was never reached"
            time.sleep(0.2)
        os.killpg(run.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole process group
        err = run.communicate(timeout=120)[1]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 130, err
    assert "Traceback" not in err, err
    results = json.loads(out.read_text())
    rows = {r["name"]: r for r in results["results"]}
    assert results["interrupted"] and results["passed"] == 2
    assert rows["nnts_add_float32"]["status"] == rows["nnts_add_quant8_relu"]["status"] == "passed"
    assert rows["nnts_mul_broadcast_float32"]["status"] == "skipped"
    assert "interrupted (Ctrl-C) while this test ran" in rows["nnts_mul_broadcast_float32"]["message"]
    assert rows["nnts_add_then_mul_float32"]["status"] == "skipped"
    assert "not run" in rows["nnts_add_then_mul_float32"]["message"]
    assert len(list(ET.parse(junit).getroot().iter("testcase"))) == 4
    assert not list(tmp_path.glob("nnts-progress-*"))  # its temporary folder removed
