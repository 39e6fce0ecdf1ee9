"""``nnts graph MODEL``: a model (test-vector file or .tflite) as a Graphviz graph (:mod:`nnts.runners.graph`)."""
from __future__ import annotations

from nnts.runners.graph import main


def register(sub) -> None:
    p = sub.add_parser("graph", help="a model (test-vector file or .tflite) as a Graphviz graph")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--driver", help="colour each operation by the device the runtime assigns it to")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--svg", metavar="OUT", help="write an SVG (needs Graphviz's dot; - for stdout)")
    out.add_argument("--dot", metavar="OUT", help="write the dot text to this file (default, or -: stdout)")
    p.set_defaults(func=run)


def run(args) -> int:
    return main(args.model, args.driver, args.svg, args.dot, args.settings)
