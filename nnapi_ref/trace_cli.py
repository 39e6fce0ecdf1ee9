"""The command-line side of tracing and graphs: ``--trace PATH`` for the commands that run a
driver, ``nnts trace summary`` and ``nnts graph`` (registered by :mod:`nnapi_ref.cli`)."""
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
    from . import trace
    try:
        trace.start(path)
    except ValueError as e:
        print(f"nnts: --trace: {e}", file=sys.stderr)
        return 2
    return None


def register(sub) -> None:
    p = sub.add_parser("trace", help="trace tools: the timing summary of a trace (NNAPI's parse_systrace)")
    tsub = p.add_subparsers(dest="trace_command", required=True)
    s = tsub.add_parser("summary", help="wall time per phase and layer of a trace file")
    s.add_argument("trace_file", metavar="TRACE")
    s.add_argument("--total-times", action="store_true",
                   help="a layer's time includes the time it waits on deeper layers")
    s.add_argument("--per-execution", action="store_true", help="only the execution phases, per execution")
    s.add_argument("--detail", action="store_true", help="also list every span")
    s.add_argument("--json", action="store_true", help="print the figures as JSON")
    s.set_defaults(func=_summary)


def _summary(args) -> int:
    from .trace_summary import main
    return main(args.trace_file, args.total_times, args.per_execution, args.detail, args.json)
