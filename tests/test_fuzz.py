"""The atheris harnesses (fuzz/harnesses.py) and `nnts fuzz`: the reference survives a few hundred
inputs of each harness, and a driver that raises a plain exception on a malformed model is caught,
saved and replayed."""
import argparse
import glob
import json
import os
import random
import signal

import pytest

from nnapi_ref.drivers.reference import ReferenceDevice
from nnts import cli
from nnts.fuzz import engine, harnesses, targets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "cts", "corpus")
BROKEN = "nnapi_ref.drivers.broken:raises_on_invalid_model"


def inputs(harness, count: int, seed: int = 0):
    """Seed inputs with random bytes after them, as a fuzzer's early mutations are."""
    rng = random.Random(seed)
    seeds = harness.seed_inputs()
    return [rng.choice(seeds) + rng.randbytes(rng.randrange(0, 48)) for _ in range(count)]


@pytest.mark.parametrize("provider", ["atheris", "plain"])
@pytest.mark.parametrize("name", sorted(targets.HARNESSES))
def test_reference_survives_each_harness(name, provider, monkeypatch):
    if provider == "plain":
        monkeypatch.setattr(harnesses, "FuzzedDataProvider", None)
    elif harnesses.FuzzedDataProvider is None:
        pytest.skip("atheris is not installed")
    harness = targets.make(name, ReferenceDevice(), [CORPUS])
    assert harness.seeds, "no seed models"
    for data in inputs(harness, 300):
        harness(data)  # raises on a finding


def test_harness_reports_a_driver_exception():
    class Raising(ReferenceDevice):
        def prepare_model(self, *args):
            raise KeyError("oops")

    harness = targets.make("execute", Raising(), [CORPUS])
    with pytest.raises(KeyError):
        harness(harness.seed_inputs()[0])


def test_masked_driver_exception_is_a_finding():
    class Masking(ReferenceDevice):
        def prepare_model(self, *args):
            try:
                {}["x"]
            except KeyError as e:
                from nnapi_ref.hal import ErrorStatus, HalError
                raise HalError(ErrorStatus.GENERAL_FAILURE, str(e))

    harness = targets.make("execute", Masking(), [CORPUS])
    with pytest.raises(harnesses.Finding, match="KeyError reported as GENERAL_FAILURE"):
        harness(harness.seed_inputs()[0])


