"""The MLTS stress set (mlts/stress.py, ``nnts stress``): every test ends SUCCESS on the reference,
and the faulty drivers of nnapi_ref/drivers/faulty.py are classified as what they are: a driver
that aborts in MUL as CRASH in every test (each executes a MUL), one that hangs in MUL as HANG
within the call budget, a leaking driver as FAILURE in the memory tests and only there, a driver
leaking a fence fd per fenced execution as FAILURE in the resource soak, a driver slowing down
under concurrency and one serializing its executions as FAILURE in the degradation test."""
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nnts import cli
from nnts.mlts import stress, stress_load

ROOT = Path(__file__).resolve().parents[1]
FAULTY = "nnapi_ref.drivers.faulty:"
SHORT_S = 1.0  # --duration of the timed tests here
HANG_BUDGET_S = 5.0  # --call-timeout where a hang is expected: a call that works meets it on a loaded machine


def verdicts(results):
    return {r.name: r.verdict for r in results}


def test_the_stress_set_ends_success_on_the_reference(tmp_path, capsys):
    out, junit = tmp_path / "stress.json", tmp_path / "stress.xml"
    code = cli.main(["stress", "--driver", "reference", "--duration", str(SHORT_S), "--json", str(out),
                     "--junitxml", str(junit)])
    printed = capsys.readouterr().out
    results = json.loads(out.read_text())
    assert {r["name"]: r["verdict"] for r in results} == {name: "SUCCESS" for name in stress.TESTS}, printed
    assert code == 0
    # Not a terminal: one progress line per test, then the summary.
    lines = printed.splitlines()
    assert len(lines) == len(stress.TESTS) + 1 and lines[-1].startswith(f"{len(stress.TESTS)} SUCCESS of")
    by_name = {r["name"]: r for r in results}
    assert by_name["repeated_load_unload"]["metrics"]["growth_mib"] <= stress.LOAD_UNLOAD_BUDGET_MIB
    assert by_name["memory_soak"]["metrics"]["growth_mib"] <= stress.SOAK_BUDGET_MIB
    load = by_name["degradation_under_load"]["metrics"]
    assert load["ratio"] >= stress_load.MIN_THROUGHPUT_RATIO and load["processes"] == stress_load.CONCURRENT_CLIENTS
    # SUCCESS already says most long executions overlapped; not all need to: one can lose the CPU
    # to other work long enough to look quiet (single quiet shares up to 0.58 under load).
    assert load["long_executions"] >= stress_load.PROBE_LONG, load
    assert len(load["latency_per_client_ms"]) == stress_load.CONCURRENT_CLIENTS and min(load["latency_per_client_ms"]) > 0
    assert by_name["client_killed_during_compilation"]["metrics"]["kills"] == stress.KILLS
    assert by_name["multi_process_random_kills"]["metrics"]["verified_executions"] > 0
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == (str(len(stress.TESTS)), "0")


def test_a_driver_that_aborts_in_mul_crashes_every_test(tmp_path, capsys):
    out = tmp_path / "stress.json"
    code = cli.main(["stress", "--driver", FAULTY + "aborts_on_mul", "--duration", str(SHORT_S), "--json", str(out)])
    results = json.loads(out.read_text())
    assert code == 1
    # random_graphs runs the suite's seeds: the first with a MUL is seed 27, past a short run's
    crashing = [name for name in stress.TESTS if name != "random_graphs"]
    assert {r["name"]: r["verdict"] for r in results if r["name"] in crashing} == {name: "CRASH" for name in crashing}
    for r in results:
        assert r["name"] == "random_graphs" or (r["message"].startswith("CRASH:") and "SIGABRT" in r["message"]), r
    crashed = sum(r["verdict"] == "CRASH" for r in results)  # random_graphs too, if it reached a MUL
    assert crashed >= len(crashing) and f"{crashed} CRASH" in capsys.readouterr().out.splitlines()[-1]
    [graphs] = stress.run_tests(FAULTY + "aborts_on_mul", ["random_graphs"], 300.0)
    assert graphs.verdict == "CRASH" and "SIGABRT" in graphs.message, graphs


def test_a_driver_that_hangs_in_mul_is_a_hang_within_the_call_budget():
    names = ["parallel_one_compilation", "client_killed_during_execution", "memory_soak"]
    results = stress.run_tests(FAULTY + "hangs_on_mul", names, SHORT_S, call_timeout=HANG_BUDGET_S)
    assert verdicts(results) == {name: "HANG" for name in names}
    for r in results:
        # memory_soak executes in a sync and a burst thread: whichever reaches the MUL first hangs.
        calls = ("execute_synchronously", "burst execute") if r.name == "memory_soak" else ("execute_synchronously",)
        assert "HANG:" in r.message and any(f"did not return from {c} within {HANG_BUDGET_S:g} s" in r.message
                                            for c in calls), r
        assert r.seconds < 40, r  # the budget, not the default 60 s


def test_a_leaking_driver_fails_the_memory_tests_and_only_those():
    names = ["repeated_load_unload", "memory_soak", "parallel_one_compilation", "memory_mapped_model"]
    results = stress.run_tests(FAULTY + "leaks", names, SHORT_S)
    assert verdicts(results) == {"repeated_load_unload": "FAILURE", "memory_soak": "FAILURE",
                                 "parallel_one_compilation": "SUCCESS", "memory_mapped_model": "SUCCESS"}
    for r in results[:2]:
        assert f"beyond the budget of {stress.LOAD_UNLOAD_BUDGET_MIB:g} MiB" in r.message, r
        assert r.metrics["growth_mib"] > r.metrics["budget_mib"]


