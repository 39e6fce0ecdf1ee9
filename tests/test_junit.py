"""The one JUnit writer (nnts/formats/junit.py) of nnts vectors run, nnts stress and nnts bench:
every status of the vocabulary in JUnit's terms, and well-formed XML whatever a message holds."""
import xml.etree.ElementTree as ET

from nnts.formats import junit
from nnts.formats.results import STATUSES


def test_every_status_in_junit_terms_and_control_characters_escaped(tmp_path):
    path = tmp_path / "r.xml"
    cases = [junit.Case("c", s, s, f"{s}: driver said \x00\x1b[31m\ud800 <&>") for s in STATUSES]
    junit.write(str(path), "nnts-test", cases, elapsed=1.5)
    suite = ET.parse(path).getroot().find("testsuite")  # well-formed: the parser takes it
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped"), suite.get("time")) \
        == (str(len(STATUSES)), "3", "1", "3", "1.500")
    children = {c.get("name"): [e.tag for e in c] for c in suite.iter("testcase")}
    assert children == {"passed": ["system-out"], "failed": ["failure"], "crashed": ["failure"], "hung": ["failure"],
                        "error": ["error"], "xfailed": ["skipped"], "xpassed": ["system-out"],
                        "unsupported": ["skipped"], "skipped": ["skipped"]}
    hung = next(c for c in suite.iter("testcase") if c.get("name") == "hung").find("failure")
    assert hung.get("type") == "hung" and hung.text == "hung: driver said \\x00\\x1b[31m\\ud800 <&>"