def test_broken_driver_caught_saved_and_replayed(tmp_path, capsys):
    """The issue's proof: a driver raising ValueError on a malformed model (instead of
    INVALID_ARGUMENT) is found by the execute harness from valid seeds, in a few hundred runs."""
    vectors = os.path.join(CORPUS, "arithmetic.json")  # valid models only: the fuzzer has to break one
    code = cli.main(["fuzz", "--harness", "execute", "--driver", BROKEN, "--runs", "300", "--seed", "1",
                     "--vectors", vectors, "--artifacts", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1, out[-3000:]
    artifacts = [p for p in glob.glob(str(tmp_path / "execute-crash-*")) if not p.endswith(".json")]
    assert len(artifacts) == 1 and os.path.exists(artifacts[0] + ".json"), out[-3000:]
    assert "FINDING: " + artifacts[0] in out and "ValueError: invalid model" in out
    assert f"replay: nnts fuzz --replay {artifacts[0]} --driver {BROKEN} --vectors {vectors}" in out
    assert cli.main(["fuzz", "--replay", artifacts[0], "--driver", BROKEN]) == 1
    replayed = capsys.readouterr()
    assert "ValueError: invalid model" in replayed.err and "reproduced" in replayed.out
    # The same input on the reference: rejected with an error code, no finding.
    assert cli.main(["fuzz", "--replay", artifacts[0], "--driver", "reference"]) == 0


class _DiesByAlarm(ReferenceDevice):
    """Its process dies of SIGALRM (default action) in prepare, as the execute harness's child
    once did before libFuzzer wrote the artifact: no handler runs, nothing is written."""

    def prepare_model(self, *args):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGALRM)


def dies_by_alarm():
    return _DiesByAlarm()


def test_child_dying_inside_an_input_leaves_the_input(tmp_path, capsys):
    """A fuzzer child killed inside an input, where neither libFuzzer nor the plain loop can
    write an artifact, still leaves that input: saved as a crash artifact by the command."""
    vectors = os.path.join(CORPUS, "arithmetic.json")
    code = cli.main(["fuzz", "--harness", "execute", "--driver", "tests.test_fuzz:dies_by_alarm", "--runs", "10",
                     "--vectors", vectors, "--artifacts", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1, out[-3000:]
    artifacts = [p for p in glob.glob(str(tmp_path / "execute-crash-*")) if not p.endswith(".json")]
    assert len(artifacts) == 1 and os.path.exists(artifacts[0] + ".json"), out[-3000:]
    assert f"exit status {-signal.SIGALRM}" in out and "FINDING: " + artifacts[0] in out

    class Refuses(ReferenceDevice):
        def prepare_model(self, *args):
            raise LookupError("prepare reached")

    # The saved input is the one that was running: it reaches prepare (where the driver died).
    harness = targets.make("execute", Refuses(), [vectors])
    with open(artifacts[0], "rb") as f:
        data = f.read()
    with pytest.raises(LookupError, match="prepare reached"):
        harness(data)


def test_nnts_fuzz_on_the_reference_finds_nothing(tmp_path, capsys):
    code = cli.main(["fuzz", "--harness", "model", "--runs", "500", "--vectors", CORPUS,
                     "--artifacts", str(tmp_path / "art"), "--corpus", str(tmp_path / "corpus")])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "nnts fuzz: model: " in out and "no findings" in out
    assert not (tmp_path / "art").exists()   # made for findings, removed when there were none


def test_plain_loop_writes_the_first_finding(tmp_path, capsys):
    """The loop used without atheris: seeded, and a finding becomes an artifact."""
    def harness(data):
        if len(data) > 3:
            raise RuntimeError("too long")
    harness.seed_inputs = lambda: [b"ab"]
    args = argparse.Namespace(seed=1, corpus=None, runs=1000, max_time=0, timeout=5,
                              artifact_prefix=str(tmp_path / "h-"))
    assert engine.plain_loop(harness, args) == 1
    out = capsys.readouterr().out
    written = glob.glob(str(tmp_path / "h-crash-*"))
    assert len(written) == 1 and f"Test unit written to {written[0]}" in out and "RuntimeError: too long" in out
    assert len(open(written[0], "rb").read()) > 3


@pytest.mark.parametrize("argv, message", [
    (["fuzz", "--harness", "model", "--driver", "nosuch"], "nosuch"),
    (["fuzz", "--replay", "/nonexistent/artifact"], "no such file"),
    (["fuzz"], "--harness"),
])
def test_nnts_fuzz_bad_arguments(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


class _BuiltOnTheReference(ReferenceDevice):
    """A driver adding nothing to the reference: what goes wrong in it is the reference's."""


def test_reference_bug_is_named_as_such(monkeypatch):
    """An exception the reference driver raises alike is a ReferenceBug, not a driver finding;
    one only the driver under test raises stays the driver's."""
    def overflowing(self, *args):
        raise OverflowError("cannot convert float infinity to integer")
    monkeypatch.setattr(ReferenceDevice, "prepare_model", overflowing)
    harness = targets.make("execute", _BuiltOnTheReference(), [CORPUS])
    with pytest.raises(harnesses.ReferenceBug, match="reference driver itself raises OverflowError") as e:
        harness(harness.seed_inputs()[0])
    assert isinstance(e.value.__cause__, OverflowError)
    monkeypatch.undo()

    class OwnFault(ReferenceDevice):
        def prepare_model(self, *args):
            raise OverflowError("the driver's own")
    harness = targets.make("execute", OwnFault(), [CORPUS])
    with pytest.raises(OverflowError, match="the driver's own"):
        harness(harness.seed_inputs()[0])


def test_reference_bug_gets_its_own_artifact_and_fuzzing_goes_on(tmp_path, capsys):
    """The engine saves a reference bug as reference-bug-<sha1> (once per kind of exception)
    and keeps fuzzing: no finding against the driver, exit status 0."""
    def harness(data):
        if len(data) > 3:
            try:
                raise OverflowError("in the reference")
            except OverflowError as e:
                raise harnesses.ReferenceBug("the reference driver itself raises OverflowError") from e
    harness.seed_inputs = lambda: [b"ab"]
    recorded = engine.Recorded(harness, str(tmp_path / "pending"), str(tmp_path / "h-"))
    args = argparse.Namespace(seed=1, corpus=None, runs=200, max_time=0, timeout=5,
                              artifact_prefix=str(tmp_path / "h-"))
    assert engine.plain_loop(recorded, args) == 0
    out = capsys.readouterr().out
    written = glob.glob(str(tmp_path / "h-reference-bug-*"))
    assert len(written) == 1 and f"Reference bug written to {written[0]}" in out
    assert "OverflowError: in the reference" in out and not glob.glob(str(tmp_path / "h-crash-*"))


def test_a_remote_driver_named_relative_to_the_callers_folder_is_found(tmp_path, capsys, monkeypatch):
    """The fuzzing child runs in a scratch folder: `remote:./my_driver` still names the caller's."""
    import stat
    import sys
    driver = tmp_path / "my_driver"
    driver.write_text(f"#!/bin/sh\nexec {sys.executable} -m nnts serve reference\n")
    driver.chmod(driver.stat().st_mode | stat.S_IXUSR)
    corpus = json.loads(open(os.path.join(CORPUS, "arithmetic.json")).read())
    corpus["tests"] = corpus["tests"][:1]  # each seed input starts the driver: one is enough
    (tmp_path / "one.json").write_text(json.dumps(corpus))
    monkeypatch.chdir(tmp_path)
    code = cli.main(["fuzz", "--harness", "remote", "--driver", "remote:./my_driver", "--runs", "3", "--seed", "1",
                     "--vectors", "one.json", "--artifacts", "art"])
    out = capsys.readouterr().out
    assert code == 0 and "no findings" in out, out[-3000:]
    assert engine._from_here("socket:s.sock") == f"socket:{tmp_path}/s.sock"
    assert engine._from_here("remote:nnts serve reference") == "remote:nnts serve reference"  # found on PATH
