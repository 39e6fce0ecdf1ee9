"""nnts graph: a random-graph reproducer as an SVG whose nodes are its operations, the dot text
without Graphviz, and operations coloured by the device the partitioner assigns them."""
import shutil
import xml.etree.ElementTree as ET

import pytest

from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.runtime import Device
from nnts import cli
from nnts.generators.random_graphs import generate
from nnts.runners import graph
from nnts.runners.differential import check, save_reproducer

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def reproducer(tmp_path_factory):
    g = generate(7, num_operations=6)
    reference = [Device(ReferenceDevice())]
    path, _ = save_reproducer(g, check(g, reference, reference), tmp_path_factory.mktemp("repro"), "reference")
    return path, g


def operation_nodes(svg_path):
    """(title, texts) of each Graphviz node of an operation (titled op<j>)."""
    root = ET.parse(svg_path).getroot()
    nodes = []
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "node":
            title = g.find(f"{SVG}title").text
            if title.startswith("op"):
                nodes.append((title, [t.text for t in g.iter(f"{SVG}text")]))
    return nodes


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_svg_nodes_are_the_models_operations(reproducer, tmp_path):
    path, g = reproducer
    out = tmp_path / "graph.svg"
    assert cli.main(["graph", str(path), "--svg", str(out)]) == 0
    nodes = operation_nodes(out)
    assert sorted(title for title, _ in nodes) == sorted(f"op{j}" for j in range(len(g.operation_names)))
    model, _ = graph.load_model(str(path))
    for title, texts in nodes:
        j = int(title[2:])
        name = graph._operation_name(model.main.operations[j].type)
        assert texts[0] == f"{name} (#{j})"
    assert sorted(texts[0].split(" (")[0] for _, texts in nodes) == sorted(g.operation_names)


def test_dot_text_without_graphviz(reproducer, monkeypatch, capsys, tmp_path):
    path, g = reproducer
    monkeypatch.setattr(graph, "dot_program", lambda: None)
    assert cli.main(["graph", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("digraph") and text.rstrip().endswith("}")
    assert sum(1 for line in text.splitlines() if line.strip().startswith("op") and "shape=box" in line) == \
        len(g.operation_names)
    assert "shape=invhouse" in text and "shape=house" in text  # inputs and outputs marked
    assert cli.main(["graph", str(path), "--svg", str(tmp_path / "x.svg")]) == 2
    assert "Graphviz" in capsys.readouterr().err
    assert cli.main(["graph", str(path), "--dot", str(tmp_path / "x.dot")]) == 0
    assert (tmp_path / "x.dot").read_text() == text


def test_constants_are_folded_into_their_operations_label():
    from nnts.generators.builders import chain_model
    text = graph.to_dot(chain_model().hal_model)
    assert text.count("fused activation NONE") == 3  # of ADD, MUL, ADD, by its NNAPI name
    assert "t2 " not in text  # the constant's own node is not drawn


def test_driver_colours_each_operation_by_its_device():
    from nnapi_ref.drivers.variants import SubsetDevice
    from nnapi_ref.types import OperationCode
    from nnts.generators.builders import chain_model
    model = chain_model().hal_model
    adder = SubsetDevice("adder", [OperationCode.ADD], 0.5)
    devices = graph.partition_devices(model, [Device(ReferenceDevice()), Device(adder)])
    assert devices == {0: "adder", 1: "nnapi-reference", 2: "adder"}
    lines = {line.split()[0]: line for line in graph.to_dot(model, "chain", devices).splitlines()
             if line.strip().startswith("op") and "shape=box" in line}
    colour = lambda j: lines[f"op{j}"].split("fillcolor=")[1]
    assert colour(0) == colour(2) != colour(1)
    assert "on adder" in lines["op0"] and "on nnapi-reference" in lines["op1"]


def test_driver_option_on_the_command_line(reproducer, capsys):
    path, g = reproducer
    assert cli.main(["graph", str(path), "--driver", "reference"]) == 0
    assert capsys.readouterr().out.count("on nnapi-reference") == len(g.operation_names)
    assert cli.main(["graph", str(path), "--driver", "no.such.module:factory"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_bad_model_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[")
    assert cli.main(["graph", str(bad)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert cli.main(["graph", str(tmp_path / "missing.tflite")]) == 2


def test_failure_picture_beside_the_reproducer(reproducer, tmp_path, monkeypatch):
    """A random graph's failure message names the shrunk model's SVG, written beside its reproducer."""
    path, g = reproducer
    copy = tmp_path / path.name
    copy.write_bytes(path.read_bytes())
    if shutil.which("dot") is not None:
        picture = graph.picture_beside(copy)
        assert picture == copy.with_suffix(".svg") and len(operation_nodes(picture)) == len(g.operation_names)
    monkeypatch.setattr(graph, "dot_program", lambda: None)
    assert graph.picture_beside(copy) is None


def failure_record(message, reproducer=None):
    from nnts.reports import results
    record = {"id": "cts/test_random_graph.py::test_random_graph[seed7]", "part": "random graphs", "op": None,
              "dtype": None, "variant": None, "status": "failed", "phase": "call", "duration_s": 0.0,
              "message": message, "reproducer": reproducer, "replay": None}
    record["graph"] = results.graph_of(message)
    return record


def embedded_pictures(page: str) -> list[bytes]:
    import base64
    import re
    return [base64.b64decode(b) for b in re.findall(r'<img alt="the reproducer\'s graph" '
                                                    r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', page)]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_conformance_page_shows_the_reproducers_graph(reproducer, tmp_path):
    """The failure's SVG (named in its message, or drawn from its reproducer when the report is
    written) is embedded in the page, whose nodes are the shrunk model's operations; a file that
    is not an SVG, named in a results file, is never embedded (nor any file outside the run's
    folders: tests/test_security.py)."""
    from nnts.reports import conformance, results
    path, g = reproducer
    named, drawn = tmp_path / "named.json", tmp_path / "drawn.json"
    for copy in (named, drawn):
        copy.write_bytes(path.read_bytes())
    not_svg = tmp_path / "secret.svg"
    not_svg.write_text("not a picture")
    tests = [failure_record(f"random graph seed 7\nreproducer: {named}\ngraph: {graph.picture_beside(named)}"),
             failure_record(f"random graph seed 8\nreproducer: {drawn}", reproducer=str(drawn)),
             failure_record(f"random graph seed 9\ngraph: {not_svg}")]
    assert tests[0]["graph"] == str(named.with_suffix(".svg")) and tests[1]["graph"] is None
    page = conformance.render(results.to_json({"driver_spec": "broken"}, tests), folders=[str(tmp_path)], draw=True)
    pictures = embedded_pictures(page)
    assert len(pictures) == 2 and b"not a picture" not in b"".join(pictures)
    for k, svg in enumerate(pictures):
        (tmp_path / f"embedded{k}.svg").write_bytes(svg)
        assert [t for t, _ in operation_nodes(tmp_path / f"embedded{k}.svg")] == \
            [f"op{j}" for j in range(len(g.operation_names))]
