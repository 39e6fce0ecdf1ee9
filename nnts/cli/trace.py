"""The command-line side of tracing and graphs: ``--trace PATH`` for the commands that run a
driver, ``nnts trace summary`` and ``nnts graph`` (registered by :mod:`nnts.cli`)."""
from __future__ import annotations

import sys


def add_trace_option(parser) -> None:
    parser.add_argument("--trace", metavar="PATH",
                        help="write a Chrome trace-event JSON of the run here (Perfetto, chrome://tracing; "
                             "same as NNTS_TRACE=PATH)")


def apply(args) -> int | None:
    """Start tracing when ``--trace`` was given; 2 (after one line) for an unwritable path."""
    path = getattr(args, "trace", None)
    if not path:
        return None
    from nnapi_ref import trace
    try:
        trace.start(path)
    except ValueError as e:
        print(f"nnts: --trace: {e}", file=sys.stderr)
        return 2
    command = args.func

    def traced(args) -> int:
        """The command, then the trace written (and tracing stopped) before returning."""
        try:
            return command(args)
        finally:
            try:
                trace.stop()
            except OSError as e:
                print(f"nnts: cannot write the trace {path}: {e}", file=sys.stderr)
    args.func = traced
    return None


def register(sub) -> None:
    p = sub.add_parser("trace", help="trace tools: the timing summary of a trace (NNAPI's parse_systrace)")
    tsub = p.add_subparsers(dest="trace_command", required=True)
    s = tsub.add_parser("summary", help="wall time per phase and layer of a trace file")
    s.add_argument("trace_files", nargs="+", metavar="TRACE", help="trace files of one run (xdist workers' too)")
    s.add_argument("--total-times", action="store_true",
                   help="a layer's time includes the time it waits on deeper layers")
    s.add_argument("--per-execution", action="store_true", help="only the execution phases, per execution")
    s.add_argument("--detail", action="store_true", help="also list every span")
    s.add_argument("--json", action="store_true", help="print the figures as JSON")
    s.set_defaults(func=_summary)
    register_graph(sub)


def _summary(args) -> int:
    from nnts.formats.trace_summary import main
    return main(args.trace_files, args.total_times, args.per_execution, args.detail, args.json)


def register_graph(sub) -> None:
    p = sub.add_parser("graph", help="a model (test-vector file or .tflite) as a Graphviz graph")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--driver", help="colour each operation by the device the runtime assigns it to")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--svg", metavar="OUT", help="write an SVG (needs Graphviz's dot)")
    out.add_argument("--dot", metavar="OUT", help="write the dot text to this file (default: stdout)")
    p.set_defaults(func=_graph)


def _graph(args) -> int:
    from nnts.runners.graph import main
    return main(args.model, args.driver, args.svg, args.dot)
