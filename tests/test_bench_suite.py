"""mlts.bench_suite: the first failing test and its time taken from a real pytest run, a run
without failures counted at its length, the summary per order, and bad arguments refused."""
import io

from nnts.mlts import bench_suite

SMALL = ["--no-shared-vectors", "-k", "nnts_add_quant8_relu"]


def test_first_failure_of_a_broken_driver_and_none_of_the_reference():
    broken = bench_suite.run_once("nnapi_ref.drivers.broken:wrong_add_quant8", "breadth", False, 300, 0, SMALL,
                                  stream=io.StringIO())
    assert broken["exit_code"] == 1
    assert "nnts_add_quant8_relu" in broken["first_failure"]
    assert 0 < broken["seconds_to_first_failure"] <= broken["run_seconds"]
    assert 0 < broken["cpu_seconds_to_first_failure"] <= broken["run_cpu_seconds"] + 0.5
    clean = bench_suite.run_once("reference", None, True, 300, 0, SMALL, stream=io.StringIO())
    assert clean["exit_code"] == 0 and clean["first_failure"] is None and clean["seconds_to_first_failure"] is None


def test_summary_counts_a_run_without_failure_at_its_length_capped_by_the_timeout():
    def row(driver, order, first, run, quick=False):  # (wall, CPU) seconds
        return {"driver": driver, "order": order, "quick": quick, "seconds_to_first_failure": first and first[0],
                "cpu_seconds_to_first_failure": first and first[1], "run_seconds": run[0], "run_cpu_seconds": run[1]}
    rows = [row("a", "breadth", (2.0, 3.0), (5, 6)), row("b", "breadth", None, (90, 150)),
            row("c", "breadth", (4.0, 7.0), (6, 9)), row("a", "collection", (30.0, 50.0), (31, 52)),
            row("a", "default", (1.0, 1.5), (3, 4), quick=True), row("b", "default", None, (20, 30), quick=True)]
    summary = bench_suite.summarize(rows, timeout=60)
    assert summary["breadth"] == {"runs": 3, "median_s": 4.0, "max_s": 60, "median_cpu_s": 7.0, "max_cpu_s": 150,
                                  "not_caught": ["b"]}
    assert summary["collection"] == {"runs": 1, "median_s": 30.0, "max_s": 30.0, "median_cpu_s": 50.0,
                                     "max_cpu_s": 50.0, "not_caught": []}
    assert summary["quick"] == {"runs": 2, "caught": ["a"], "missed": ["b"], "max_run_s": 20, "max_run_cpu_s": 30}


def test_bad_arguments_are_refused(capsys):
    assert bench_suite.main(["--drivers", "no_such_fault"]) == 2
    assert "unknown broken driver(s) no_such_fault" in capsys.readouterr().err
    assert bench_suite.main(["--orders", "random"]) == 2