def test_a_driver_slowing_down_under_concurrency_fails_the_degradation_test():
    """Its executions take turns (one lock) and pay for the others in flight: serialized, by count,
    whatever the load; its throughput collapses too, which a loaded machine can blur (one client
    alone slows down as much), so that is not what the verdict rests on here."""
    result, = stress.run_tests(FAULTY + "slows_down", ["degradation_under_load"], SHORT_S)
    assert result.verdict == "FAILURE" and "the driver serializes executions" in result.message, result.message
    assert result.metrics["single_per_s"] > 0 and result.metrics["concurrent_per_s"] > 0


def test_a_driver_serializing_its_executions_fails_the_degradation_test_by_count_not_by_time():
    """Its throughput may hold up (its executions are short, its backoff rarely waited out), so
    what catches it is that no client's short execution ends while another's long one runs."""
    result, = stress.run_tests(FAULTY + "serializes_executions", ["degradation_under_load"], SHORT_S)
    assert result.verdict == "FAILURE" and "the driver serializes executions" in result.message, result.message
    metrics = result.metrics
    assert metrics["processes"] == stress_load.CONCURRENT_CLIENTS  # clients in processes of their own
    assert len(metrics["latency_per_client_ms"]) == stress_load.CONCURRENT_CLIENTS
    assert metrics["overlapped_longs"] < metrics["long_executions"] / 2, metrics
    assert sum(share > stress_load.MAX_QUIET_SHARE for share in metrics["quiet_shares"]) > len(metrics["quiet_shares"]) / 2


def test_a_stdio_driver_is_loaded_by_threads_of_one_client_process():
    """A driver that speaks only stdio cannot be shared by processes: the clients are threads of
    one process on one connection, and serialization is caught all the same."""
    stdio_only = f"remote:{sys.executable} -m nnts serve {FAULTY}serializes_executions"
    result, = stress.run_tests(stdio_only, ["degradation_under_load"], SHORT_S)
    assert result.verdict == "FAILURE" and "the driver serializes executions" in result.message, result.message
    assert result.metrics["processes"] == 1 and "client threads of one process" in result.message


def test_quiet_shares_count_the_longest_stretch_without_a_short_execution_ending():
    long = {"kind": "long", "start": 10.0, "end": 11.0}
    shorts = [{"kind": "short", "start": t - 0.01, "end": t} for t in (9.9, 10.1, 10.2, 10.3, 11.5)]
    assert stress_load.quiet_shares([long] + shorts) == [pytest.approx(0.7)]  # 10.3 -> 11.0; ends outside the long do not count
    assert stress_load.quiet_shares([long]) == [1.0]


def test_a_running_socket_server_is_tested_its_memory_read_through_the_socket(tmp_path):
    path = str(tmp_path / "driver.sock")
    server = subprocess.Popen([sys.executable, "-m", "nnts", "serve", "reference", "--socket", path],
                              stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        names = ["client_killed_during_execution", "repeated_load_unload"]
        results = stress.run_tests(f"socket:{path}", names, SHORT_S)
        assert verdicts(results) == {name: "SUCCESS" for name in names}, [r.message for r in results]
        assert results[1].metrics["rss_start_mib"] > 0
        assert server.poll() is None  # the tests leave a server they did not start running
    finally:
        server.kill()
        server.wait()


# A driver speaking only stdio that lives on when its client dies (as a native driver blocked in
# anything but reading its input would): the server returns at the end of its input, then it sleeps.
ORPHANING_DRIVER = ("import time\nfrom nnts.cli import main\n"
                    "try:\n    main(['serve', 'reference'])\nfinally:\n    time.sleep(60)\n")


def test_a_stdio_driver_gets_a_process_per_client_and_must_exit_with_it(tmp_path):
    stdio_only = f"remote:{sys.executable} -m nnts serve reference"  # not `nnts serve`: no socket server
    names = ["client_killed_during_execution", "multi_process_random_kills"]
    results = stress.run_tests(stdio_only, names, SHORT_S)
    assert verdicts(results) == {name: "SUCCESS" for name in names}, [r.message for r in results]
    assert all("driver process exited within" in r.message for r in results)
    script = tmp_path / "orphaning_driver.py"
    script.write_text(ORPHANING_DRIVER)
    result, = stress.run_tests(f"remote:{sys.executable} {script}", ["client_killed_during_compilation"], SHORT_S)
    assert result.verdict == "FAILURE" and "still ran" in result.message, result
    assert "a driver must exit when its connection ends" in result.message


def test_what_cannot_be_run_ends_as_a_failure_with_its_reason(capsys):
    result, = stress.run_tests("remote:/nonexistent/driver", ["memory_soak"], SHORT_S)
    assert result.verdict == "FAILURE" and result.message.startswith("the driver did not start")
    assert cli.main(["stress", "--tests", "no_such_test"]) == 2
    assert "unknown stress test(s) no_such_test" in capsys.readouterr().err


def test_a_driver_leaking_a_fence_fd_fails_the_resource_soak_naming_the_path():
    """nnapi_ref.drivers.broken:leaks_fence_fd leaks one file descriptor per fenced execution, in
    its own process: the soak names the resource, the path and the rate; the paths before it passed."""
    result, = stress.run_tests("nnapi_ref.drivers.broken:leaks_fence_fd", ["resource_soak"], SHORT_S)
    assert result.verdict == "FAILURE", result.message
    assert "fd count grew by 1 per fenced execution over 2,000 fenced executions" in result.message, result.message
    assert result.metrics["async_executions"] >= stress.RESOURCE_EXECUTIONS  # sync and async came first, and passed
