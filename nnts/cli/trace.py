"""``nnts trace summary``: NNAPI's parse_systrace table of a trace (``--trace PATH`` is in
:mod:`nnts.cli.common`)."""
from __future__ import annotations

from nnts.formats.trace_summary import main as summary


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
    s.set_defaults(func=run_summary)


def run_summary(args) -> int:
    return summary(args.trace_files, args.total_times, args.per_execution, args.detail, args.json)
