"""What the ``nnts`` subcommands share: the driver options, the default driver (``NNTS_DRIVER``,
read here, at the entry point) and ``--trace``."""
from __future__ import annotations

import argparse
import os
import sys

from nnapi_ref import trace
from nnts.formats.files import UsageError
from nnts.runners.settings import Settings
from nnts.runners.shard import parse


def default_driver() -> str:
    """``--driver``'s default, read as the parser is built (``nnts.cli.main`` reads the rest)."""
    return os.environ.get("NNTS_DRIVER", Settings.driver)


def add_driver_options(parser: argparse.ArgumentParser) -> None:
    """``--driver``, ``--isolate`` and ``--call-timeout``, the same for every command that runs a driver."""
    parser.add_argument("--driver", default=default_driver(),
                        help="reference, module.path:factory, remote:COMMAND or socket:PATH (comma-separated)")
    parser.add_argument("--isolate", action="store_true",
                        help="serve in-process drivers from a process of their own (contains crashes)")
    parser.add_argument("--call-timeout", type=float,
                        help="seconds a remote driver may take per call before it is declared hung (default 60)")


def shard_option(text: str) -> tuple[int, int]:
    """``--shard K/N`` as argparse reads it."""
    try:
        return parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def check_driver(args) -> None:
    if getattr(args, "driver", None) is not None and not args.driver.strip():
        raise UsageError("--driver: an empty driver string")


def add_trace_option(parser) -> None:
    parser.add_argument("--trace", metavar="PATH",
                        help="write a Chrome trace-event JSON of the run here (Perfetto, chrome://tracing; "
                             "same as NNTS_TRACE=PATH)")


def apply_trace(args) -> int | None:
    """Start tracing when ``--trace`` was given; 2 (after one line) for an unwritable path."""
    path = getattr(args, "trace", None)
    if not path:
        return None
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
