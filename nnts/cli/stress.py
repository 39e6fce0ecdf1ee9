"""``nnts stress``: the MLTS crash and stress tests (mlts/stress.py), each against the driver in a
process of its own."""
from __future__ import annotations

from nnts.cli.common import add_driver_options, add_trace_option
from nnts.formats import files
from nnts.mlts import stress


def register(sub) -> None:
    p = sub.add_parser("stress", help="MLTS crash and stress tests, the driver in its own process (always isolated)")
    add_driver_options(p)
    p.add_argument("--tests", help=f"comma-separated test names: {', '.join(stress.TESTS)} (default: all)")
    p.add_argument("--duration", type=float,
                   help="seconds of each timed test: load/unload, soak, multi-process, random graphs, "
                        "degradation (default 3)")
    p.add_argument("--json", help="write the results as JSON to this file")
    p.add_argument("--junitxml", dest="junit", help="write the results as JUnit XML to this file")
    p.add_argument("--reproducers", help="where a failing random graph is saved, shrunk, with its replay command "
                                         "(default: out/reproducers in the current folder)")
    add_trace_option(p)
    p.set_defaults(func=run, check_args=check)


def check(args) -> None:
    files.positive("--duration", args.duration)


def run(args) -> int:
    return stress.main(args.driver, args.tests, args.duration, args.call_timeout, args.json, args.junit, args.settings,
                       args.reproducers)
