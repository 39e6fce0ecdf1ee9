"""The ``nnts`` command: one module per subcommand, each with ``register(sub)`` (its arguments),
``run(args)`` and, where its inputs can be checked before the run, ``check(args)`` (set as ``check_args``).

The environment is read here, once (:class:`nnts.runners.settings.Settings`), and reaches the
commands as ``args.settings``; ``nnts test`` leaves it to the pytest plugin.

Only the module of the command given is imported (all of them for ``nnts --help``): ``nnts serve``
starts every remote driver, and the other commands' machinery would cost it a third of a second.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys

from nnapi_ref.errors import NnapiError
from nnapi_ref.runtime.devices import drivers_restored
from nnts import __version__
from nnts.cli import suite
from nnts.cli.common import apply_trace, check_driver
from nnts.formats import files
from nnts.formats.files import UsageError
from nnts.runners.settings import Settings

COMMANDS = ("test", "devices", "serve", "stress", "bench", "gate", "report", "fuzz", "ops", "vectors", "trace",
            "graph", "sdk", "aosp-driver", "cache", "support", "init", "docs")
MODULES = {"test": "suite", "aosp-driver": "aosp_driver"}


def parser_for(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nnts", description="NNAPI conformance and benchmarking suite")
    parser.add_argument("--version", action="version", version=f"nnts {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = [argv[0]] if argv and argv[0] in COMMANDS else COMMANDS
    for name in chosen:
        importlib.import_module(f"nnts.cli.{MODULES.get(name, name)}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "test":  # pytest's options pass through untouched
        return suite.main(argv[1:])
    args = parser_for(argv).parse_args(argv)
    command = f"{args.command} {args.vectors_command}" if args.command == "vectors" else args.command
    try:
        check_arguments(args)
    except UsageError as e:
        print(f"nnts {command}: {e}", file=sys.stderr)
        return 2
    try:
        args.settings = settings(args)
    except ValueError as e:
        print(f"nnts {command}: {e}", file=sys.stderr)
        return 2
    args.settings.start(os.environ)
    if apply_trace(args) is not None:
        return 2
    try:
        with drivers_restored():
            return args.func(args)
    except NnapiError as e:  # a bad driver string, a driver that does not start: one line, not a traceback
        print(f"nnts: {e}", file=sys.stderr)
        return 2
    except UsageError as e:  # found once the run's inputs were read (a socket path's folder)
        print(f"nnts {command}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `nnts ops | head`: the reader left; end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
        return 141
    except KeyboardInterrupt:
        print(f"nnts {command}: interrupted", file=sys.stderr)
        return 130


def settings(args) -> Settings:
    """The environment's settings with the command line's over them."""
    chosen = Settings.from_environment(os.environ)
    if getattr(args, "call_timeout", None):
        os.environ["NNTS_CALL_TIMEOUT"] = str(args.call_timeout)  # the processes it starts inherit it
        chosen = dataclasses.replace(chosen, call_timeout_s=args.call_timeout)
    if args.command == "serve" and not args.socket:  # its spans go to its client (TRACE_START), not to a file
        chosen = dataclasses.replace(chosen, trace=None)
    elif getattr(args, "trace", False) is None and chosen.trace and chosen.trace == os.environ.get("NNTS_TRACE"):
        # NNTS_TRACE=PATH of a command with --trace is --trace PATH: the same run, the same file
        os.environ.setdefault("NNTS_TRACE_OWNER", str(os.getpid()))  # the processes it starts write beside it
        args.trace = chosen.trace
        chosen = dataclasses.replace(chosen, trace=None)
    return chosen


def check_arguments(args) -> None:
    """The arguments that can be checked before the run (paths, files, numbers), so that a typo
    is one line at once rather than a traceback or lost results at the end."""
    if hasattr(args, "call_timeout"):
        files.positive("--call-timeout", args.call_timeout)
    check_driver(args)
    for option, flag in (("json", "--json"), ("junit", "--junitxml"), ("html", "--html")):
        value = getattr(args, option, None)
        if isinstance(value, str):  # (nnts trace summary --json is a switch, not a path)
            files.output_path(flag, value, creates_folder=getattr(args, "creates_folders", False))
    if hasattr(args, "check_args"):
        args.check_args(args)
