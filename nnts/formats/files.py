"""Checks of the command line's own inputs, made before a run: an output path that cannot be
written, a file an option names that cannot be read, a number that makes no sense. Each failure is
a :class:`UsageError`, which ``nnts`` prints as one line (``nnts <command>: <what>``) with exit
status 2, so that a typo costs seconds, not the results of a whole run.

Also :func:`write_atomic`: every results file is written to a temporary file beside it and renamed
into place, so that a reader (or a run stopped half way) never sees half a file.
"""
from __future__ import annotations

import codecs
import math
import os
import re
import sys
import tempfile

STDOUT = "-"  # an output path that means the standard output


class UsageError(Exception):
    """A bad argument of the command line, found before the run; the message names it."""


def output_path(option: str, path: str | None, creates_folder: bool = False) -> None:
    """``path`` can be created or replaced as a file: its folder exists (or, where the command
    creates it, ``creates_folder``, can be created) and it is not a folder; or it is ``-``, the
    standard output."""
    if not path:
        if path is not None:
            raise UsageError(f"{option}: an empty path")
        return
    if path == STDOUT:
        return
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a folder, not a file")
    folder = os.path.dirname(os.path.abspath(path))
    if creates_folder:
        while not os.path.exists(folder):
            folder = os.path.dirname(folder)
        if not os.path.isdir(folder):
            raise UsageError(f"{option} {path}: {folder} is not a folder")
    if not os.path.isdir(folder):
        raise UsageError(f"{option} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{option} {path}: the folder {folder} is not writable")
    if os.path.exists(path) and not os.path.isfile(path):
        raise UsageError(f"{option} {path}: exists and is not a regular file")


def input_file(option: str, path: str | None, text: bool = True) -> None:
    """``path`` is a readable regular file; with ``text``, UTF-8 text (no NUL bytes)."""
    if path is None:
        return
    if not path:
        raise UsageError(f"{option}: an empty path")
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a folder, not a file")
    if not os.path.exists(path):
        raise UsageError(f"{option} {path}: no such file")
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
            if text:
                _check_utf8(option, path, head, f)
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot read it: {e.strerror}") from None


def _check_utf8(option: str, path: str, head: bytes, rest) -> None:
    """The whole file is UTF-8 text without NUL bytes (read in pieces: a large file is never held)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, chunk = 0, head
    while chunk:
        nul = chunk.find(b"\0")
        if nul >= 0:
            raise UsageError(f"{option} {path}: not a text file (binary data at byte {offset + nul})")
        try:
            decoder.decode(chunk)
        except UnicodeDecodeError as e:
            raise UsageError(f"{option} {path}: not UTF-8 text (at byte {offset + max(e.start, 0)})") from None
        offset += len(chunk)
        chunk = rest.read(1 << 16)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise UsageError(f"{option} {path}: not UTF-8 text (it ends inside a character)") from None


def writable(option: str, path: str) -> None:
    """``path``'s folder can be made (it is, as the writer would) and a file created in it: tried
    now, so that a results file cannot be lost at the end of a run."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot be written ({e.strerror or e})") from None


def folder(option: str, path: str | None) -> None:
    """``path`` is a folder, or does not exist yet (it will be created); never a regular file."""
    if path is None:
        return
    if not path:
        raise UsageError(f"{option}: an empty path")
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{option} {path}: exists and is not a folder")


def positive(option: str, value: float | None, allow_zero: bool = False) -> None:
    """A finite number above zero (or zero with ``allow_zero``); None (not given) passes."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise UsageError(f"{option} {value}: must be a finite number {'>= 0' if allow_zero else '> 0'}")


def regex(option: str, pattern: str | None) -> None:
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as e:
        raise UsageError(f"{option} {pattern!r}: not a regular expression ({e})") from None


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename; ``-``
    is the standard output, as the shell's tools have it. (The twin of
    ``nnapi_ref.vectors.write_text_atomic``: this module must not import nnapi_ref, which the
    fuzz engine loads only under atheris' instrumentation, after this module.)"""
    path = os.fspath(path)
    if path == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    folder_ = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder_)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
