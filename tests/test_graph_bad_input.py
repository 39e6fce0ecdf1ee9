"""``nnts graph`` on malformed models and outputs it cannot write: one line and exit 2, never a
traceback; what a model names is drawn as text, never obeyed by the terminal."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nnts.cli import main

CORPUS = Path(__file__).resolve().parents[1] / "cts" / "corpus" / "arithmetic.json"


def _graph(capsys, *argv) -> tuple[int, str, str]:
    code = main(["graph", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _mutated(tmp_path, change) -> str:
    doc = json.loads(CORPUS.read_text())
    change(doc["tests"][0])
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("change, said", [
    (lambda t: t["main"]["operations"][0].__setitem__("inputs", [0, 1, 99]), "main operation 0 names operand 99 of 4"),
    (lambda t: t["main"].__setitem__("output_indexes", [-3]), "input or output index -3 of 4 operands"),
])
def test_an_index_naming_no_operand_is_one_line(tmp_path, capsys, change, said):
    code, out, err = _graph(capsys, _mutated(tmp_path, change))
    assert code == 2 and not out and err.count("\n") == 1 and said in err, err


@pytest.mark.parametrize("target", ["folder", "proc"])
def test_an_output_it_cannot_write_is_one_line(tmp_path, capsys, target):
    out_path = {"folder": str(tmp_path), "proc": "/proc/version"}[target]
    code, out, err = _graph(capsys, str(CORPUS), "--dot", out_path)
    assert code == 2 and not out and err.startswith(f"nnts graph: {out_path}: cannot write: ") and err.count("\n") == 1, err


def test_graphviz_printing_what_is_not_utf8_is_no_traceback(tmp_path, capsys, monkeypatch):
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nprintf '\\377\\376<svg/>\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    code, out, err = _graph(capsys, str(CORPUS), "--svg", str(tmp_path / "m.svg"))
    assert code == 0 and not out and (tmp_path / "m.svg").read_text().endswith("<svg/>\n"), err


def test_control_characters_of_a_name_are_shown_not_sent(tmp_path, capsys):
    code, out, err = _graph(capsys, _mutated(tmp_path, lambda t: t.__setitem__("name", "bad\x1b[31m\x00")))
    assert code == 0 and not err and "\x1b" not in out and "\x00" not in out and 'digraph "bad\\\\x1b[31m\\\\x00"' in out, out
