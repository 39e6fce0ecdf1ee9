"""Tracing (nnapi_ref.trace) and its timing summary (nnts trace summary): one remote execution of a
2-operation model leaves spans of every layer from two processes, nested and in time order, in a
valid trace-event file whose summary adds up to its spans."""
import json

import numpy as np
import pytest

from nnapi_ref import trace
from nnapi_ref.runtime import Compilation, Execution, Model
from nnapi_ref.runtime.devices import Device
from nnapi_ref.runtime.model import OperandType
from nnapi_ref.types import OperandCode, OperationCode
from nnts import cli
from nnts.formats import trace_summary
from nnts.generators.builders import execute_chain
from nnts.runners.drivers import load_driver

A = np.array([[1, 2], [3, 4]], np.float32)
B = np.array([[0.5, -1], [2, 0.25]], np.float32)



def add_mul_model() -> Model:
    """out = (a + b) * b: two operations."""
    model = Model()
    t = OperandType(OperandCode.TENSOR_FLOAT32, (2, 2))
    a, b, s, out = (model.add_operand(t) for _ in range(2)), None, None, None
    a, b = list(a)
    fuse = model.add_operand(OperandType(OperandCode.INT32))
    model.set_operand_value(fuse, np.int32(0))
    s, out = model.add_operand(t), model.add_operand(t)
    model.add_operation(OperationCode.ADD, [a, b, fuse], [s])
    model.add_operation(OperationCode.MUL, [s, b, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    return model


@pytest.fixture
def tracing(tmp_path):
    trace.reset()
    path = tmp_path / "trace.json"
    trace.start(str(path))
    yield path
    trace.reset()


@pytest.fixture(scope="module")
def traced_remote_run(tmp_path_factory):
    """The trace of building, compiling and executing the model once on the reference served remotely."""
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    trace.reset()
    trace.start(str(path))
    device = load_driver("remote:nnts serve reference")
    try:
        with trace.section("classify", phase="execution"):
            model = add_mul_model()
            model.finish()
            compilation = Compilation(model, [Device(device)])
            compilation.finish()
            out = execute_chain(compilation, A, B)
        np.testing.assert_array_equal(out, (A + B) * B)
        assert trace.stop() == str(path)
    finally:
        device.close()
        trace.reset()
    return path


def spans_of(path):
    document = json.loads(path.read_text())
    return document, [e for e in document["traceEvents"] if e["ph"] == "X"]


def test_trace_is_valid_trace_event_json_with_named_processes_and_threads(traced_remote_run):
    document, spans = spans_of(traced_remote_run)
    assert isinstance(document["traceEvents"], list) and spans
    for event in document["traceEvents"]:
        assert event["ph"] in ("X", "M") and isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "X":
            assert isinstance(event["name"], str) and event["dur"] >= 0 and isinstance(event["ts"], (int, float))
    named = {e["pid"] for e in document["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in document["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {e["pid"] for e in spans} <= named
    assert {(e["pid"], e["tid"]) for e in spans} <= threads


def test_every_layer_has_spans_from_two_processes(traced_remote_run):
    _, spans = spans_of(traced_remote_run)
    layers_by_pid = {}
    for event in spans:
        phase, layer, _ = trace.parse_tag(event["name"])
        layers_by_pid.setdefault(event["pid"], set()).add(layer)
    assert len(layers_by_pid) == 2
    client, server = sorted(layers_by_pid, key=lambda pid: "application" not in layers_by_pid[pid])
    assert {"application", "runtime", "ipc"} <= layers_by_pid[client]
    assert {"ipc", "driver", "cpu"} <= layers_by_pid[server]
    operations = [trace.parse_tag(e["name"])[2] for e in sorted(spans, key=lambda e: e["ts"])
                  if trace.parse_tag(e["name"])[1] == "cpu"]
    assert operations == ["ADD", "MUL"]


def test_spans_nest_per_thread_and_the_server_runs_inside_the_client_call(traced_remote_run):
    _, spans = spans_of(traced_remote_run)
    eps = 1e-3  # µs: timestamps are written with ns resolution
    by_thread = {}
    for e in spans:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for events in by_thread.values():
        stack = []
        for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + eps:
                stack.pop()
            if stack:  # overlapping the enclosing span means inside it
                assert e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"] + eps, (e, stack[-1])
            stack.append(e)
    named = {trace.parse_tag(e["name"])[2]: e for e in spans}
    inner_outer = [("serve EXECUTE_SYNC", "EXECUTE_SYNC"), ("nnapi-reference execute", "EXECUTE_SYNC"),
                   ("EXECUTE_SYNC", "execute on nnapi-reference"), ("ADD", "nnapi-reference execute"),
                   ("serve PREPARE_MODEL", "PREPARE_MODEL"), ("ExecutionBuilder::compute", "classify")]
    for inner, outer in inner_outer:  # across processes too: the server's clock is aligned with ours
        a, b = named[inner], named[outer]
        assert b["ts"] <= a["ts"] and a["ts"] + a["dur"] <= b["ts"] + b["dur"], (inner, outer)
    order = ["ModelBuilder::finish", "CompilationBuilder::finish", "ExecutionBuilder::compute"]
    assert [named[n]["ts"] for n in order] == sorted(named[n]["ts"] for n in order)
    assert named["ADD"]["ts"] + named["ADD"]["dur"] <= named["MUL"]["ts"]


def test_summary_totals_are_the_sums_of_the_spans(traced_remote_run):
    spans = trace_summary.load_spans(str(traced_remote_run))
    ms = lambda spans: sum(s["end"] - s["start"] for s in spans) / 1000
    of = lambda layer, phase: [s for s in spans if s["layer"] == layer and s["phase"] == phase]
    totals = trace_summary.summarize(spans, total_times=True)
    assert totals["layers"]["cpu"]["compute"] == pytest.approx(ms(of("cpu", "compute")))
    assert totals["layers"]["runtime"]["execution_total"] == pytest.approx(ms(of("runtime", "execution")))
    assert totals["layers"]["runtime"]["preparation"] == pytest.approx(ms(of("runtime", "preparation")))
    assert totals["layers"]["application"]["execution_total"] == pytest.approx(ms(of("application", "execution")))
    assert totals["layers"]["application"]["compilation"] is None  # n/a
    assert totals["executions"] == 1
    own = trace_summary.summarize(spans)
    for column in ("compilation", "execution_total"):  # self times split the wall time among the layers
        present = [row[column] for row in own["layers"].values() if row[column] is not None]
        assert own["total"][column] == pytest.approx(sum(present))
    # The CPU has nothing deeper: its self time is its span time; the driver's is less its CPU time.
    assert own["layers"]["cpu"]["compute"] == pytest.approx(ms(of("cpu", "compute")))
    assert own["layers"]["driver"]["execution_total"] == pytest.approx(
        ms(of("driver", "execution")) - ms(of("cpu", "compute")))


def test_nnts_trace_summary_prints_the_table_and_json(traced_remote_run, capsys):
    assert cli.main(["trace", "summary", str(traced_remote_run)]) == 0
    table = capsys.readouterr().out
    for title in ("Application", "Runtime", "IPC", "Driver", "CPU", "Ex. total", "Compilation"):
        assert title in table
    assert cli.main(["trace", "summary", str(traced_remote_run), "--json", "--total-times"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["mode"] == "total times" and set(figures["layers"]) == set(trace_summary.ROWS)
    assert {row["operation"] for row in figures["operations"]} == {"ADD", "MUL"}
    assert cli.main(["trace", "summary", str(traced_remote_run), "--per-execution", "--detail"]) == 0
    out = capsys.readouterr().out
    assert "per execution" in out and "serve EXECUTE_SYNC" in out


def test_summary_of_a_bad_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": 3}')
    assert cli.main(["trace", "summary", str(bad)]) == 2
    assert capsys.readouterr().out.count("\n") == 1
    assert cli.main(["trace", "summary", str(tmp_path / "missing.json")]) == 2


def test_application_sections_take_their_phase_from_an_aosp_tag(tracing):
    with trace.section("[NN_LA_PC]compileModel"):
        pass
    with trace.section("preprocess", phase="preparation"):
        pass
    trace.flush()
    names = [e["name"] for e in json.loads(tracing.read_text())["traceEvents"] if e["ph"] == "X"]
    assert names == ["[NN_LA_PC]compileModel", "[NN_LA_PP]preprocess"]
    with pytest.raises(ValueError):
        trace.section("x", layer="kernel")


def test_nothing_is_recorded_when_tracing_is_off():
    trace.reset()
    Compilation(add_mul_model_finished(), None).finish()
    assert trace.events()[1:] == []  # only this process's name


def add_mul_model_finished() -> Model:
    model = add_mul_model()
    model.finish()
    return model


def test_bench_window_summarizes_one_models_executions(tracing):
    """nnts bench --trace: the spans of one model's window, its executions and operation times."""
    model = add_mul_model_finished()
    compilation = Compilation(model, None)
    compilation.finish()
    started = trace.now()
    for _ in range(3):
        execution = Execution(compilation)
        execution.set_input(0, A)
        execution.set_input(1, B)
        execution.set_output(0, np.zeros((2, 2), np.float32))
        execution.compute()
    window = trace_summary.window(started, trace.now())
    assert window["summary"]["executions"] == 3
    assert window["summary"]["layers"]["runtime"]["compilation"] is None  # compiled before the window
    assert {(o["operation"], o["count"]) for o in window["operations"]} == {("ADD", 3), ("MUL", 3)}
    html = trace_summary.html_tables([{"model": "add_mul.tflite", "trace": window}, {"model": "untraced"}])
    assert 'data-trace-model="add_mul.tflite"' in html and "untraced" not in html
    assert "<td class=\"l\">MUL</td><td>3</td>" in html


def test_a_partitioned_execution_has_a_span_per_step(tracing):
    from nnapi_ref import using_drivers
    from nnapi_ref.drivers.reference import ReferenceDevice
    from nnapi_ref.drivers.variants import SubsetDevice
    adder = SubsetDevice("adder", [OperationCode.ADD], 0.5)
    with using_drivers([ReferenceDevice(), adder]):
        compilation = Compilation(add_mul_model_finished())
        compilation.finish()
        out = execute_chain(compilation, A, B)
    np.testing.assert_array_equal(out, (A + B) * B)
    trace.flush()
    spans = {trace.parse_tag(e["name"])[2]: e for e in json.loads(tracing.read_text())["traceEvents"]
             if e["ph"] == "X"}
    outer = spans["ExecutionBuilder::compute"]
    for name in ("read inputs", "step 0 on adder", "step 1 on nnapi-reference", "write outputs"):
        inner = spans[name]
        assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"], name
    assert spans["step 0 on adder"]["ts"] < spans["step 1 on nnapi-reference"]["ts"]


def test_trace_option_of_nnts_vectors_run_writes_the_trace(tmp_path, capsys):
    from nnts.formats.paths import CORPUS
    trace.reset()
    path = tmp_path / "vectors.trace.json"
    vectors_file = CORPUS / "arithmetic.json"
    try:
        assert cli.main(["vectors", "run", str(vectors_file), "--trace", str(path), "-q", "-j", "2"]) == 0
    finally:
        trace.reset()
    spans = trace_summary.load_spans(str(path))
    assert {s["layer"] for s in spans} >= {"runtime", "driver", "cpu"}
    assert trace_summary.count_executions(spans) >= 1
    bad = tmp_path / "no" / "such" / "folder" / "t.json"
    capsys.readouterr()
    assert cli.main(["vectors", "run", str(vectors_file), "--trace", str(bad)]) == 2
    assert "does not exist" in capsys.readouterr().err
