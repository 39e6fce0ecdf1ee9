"""JUnit XML of a run's results in the suite's vocabulary (:mod:`nnts.formats.results`): the one
writer of ``nnts vectors run``, ``nnts stress`` and ``nnts bench --junitxml`` (``nnts test`` has
pytest's own), so that CI systems read the three alike."""
from __future__ import annotations

import re
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from nnts.formats.files import write_atomic

# What a status is in JUnit's terms: a failure, an error, a skip; passed and xpassed (listed as an
# expected failure but passing: fails no run, as in pytest) are plain test cases.
ELEMENT = {"failed": "failure", "crashed": "failure", "hung": "failure", "error": "error",
           "xfailed": "skipped", "unsupported": "skipped", "skipped": "skipped"}
MESSAGE_ATTRIBUTE = 500  # characters of the message in the element's attribute (the text has it whole)
# Characters XML 1.0 cannot hold, even as references: a driver's message may carry any.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass
class Case:
    classname: str
    name: str
    status: str
    message: str = ""
    seconds: float | None = None


def xml_text(text: str) -> str:
    """``text`` with the characters XML cannot hold written as ``\\xNN`` (``\\uNNNN``), readably."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else
                        f"\\u{ord(m.group()):04x}", text)


def render(suite: str, cases: list[Case], elapsed: float | None = None) -> str:
    counts = {kind: sum(ELEMENT.get(c.status) == kind for c in cases) for kind in ("failure", "error", "skipped")}
    total = elapsed if elapsed is not None else sum(c.seconds or 0.0 for c in cases)
    lines = ['<?xml version="1.0" encoding="utf-8"?>',
             f'<testsuites><testsuite name={quoteattr(suite)} tests="{len(cases)}" failures="{counts["failure"]}" '
             f'errors="{counts["error"]}" skipped="{counts["skipped"]}" time="{total:.3f}">']
    for c in cases:
        head = f'<testcase classname={quoteattr(xml_text(c.classname))} name={quoteattr(xml_text(c.name))}' + (
            f' time="{c.seconds:.3f}"' if c.seconds is not None else "")
        message = xml_text(c.message or "")
        element = ELEMENT.get(c.status)
        if element:
            lines.append(f'{head}><{element} type="{c.status}" message={quoteattr(message[:MESSAGE_ATTRIBUTE])}>'
                         f'{escape(message)}</{element}></testcase>')
        elif message:
            lines.append(f"{head}><system-out>{escape(message)}</system-out></testcase>")
        else:
            lines.append(head + "/>")
    lines.append("</testsuite></testsuites>")
    return "\n".join(lines) + "\n"


def write(path: str, suite: str, cases: list[Case], elapsed: float | None = None) -> None:
    """The cases as one test suite (``elapsed``: its time, else the sum of the cases'), written
    whole or not at all."""
    write_atomic(path, render(suite, cases, elapsed))
