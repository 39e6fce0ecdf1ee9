"""Single-operation random tests (AOSP's SingleOperationTest): each case is one operation of a
random form (padding, layout, dilation, optional inputs, operand types at the driver's feature
level) on random values, run on the driver under test and on the reference, and compared with
the accuracy tier AOSP assigns the operation (:mod:`nnts.generators.single`):

* strict (data movement, comparisons: RESHAPE, GATHER, EQUAL, ARGMAX, TOPK_V2...): float32
  |diff| <= 1e-6 + 1e-6 |expected|, bias 1e-7, MSE 1e-10; float16 1e-3 + 1e-3 |expected|, bias
  1e-4, MSE 1e-8; quant8 1 step, bias 0.1, MSE 0.1;
* medium (ADD, MUL, FLOOR, RELU*, CONCATENATION, QUANTIZE, CAST, DIV from level 30...): float32
  1e-5 + 1e-5 |expected|, bias 1e-6, MSE 1e-8; float16 1e-2 + 1e-2 |expected|, bias 1e-3, MSE
  1e-5; quant8 2 steps, bias 1.2, MSE 1.2;
* relaxed (LOGISTIC, TANH, SOFTMAX, pools, FULLY_CONNECTED, REDUCE_*, MEAN, RESIZE_*...): float32
  1e-3 + 1e-3 |expected|, bias 3e-5, MSE 1e-6; float16 1 + |expected|, bias 5e-3, MSE 1e-3;
  quant8 10 steps, bias 1.5, MSE 1.5;
* conv (CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D, TRANSPOSE_CONV_2D): float32 2e-2 + 2e-2
  |expected|, bias 4e-4, MSE 1e-5; float16 1 + |expected|, bias 5e-2, MSE 1e-2; quant8 10 steps,
  bias 1.5, MSE 1.5;
* every tier: int32 within 1, bool8 at most ceil(10%) of the elements differing, relaxed float32
  judged by the tier's float16 figures.

One case in four starts from a tensor of dimensions up to 1000 (at most 300,000 elements).

Besides the random-graph generator's 92 operations, the recurrent operations the graphs leave out
(LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_RNN,
QUANTIZED_16BIT_LSTM, QUANTIZED_LSTM: :mod:`nnts.generators.recurrent`), IF with generated branches and
WHILE with a generated body and a counted condition (:mod:`nnts.generators.control_flow`), relaxed tier;
LSTM's scratch buffer is not compared. The detection operations BOX_WITH_NMS_LIMIT (hard, linear
and gaussian NMS), GENERATE_PROPOSALS (NHWC and NCHW) and DETECTION_POSTPROCESSING (regular and
fast NMS), relaxed tier, with scores and boxes drawn so that every threshold, overlap and score
order they decide on is clear of rounding (:mod:`nnts.generators.detection`); HASHTABLE_LOOKUP, strict.

``--random-ops N`` cases from seed ``--random-seed S`` (ids ``<OPERATION>-seed<S>``: case S tests
operation S modulo the operation count, so N cases give each operation about N / 100 of them). For a
partial driver the cases are drawn from what it supports (:mod:`nnts.runners.support`, asked once
per run): its operations, data types and signatures, so its N cases run on it as a complete
driver's do; the reproducer records the support it was drawn under. A
failing case is shrunk by dimension cuts and saved under ``--reproducers`` with the replay
command.
"""
from __future__ import annotations

from nnapi_ref.types import type_name
from nnts.cts.support import conclude
from nnts.generators.single import case_operation
from nnts.runners.differential import run_single


class OperationSeed(int):
    """A case's seed that names the case's operation, so that the breadth-first order
    (:mod:`nnts.runners.ordering`, which groups tests by their parameter's ``operation`` and ``dtype``)
    runs one case of every operation before a second of any, not one case per pass."""

    dtype = "-"  # drawn with the case, not known at collection
    support = None  # the driver's (nnts.runners.support): a partial driver's cases are of what it supports

    @property
    def operation(self) -> str:
        return case_operation(self, self.support).name


def pytest_generate_tests(metafunc):
    if "operation_seed" in metafunc.fixturenames:
        base, n = metafunc.config.getoption("random_seed"), metafunc.config.getoption("random_ops")
        support = metafunc.config.nnts_support()
        seeds = []
        for s in range(base, base + n):
            seeds.append(OperationSeed(s))
            seeds[-1].support = support
        metafunc.parametrize("operation_seed", seeds, ids=[f"{s.operation}-seed{s}" for s in seeds])


def test_random_operation(operation_seed, devices, reference_devices, request, driver_spec, crash_reproducer):
    support = operation_seed.support
    level = support.level if support is not None else min(d.feature_level for d in devices)
    request.node.nnts_op = case_operation(operation_seed, support).name  # the report's support matrix
    result = run_single(operation_seed, devices, reference_devices, level, request.config.getoption("reproducers"),
                        driver_spec, support, crash_file=crash_reproducer)
    if result.graph is not None and result.graph.operations:
        graph = result.graph
        request.node.nnts_dtype = type_name(graph.operands[graph.operations[0].inputs[0]].type)
    conclude(result)
