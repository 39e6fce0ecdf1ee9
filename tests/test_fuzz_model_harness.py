"""The fuzz model harness's replay (fuzz/harnesses.py Builder): a refused operand ends the seed's
replay, operations replay in a fuzzer-chosen order, nothing more is built once the provider is
exhausted with a referenced model unfinished, only the tested modules are instrumented,
and a runtime crash on the shortened replay is still found, saved and replayed."""
import argparse
import glob
import importlib.util
import os

import numpy as np
import pytest

from nnts.fuzz import engine, harnesses
from nnts.fuzz.harnesses import Builder, BytesProvider
from nnapi_ref import hal
from nnapi_ref.errors import NnapiError
from nnapi_ref.runtime import Model
from nnapi_ref.types import Lifetime, OperandCode as T, OperationCode

F32 = T.TENSOR_FLOAT32
ARITHMETIC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cts", "corpus",
                          "arithmetic.json")


class Recording(Model):
    """A runtime model that notes each builder call and whether the runtime refused it."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def _noted(name):
        def call(self, *args):
            try:
                result = getattr(Model, name)(self, *args)
            except NnapiError:
                self.calls.append((name, "refused"))
                raise
            self.calls.append((name, args[0] if name == "add_operation" else "ok"))
            return result
        return call

    add_operand = _noted("add_operand")
    set_operand_value = _noted("set_operand_value")
    add_operation = _noted("add_operation")
    set_operand_value_from_model = _noted("set_operand_value_from_model")
    identify_inputs_and_outputs = _noted("identify_inputs_and_outputs")


def _chain() -> hal.Subgraph:
    """z = (x + y) * y, y a constant: operands x, y, fuse code, t, z."""
    operands = [hal.Operand(F32, (2,), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(F32, (2,), lifetime=Lifetime.CONSTANT_COPY, value=np.array([1, 2], np.float32)),
                hal.Operand(T.INT32, (), lifetime=Lifetime.CONSTANT_COPY, value=np.array(0, np.int32)),
                hal.Operand(F32, (2,)),
                hal.Operand(F32, (2,), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    operations = [hal.Operation(OperationCode.ADD, (0, 1, 2), (3,)), hal.Operation(OperationCode.MUL, (3, 1, 2), (4,))]
    return hal.Subgraph(operands, operations, (0,), (4,))


# Operand 1's type becomes WEIRD_INTS[2] (-1, no operand type): operand decision 1 (mutate),
# operand_type kind 1 (a weird int), its index 2, then dimensions, scale and zero point kept.
REFUSED_OPERAND_1 = bytes([0, 0, 1, 1, 2, 0, 0, 0])  # after the first operation's choice (0)


def test_a_refused_operand_ends_the_seed_replay():
    """After the runtime refuses operand 1, the seed's later operands would take shifted
    indexes: none of them, nor the operations, are replayed; the refused operand's own value
    call (refused: its index is past the last), the inputs and outputs and finish still run."""
    model = Recording()
    Builder(BytesProvider(REFUSED_OPERAND_1), 8, stop_at_rejected_operand=True).subgraph(model, _chain(), [])
    assert model.calls == [("add_operand", "ok"), ("add_operand", "refused"), ("set_operand_value", "refused"),
                           ("identify_inputs_and_outputs", "refused")]
    assert model.operand_count == 1
    with pytest.raises(NnapiError, match="identify_inputs_and_outputs was not called"):
        model.finish()


def test_a_driver_harness_keeps_the_whole_replay():
    """Without stop_at_rejected_operand (the execute harness's Builder), the same input replays
    every later operand and operation, which the driver under test is handed as built."""
    model = Recording()
    Builder(BytesProvider(REFUSED_OPERAND_1), 8).subgraph(model, _chain(), [])
    names = [name for name, _ in model.calls]
    assert names.count("add_operand") == 5 and names.count("add_operation") == 2
    assert model.operand_count == 4


def test_operations_replay_from_a_chosen_one_and_the_runtime_sorts_them():
    """The first byte of a subgraph of several operations picks the first one replayed
    (wrapping around): MUL before the ADD that writes its input is still a valid model, and
    finish() hands the operations over in run order."""
    seed = hal.Model(_chain())
    data = bytes([1])  # then the provider is exhausted: every call kept
    model = Recording()
    builder = Builder(BytesProvider(data), 8, stop_at_rejected_operand=True)
    builder.subgraph(model, seed.main, [])
    model.finish()
    assert [c[1] for c in model.calls if c[0] == "add_operation"] == [OperationCode.MUL, OperationCode.ADD]
    assert [op.type for op in model.hal_model.main.operations] == [OperationCode.ADD, OperationCode.MUL]
    in_order = Recording()
    Builder(BytesProvider(bytes(18)), 8, stop_at_rejected_operand=True).subgraph(in_order, seed.main, [])
    assert [c[1] for c in in_order.calls if c[0] == "add_operation"] == [OperationCode.ADD, OperationCode.MUL]


def test_model_harness_instruments_only_what_it_tests():
    excluded = engine.not_instrumented("model")
    for tested in engine.UNDER_TEST["model"]:
        assert tested not in excluded and importlib.util.find_spec(tested) is not None
    for untested in ("nnapi_ref", "nnapi_ref.errors", "nnapi_ref.hal", "nnapi_ref.types", "nnapi_ref.runtime",
                     "nnapi_ref.runtime.devices", "nnapi_ref.runtime.compilation", "nnapi_ref.ops",
                     "nnapi_ref.remote.server", "nnapi_ref.drivers.reference", "nnapi_ref.vectors"):
        assert untested in excluded
    assert all(importlib.util.find_spec(name) is not None for name in excluded[:5])
    assert engine.not_instrumented("execute") == []  # a driver harness instruments all of nnapi_ref


def test_a_runtime_crash_past_a_refused_operand_is_found_saved_and_replayed(tmp_path, capsys, monkeypatch):
    """A runtime bug on the path a refused operand's own value call takes (a value set on an
    index past the last) is still found by the model harness, saved, and replays."""
    original = Model.set_operand_value

    def crashes_past_the_last(self, index, value):
        if isinstance(index, int) and index >= self.operand_count:
            raise IndexError("value set past the last operand")
        return original(self, index, value)
    monkeypatch.setattr(Model, "set_operand_value", crashes_past_the_last)
    harness = harnesses.make("model", None, [ARITHMETIC])
    args = argparse.Namespace(seed=1, corpus=None, runs=3000, max_time=0, timeout=10,
                              artifact_prefix=str(tmp_path / "model-"))
    assert engine.plain_loop(engine.Recorded(harness, str(tmp_path / "pending")), args) == 1
    out = capsys.readouterr().out
    (artifact,) = glob.glob(str(tmp_path / "model-crash-*"))
    assert "IndexError: value set past the last operand" in out
    with open(artifact, "rb") as f:
        data = f.read()
    with pytest.raises(IndexError, match="past the last operand"):
        harness(data)
    monkeypatch.undo()
    harness(data)  # on the runtime as it is: refused with a result code, no finding


def _if_seed() -> hal.Model:
    from nnapi_ref import vectors
    from nnapi_ref.cases import CORPUS
    return next(t.model for t in vectors.load_file(os.path.join(CORPUS, "control_flow.json"))
                if t.model.main.operations[0].type == OperationCode.IF)


@pytest.mark.parametrize("tail, built", [(b"", 1), (bytes(64), 3)], ids=["exhausted", "bytes left"])
def test_nothing_more_is_built_once_the_provider_is_exhausted_with_a_branch_unfinished(tail, built, monkeypatch):
    """An IF seed whose first branch has its operand 0 refused: with the provider exhausted,
    the other branch and the main model would replay unchanged (the main model's value call
    naming the unfinished branch refused, finish() refusing it): not built. With bytes left
    (zeros: every call kept), they are."""
    models = []

    class Noted(Recording):
        def __init__(self):
            super().__init__()
            models.append(self)
    monkeypatch.setattr(harnesses, "Model", Noted)
    seed = _if_seed()
    Builder(BytesProvider(bytes([1, 1, 2]) + tail), 8, stop_at_rejected_operand=True).build(seed)
    built_models = [m for m in models if m.calls]
    assert len(built_models) == built and built_models[0].calls[0] == ("add_operand", "refused")
    assert not built_models[0].finished
    if built == 3:  # the other branch finishes; the main model names the unfinished one
        assert built_models[1].finished and not built_models[2].finished
        assert ("set_operand_value_from_model", "refused") in built_models[2].calls


@pytest.mark.parametrize("spelling, accepted", [(0, True), (1, True), (2, True), (3, False)],
                         ids=["list", "floats", "numpy", "bool"])
def test_mutated_operands_spell_their_dimensions_otherwise(spelling, accepted):
    """A mutated operand may pass its dimensions as a list, of floats, of numpy integers or with
    a bool: add_operand converts the first three to the same operand and refuses the bool."""
    # first operation 0; operand 0 mutated with type, dimensions, scale and zero point kept,
    # then spelled (decision 1) in the given way
    data = bytes([0, 1, 0, 0, 0, 0, 1, spelling])
    model = Recording()
    Builder(BytesProvider(data), 8, stop_at_rejected_operand=True).subgraph(model, _chain(), [])
    assert model.calls[0] == ("add_operand", "ok" if accepted else "refused")
    if accepted:
        (dims,) = {o.dimensions for o in model._to_hal().main.operands[:1]}
        assert dims == (2,) and type(dims[0]) is int
