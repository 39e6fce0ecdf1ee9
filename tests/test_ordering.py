"""Breadth-first order and the quick tier (nnts/runners/ordering.py): every (test kind, operation, data
type, execution path) once before any twice, the same order in every xdist worker, ``--order
collection`` as collected, ``--quick`` the first pass only."""
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from nnts.runners.ordering import breadth_first, group_key

ROOT = Path(__file__).resolve().parents[1]


def item(nodeid, **params):
    return SimpleNamespace(nodeid=nodeid, callspec=SimpleNamespace(params=params))


def case(operation, dtype, variant="sync"):
    return SimpleNamespace(operation=operation, dtype=dtype, variant=variant)


def test_group_key_from_the_case_and_the_path_parameter():
    assert group_key(item("cts/test_generated.py::test_generated[ADD-x-sync]", case=case("ADD", "T32"))) == \
        ("cts/test_generated.py::test_generated", "ADD", "T32", "-")
    assert group_key(item("vts/test_qos.py::test_execute_with_deadline[now-burst]", path="burst", kind="now")) == \
        ("vts/test_qos.py::test_execute_with_deadline", "-", "-", "burst")
    assert group_key(SimpleNamespace(nodeid="cts/test_api.py::test_burst_misuse")) == \
        ("cts/test_api.py::test_burst_misuse", "-", "-", "-")


def test_every_group_once_before_any_twice_and_kinds_take_turns():
    items = ([item(f"a.py::gen[ADD-{i}]", case=case("ADD", "F32")) for i in range(3)]
             + [item(f"a.py::gen[MUL-{i}]", case=case("MUL", "F32")) for i in range(2)]
             + [item(f"b.py::seq[{p}]", path=p) for p in ("sync", "burst")]
             + [item("c.py::api")])
    order = [(n, it.nodeid) for n, it in breadth_first(items)]
    assert order == [
        (0, "a.py::gen[ADD-0]"), (0, "b.py::seq[sync]"), (0, "c.py::api"),   # first group of each kind
        (0, "a.py::gen[MUL-0]"), (0, "b.py::seq[burst]"),                     # then the second of each
        (1, "a.py::gen[ADD-1]"), (1, "a.py::gen[MUL-1]"),
        (2, "a.py::gen[ADD-2]")]
    assert breadth_first(list(reversed(items))) != breadth_first(items)  # computed from the order given
    assert [it.nodeid for _, it in breadth_first(items)] == [it.nodeid for _, it in breadth_first(list(items))]


def test_random_graphs_take_a_turn_per_graph_size():
    """The 200 random graphs are 40 groups, one per graph size: seed 185 (a graph of 16
    operations, the third of that size) runs in the third pass, not the 186th."""
    from cts.test_random_graph import GraphSeed
    items = [item(f"cts/test_random_graph.py::test_random_graph[seed{s}]", seed=GraphSeed(s)) for s in range(200)]
    passes = {it.nodeid: n for n, it in breadth_first(items)}
    assert len({group_key(it) for it in items}) == 40
    assert passes["cts/test_random_graph.py::test_random_graph[seed185]"] == 2
    assert max(passes.values()) == 19  # the small graphs: 20 seeds of each of 5 sizes


def collect(*args):
    command = [sys.executable, "-m", "pytest", "cts/test_generated.py", "vts/test_sequences.py", "--collect-only",
               "-q", "-p", "no:cacheprovider", "--no-shared-vectors", "-k", "ADD or MUL or pool", *args]
    # (a later -k replaces this one)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_order_options_on_the_collected_suite():
    collection, breadth, quick = collect("--order", "collection"), collect(), collect("--quick")
    assert sorted(collection) == sorted(breadth) and collection != breadth
    assert collection[0].startswith("cts/test_generated.py") and collection[-1].startswith("vts/test_sequences.py")
    assert breadth[1].startswith("vts/test_sequences.py")  # VTS starts with CTS, not after it
    assert breadth[:len(quick)] == quick  # --quick: the first pass
    groups = {line.split("[")[0] + "-".join(line.split("[")[1].split("-")[:2]) if "test_generated" in line else line
              for line in collection}
    assert len(quick) == len(groups)  # one test of each (operation, data type) and sequence test path
    assert collect("--quick", "--order", "collection") == [t for t in collection if t in set(quick)]


def test_quick_runs_one_single_operation_case_of_every_operation():
    """The single-operation random tests are grouped by the operation their seed tests, so the
    first pass holds one case of each operation (not one case in all)."""
    command = [sys.executable, "-m", "pytest", "cts/test_random_operation.py", "--collect-only", "-q",
               "-p", "no:cacheprovider", "--random-ops", "300"]
    every = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300).stdout
    quick = subprocess.run(command + ["--quick"], cwd=ROOT, capture_output=True, text=True, timeout=300).stdout
    operation = re.compile(r"test_random_operation\[(\w+)-seed\d+\]")
    every_ops, quick_ops = operation.findall(every), operation.findall(quick)
    assert len(every_ops) == 300 and len(set(every_ops)) < 300
    assert sorted(quick_ops) == sorted(set(every_ops))


def test_quick_alone_collects_only_the_first_pass_it_would_select():
    files = ["cts/test_generated.py", "vts/test_generated.py", "vts/test_validate_model.py",
             "vts/test_validate_request.py", "vts/test_sequences.py"]

    def run(*args):
        command = [sys.executable, "-m", "pytest", *files, "--collect-only", "-q", "-p", "no:cacheprovider",
                   "--no-shared-vectors", "--quick", *args]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return [line for line in done.stdout.splitlines() if "::" in line], done.stdout.splitlines()[-1]

    for order in ("breadth", "collection"):
        pruned, pruned_summary = run("--order", order)
        # -k that keeps every test: all are collected, and the first pass deselects the others
        selected, selected_summary = run("--order", order, "-k", "not no_test_has_this_name")
        assert pruned == selected
        collected = [int(re.search(r"(\d+) tests collected", s).group(1)) for s in (pruned_summary, selected_summary)]
        assert len(pruned) == collected[0] < collected[1] * 0.6, (pruned_summary, selected_summary)  # "N/M tests"


def test_xdist_workers_agree_on_the_order_and_x_stops_at_the_first_fault(tmp_path):
    # keeps_first_shape is found by the sequence tests, which collection order runs last.
    command = [sys.executable, "-m", "pytest", "cts/test_generated.py", "vts/test_sequences.py", "-q", "-n", "2",
               "-x", "-p", "no:cacheprovider", "--no-shared-vectors", "-k", "ADD or MUL or shapes_change",
               "--reproducers", str(tmp_path), "--driver", "nnapi_ref.drivers.broken:keeps_first_shape"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    output = done.stdout + done.stderr
    assert done.returncode in (1, 2), output[-3000:]  # 2: xdist reports -x as an interruption
    assert "Different tests were collected" not in output
    assert re.search(r"FAILED vts/test_sequences.py::test_\w+_shapes_change", output), output[-3000:]
    passed = int(re.search(r"(\d+) passed", output).group(1))
    generated = [t for t in collect("-k", "ADD or MUL or shapes_change") if t.startswith("cts/test_generated.py")]
    assert passed < len(generated) / 2  # collection order would have passed every CTS test first


def test_collected_objects_are_frozen_out_of_the_garbage_collector(tmp_path):
    (tmp_path / "test_frozen.py").write_text("import gc\n\ndef test_frozen():\n    assert gc.get_freeze_count() > 0\n"
                                             "    assert gc.isenabled()  # off only while collecting\n")
    done = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path / "test_frozen.py"), "-q", "-p",
                           "no:cacheprovider", "-n", "0"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
