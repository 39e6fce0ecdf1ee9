"""The fuzz model harness's replay (fuzz/harnesses.py Builder): a refused operand ends the seed's
replay, operations replay in a fuzzer-chosen order, nothing more is built once the provider is
exhausted with a referenced model unfinished, only the tested modules are instrumented,
a runtime crash on the shortened replay is still found, saved and replayed; the operations
random_call adds are accepted (fresh operands quantized as their types accept, unless a byte says
otherwise), and a seed's NO_VALUE operand replays omitted."""
import argparse
import glob
import importlib.util
import os

import numpy as np
import pytest

from nnapi_ref import hal, ops
from nnapi_ref.errors import NnapiError
from nnapi_ref.runtime import Model
from nnapi_ref.types import Lifetime, OperandCode as T, OperationCode
from nnapi_ref.validation import operand_type_problem
from nnts.fuzz import engine, harnesses, targets
from nnts.fuzz.harnesses import Builder, BytesProvider

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
    harness = targets.make("model", None, [ARITHMETIC])
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
    from nnts.formats.paths import CORPUS
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


# -- random_call's added operations --------------------------------------------------------------------

def _choice(index: int, count: int) -> bytes:
    """The bytes with which BytesProvider.PickValueInList picks item ``index`` of ``count``."""
    return index.to_bytes(((count - 1).bit_length() + 7) // 8, "little")


def _random_operation_input(code, signature_index: int, how: int = 0) -> bytes:
    """A random_call input adding operation ``code`` with its signature ``signature_index``: kind 0
    (an operation), the operation, the signature, then ``how`` its operands are made (after
    which the exhausted provider answers 0 everywhere: tensors of unknown rank, without values)."""
    codes = harnesses._operation_codes()
    count = len(ops.load_all()[code].signatures)
    return bytes([0]) + _choice(codes.index(code), len(codes)) + _choice(signature_index, count) + bytes([how])


class NotingErrors(Model):
    """A runtime model that keeps the message of each add_operation it refused."""

    def __init__(self):
        super().__init__()
        self.refusals = []

    def add_operation(self, *args):
        try:
            return super().add_operation(*args)
        except NnapiError as e:
            self.refusals.append(str(e))
            raise


def test_every_added_operation_of_every_signature_is_accepted():
    """random_call's fresh operands take a scale and zero point their type accepts: add_operation
    accepts the operation for every signature of the registry (a TENSOR_FLOAT16, TENSOR_BOOL8,
    TENSOR_INT32 or TENSOR_QUANT8_SYMM_PER_CHANNEL operand with scale 0.5, a scalar output with
    0.5, were refused, and the operation with them), and finish() checks the model past its
    operands' types: with the operands not given values named as inputs, the outputs as outputs,
    it finishes, but for per-channel operands of unknown rank (no channel for their scales) and
    the control-flow operations (their MODEL operands name no model)."""
    refused, unfinished, per_channel = [], [], 0
    for code, impl in sorted(ops.load_all().items()):
        for s, signature in enumerate(impl.signatures):
            model = NotingErrors()
            Builder(BytesProvider(_random_operation_input(code, s)), 8).random_call(model)
            if model.refusals:
                refused.append((code.name, s, model.refusals))
                continue
            operands = model._to_hal().main.operands
            inputs = [k for k, o in enumerate(operands) if o.lifetime == Lifetime.TEMPORARY_VARIABLE
                      and k < len(signature.inputs)]
            outputs = list(range(len(signature.inputs), len(operands)))
            model.identify_inputs_and_outputs(inputs, outputs)
            try:
                model.finish()
            except NnapiError as e:
                if T.TENSOR_QUANT8_SYMM_PER_CHANNEL in signature.inputs:
                    assert "per-channel quantization parameters" in str(e)
                    per_channel += 1
                else:
                    unfinished.append((code.name, s, str(e)))
    assert refused == []
    assert per_channel > 0
    assert {name for name, _, _ in unfinished} <= {"IF", "WHILE"}, unfinished


@pytest.mark.parametrize("code, leading", [
    (OperationCode.ADD, (T.TENSOR_FLOAT16, T.TENSOR_FLOAT16)),
    (OperationCode.RANK, (T.TENSOR_INT32,)),  # an INT32 scalar output
    (OperationCode.CONV_2D, (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_INT32)),
    (OperationCode.LESS, (T.TENSOR_QUANT8_ASYMM_SIGNED,)),  # a TENSOR_BOOL8 output
], ids=["float16", "int32-scalar-output", "quant8-per-channel-filter", "bool8-output"])
def test_added_operations_of_quantized_and_other_types_are_accepted(code, leading):
    """An added ADD of float16 tensors, a RANK of an int32 tensor (its INT32 output), a quant8
    CONV_2D with a per-channel filter and an int32 bias, a comparison with its bool8 output:
    each operand added with what its type accepts, the operation accepted (scale 0.5 on the
    float16, per-channel, bool8 and INT32 scalar operands was refused, and the operation)."""
    s = next(i for i, sig in enumerate(ops.load_all()[code].signatures) if sig.inputs[:len(leading)] == leading)
    model = NotingErrors()
    Builder(BytesProvider(_random_operation_input(code, s)), 8).random_call(model)
    assert model.refusals == []
    main = model._to_hal().main
    (operation,) = main.operations
    assert operation.type == code and len(set(operation.inputs + operation.outputs)) == len(main.operands)
    assert tuple(main.operands[k].type for k in operation.inputs[:len(leading)]) == leading
    for operand in main.operands:
        assert operand_type_problem(operand.type, operand.dimensions, operand.scale, operand.zero_point, None,
                                    channel_quant_pending=True) is None


def test_per_channel_operands_get_their_scales():
    """A CONV_2D of a per-channel filter: the filter gets one scale per channel of the dimension
    a byte picks."""
    signatures = ops.load_all()[OperationCode.CONV_2D].signatures
    s = next(i for i, sig in enumerate(signatures) if sig.inputs[1] == T.TENSOR_QUANT8_SYMM_PER_CHANNEL)
    # input: rank 4 (1, 2, 3, 4), no value; filter: rank 4 (2, 2, 2, 2), channel dimension 0, no value
    data = _random_operation_input(OperationCode.CONV_2D, s) + bytes([4, 0, 1, 2, 3, 0, 4, 1, 1, 1, 1, 0, 0])
    model = NotingErrors()
    Builder(BytesProvider(data), 8).random_call(model)
    assert model.refusals == []
    operands = model._to_hal().main.operands
    assert operands[1].type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and operands[1].dimensions == (2, 2, 2, 2)
    assert operands[1].channel_quant.channel_dim == 0 and operands[1].channel_quant.scales == (0.5, 0.5)


def test_a_byte_makes_an_added_operation_with_an_output_that_has_a_value():
    """How 7: the first output gets a value (of one element: a tensor output gets the dimensions
    for it), which add_operation refuses; the only path of the model harness to that check."""
    s = next(i for i, sig in enumerate(ops.load_all()[OperationCode.ADD].signatures) if sig.inputs[0] == F32)
    model = NotingErrors()
    Builder(BytesProvider(_random_operation_input(OperationCode.ADD, s, how=7)), 8).random_call(model)
    assert len(model.refusals) == 1 and "output operand 3 has a value set" in model.refusals[0]
    assert model._to_hal().main.operands[3].lifetime == Lifetime.CONSTANT_COPY


def test_a_byte_still_gives_fresh_operands_scales_their_type_refuses():
    """How 6: each fresh operand's scale and zero point mutated as a seed operand's: here the first
    float16 tensor's scale becomes 0.5 (WEIRD_FLOATS[4]), which add_operand refuses."""
    s = next(i for i, sig in enumerate(ops.load_all()[OperationCode.ADD].signatures)
             if sig.inputs[0] == T.TENSOR_FLOAT16)
    data = _random_operation_input(OperationCode.ADD, s, how=6) + bytes([0, 1, 4])  # rank 0, scale kind 1, 0.5
    model = Recording()
    Builder(BytesProvider(data), 8).random_call(model)
    assert model.calls[0] == ("add_operand", "refused")
    assert harnesses.WEIRD_FLOATS[4] == 0.5


def test_the_model_harness_reaches_output_operand_has_a_value_set(monkeypatch):
    """Through the whole harness (on the plain provider): a seed replayed unchanged, then one
    added operation with a valued output."""
    messages = []
    original = Model.add_operation

    def noted(self, *args):
        try:
            return original(self, *args)
        except NnapiError as e:
            messages.append(str(e))
            raise
    monkeypatch.setattr(Model, "add_operation", noted)
    monkeypatch.setattr(harnesses, "FuzzedDataProvider", None)
    harness = targets.make("model", None, [ARITHMETIC])
    harness.setup()
    index = next(i for i, t in enumerate(harness.seeds) if len(t.model.main.operations) == 1 and
                 not t.model.referenced)
    seed = harness.seeds[index].model.main
    s = next(i for i, sig in enumerate(ops.load_all()[OperationCode.ADD].signatures) if sig.inputs[0] == F32)
    keep = bytes(len(seed.operands) + sum(o.lifetime in harnesses._VALUE_LIFETIMES for o in seed.operands) + 1)
    harness(index.to_bytes(2, "little") + keep + bytes([1]) + _random_operation_input(OperationCode.ADD, s, how=7))
    assert any("has a value set" in m for m in messages), messages


# -- NO_VALUE seed operands ----------------------------------------------------------------------------

def _omitted_weight() -> hal.Subgraph:
    """LSH_PROJECTION with its optional weight omitted (NO_VALUE, of dimensions that would take a value)."""
    operands = [hal.Operand(F32, (2, 2), lifetime=Lifetime.CONSTANT_COPY, value=np.ones((2, 2), np.float32)),
                hal.Operand(F32, (2, 2), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(F32, (2,), lifetime=Lifetime.NO_VALUE),
                hal.Operand(T.INT32, (), lifetime=Lifetime.CONSTANT_COPY, value=np.array(2, np.int32)),
                hal.Operand(T.TENSOR_INT32, (4,), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    return hal.Subgraph(operands, [hal.Operation(OperationCode.LSH_PROJECTION, (0, 1, 2, 3), (4,))], (1,), (4,))


def test_a_no_value_seed_operand_replays_as_omitted():
    """An unchanged replay (2-byte input) omits the operand, as the NDK's setOperandValue(NULL, 0)
    does: it was replayed as a zero-filled constant, which changes the model (here a weight of
    zeros instead of none) or, for an operand of dimensions (0,), is refused."""
    model = Builder(BytesProvider(b""), 8, stop_at_rejected_operand=True).build(hal.Model(_omitted_weight()))
    assert model.finished
    weight = model.hal_model.main.operands[2]
    assert weight.lifetime == Lifetime.NO_VALUE and weight.value is None


def test_mutation_bytes_still_give_a_no_value_seed_operand_a_value():
    """Value kind 3 (random bytes of the operand's size): the omitted weight becomes a constant."""
    # operands 0, 1 kept (and operand 0's value); operand 2 kept, its value of kind 3: 8 bytes
    weight = np.array([0.5, -1.0], np.float32)
    data = bytes([0, 0, 0, 0, 3]) + weight.tobytes()
    model = Builder(BytesProvider(data), 8, stop_at_rejected_operand=True).build(hal.Model(_omitted_weight()))
    operand = model._to_hal().main.operands[2]
    assert operand.lifetime == Lifetime.CONSTANT_COPY
    np.testing.assert_array_equal(np.frombuffer(operand.value.tobytes(), np.float32), weight)
