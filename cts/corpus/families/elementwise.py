"""Elementwise arithmetic, activations, comparisons, logical operations and SELECT."""
from __future__ import annotations

import numpy as np
from scipy import special

from .common import ACT, B8, F16, F32, I32, QA, QS, C, I, O, T, family, fsc, i32, model, rnd, short, tname, tq, variants


def gen_binary():
    family("elementwise_binary")
    rng = np.random.default_rng(1)
    fns = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply}
    for op, fn in fns.items():
        for code, relaxed in variants(op):
            a = rnd((2, 3), rng=rng)
            b = rnd((3,), rng=rng) if op != "MUL" else rnd((3,), -2, 2, rng=rng)
            act = 1 if code in (QA, QS) else 0
            if code == I32:
                t = T(I32)
                act = 0
            else:
                t = tq(code)
            out_t = tq(code, scale=1.0) if (op == "MUL" and t.quant) else t
            ra, rb = t.rt(a), t.rt(b)
            model(f"{op.lower()}_{tname(code, relaxed)}_broadcast", op,
                  [I(t, ra), I(t, rb), i32(act)], [O(out_t, ACT[act](fn(ra, rb)))], relaxed=relaxed)
        # fused activations on float32
        for act in ((2, 3) if op == "ADD" else (3,)):
            a, b = rnd((4,), rng=rng), rnd((4,), rng=rng)
            model(f"{op.lower()}_float32_act{act}", op, [I(T(F32), a), I(T(F32), b), i32(act)],
                  [O(T(F32), ACT[act](fn(a, b)))])
    # quant with differing scales (ADD)
    for code in (QA, QS):
        ta, tb, to = T(code, 0.25, 100 if code == QA else 3), T(code, 0.5, 120 if code == QA else -7), \
            T(code, 0.75, 128 if code == QA else 1)
        a, b = ta.rt(rnd((2, 2), -8, 8, 0.25, rng)), tb.rt(rnd((2, 2), -8, 8, 0.5, rng))
        for op, fn in (("ADD", np.add), ("SUB", np.subtract)):
            model(f"{op.lower()}_{short(code).lower()}_scales", op, [I(ta, a), I(tb, b), i32(0)],
                  [O(to, fn(a, b))], at_least=29 if op == "SUB" else 27)
    # DIV
    for code, relaxed in variants("DIV"):
        if code == I32:
            a = np.array([7, -7, 7, -7, 6, 0])
            b = np.array([2, 2, -2, -2, 3, 5])
            # NNAPI: integer division rounds toward negative infinity
            model("div_int32", "DIV", [I(T(I32), a), I(T(I32), b), i32(0)], [O(T(I32), np.floor_divide(a, b))])
            continue
        t = T(code)
        a = rnd((2, 3), rng=rng)
        b = np.array([0.5, -2.0, 4.0])
        model(f"div_{tname(code, relaxed)}", "DIV", [I(t, a), I(t, b), i32(0)], [O(t, a / b)], relaxed=relaxed)
    model("div_float32_relu", "DIV", [I(T(F32), [1.0, -3.0, 5.0]), I(T(F32), [4.0, 2.0, 8.0]), i32(1)],
          [O(T(F32), [0.25, 0.0, 0.625])])
    # MAXIMUM / MINIMUM
    for op, fn in (("MAXIMUM", np.maximum), ("MINIMUM", np.minimum)):
        for code, relaxed in variants(op):
            t = T(I32) if code == I32 else tq(code)
            a, b = t.rt(rnd((2, 3), rng=rng)), t.rt(rnd((1, 3), rng=rng))
            model(f"{op.lower()}_{tname(code, relaxed)}", op, [I(t, a), I(t, b)], [O(t, fn(a, b))], relaxed=relaxed)
        for code in (QA, QS):
            ta, tb, to = tq(code), T(code, 0.25, 5), T(code, 1.0, 2)
            a, b = ta.rt(rnd((4,), rng=rng)), tb.rt(rnd((4,), rng=rng))
            model(f"{op.lower()}_{short(code).lower()}_scales", op, [I(ta, a), I(tb, b)], [O(to, fn(a, b))])
    # POW
    for code, relaxed in variants("POW"):
        t = T(code)
        a = np.array([[1.0, 2.0, 3.0], [0.5, 4.0, 1.5]])
        b = np.array([2.0, 0.5, -1.0])
        model(f"pow_{tname(code, relaxed)}", "POW", [I(t, a), I(t, b)], [O(t, np.power(t.rt(a), t.rt(b)))],
              relaxed=relaxed)
    # invalid: fused activation code 4 does not exist
    model("add_float32_bad_activation", "ADD", [I(T(F32), [1.0, 2.0]), I(T(F32), [1.0, 2.0]), i32(4)],
          [O(T(F32), [0.0, 0.0])], fail=True)
    # invalid: shapes that do not broadcast
    model("add_float32_bad_broadcast", "ADD", [I(T(F32), np.zeros((2, 3))), I(T(F32), np.zeros((2,))), i32(0)],
          [O(T(F32), np.zeros((2, 3)))], fail=True)


def gen_unary():
    family("elementwise_unary")
    rng = np.random.default_rng(2)
    x_any = np.array([[-2.5, -1.0, -0.25, 0.0], [0.75, 1.5, 3.0, 4.25]])
    x_pos = np.array([[0.25, 0.5, 1.0, 2.0], [3.0, 4.0, 6.25, 9.0]])
    table = {
        "ABS": (np.abs, x_any), "EXP": (np.exp, x_any), "LOG": (np.log, x_pos), "NEG": (np.negative, x_any),
        "RSQRT": (lambda v: 1 / np.sqrt(v), x_pos), "SIN": (np.sin, x_any), "SQRT": (np.sqrt, x_pos),
        "FLOOR": (np.floor, x_any),
    }
    for op, (fn, x) in table.items():
        for code, relaxed in variants(op):
            if code == I32:
                xi = np.array([[-5, 0, 3], [7, -1, 2]])
                model(f"{op.lower()}_int32", op, [I(T(I32), xi)], [O(T(I32), fn(xi))])
                continue
            if code in (QA, QS):  # RSQRT quant (feature level 7)
                ti = T(code, 0.25, 0 if code == QA else -128)
                to = T(code, 1 / 32, 0 if code == QA else -128)
                xq = np.array([0.25, 0.5, 1.0, 2.0, 4.0, 9.0, 16.0, 25.0])
                model(f"{op.lower()}_{short(code).lower()}", op, [I(ti, xq)], [O(to, fn(ti.rt(xq)))])
                continue
            t = T(code)
            model(f"{op.lower()}_{tname(code, relaxed)}", op, [I(t, x)], [O(t, fn(t.rt(x)))], relaxed=relaxed)
    # FLOOR on a rank-4 tensor
    x = rnd((1, 2, 2, 2), -3, 3, 0.25, rng)
    model("floor_float32_4d", "FLOOR", [I(T(F32), x)], [O(T(F32), np.floor(x))])


# == activations ==================================================================================

def gen_activations():
    family("activations")
    rng = np.random.default_rng(3)
    x = np.array([[-6.5, -3.0, -1.0, -0.5], [0.0, 0.5, 1.0, 2.5], [4.0, 6.0, 7.5, -0.25]])
    simple = {"RELU": lambda v: np.maximum(v, 0), "RELU1": lambda v: np.clip(v, -1, 1),
              "RELU6": lambda v: np.clip(v, 0, 6)}
    for op, fn in simple.items():
        for code, relaxed in variants(op):
            t = tq(code)
            model(f"{op.lower()}_{tname(code, relaxed)}", op, [I(t, x)], [O(t, fn(t.rt(x)))], relaxed=relaxed)
    sig = lambda v: 1 / (1 + np.exp(-v))
    outq = {"LOGISTIC": ({QA: (1 / 256, 0), QS: (1 / 256, -128)}, sig),
            "TANH": ({QA: (1 / 128, 128), QS: (1 / 128, 0)}, np.tanh)}
    for op, (oq, fn) in outq.items():
        for code, relaxed in variants(op):
            t = tq(code, scale=0.125) if code in (QA, QS) else T(code)
            to = T(code, *oq[code]) if code in oq else t
            xv = x / 2
            model(f"{op.lower()}_{tname(code, relaxed)}", op, [I(t, xv)], [O(to, fn(t.rt(xv)))], relaxed=relaxed)
    # ELU
    for code, relaxed in variants("ELU"):
        t = T(code)
        model(f"elu_{tname(code, relaxed)}", "ELU", [I(t, x), fsc(t, 0.5)],
              [O(t, np.where(x > 0, x, 0.5 * (np.exp(t.rt(x)) - 1)))], relaxed=relaxed)
    # HARD_SWISH: x * relu6(x + 3) / 6
    hs = lambda v: v * np.clip(v + 3, 0, 6) / 6
    for code, relaxed in variants("HARD_SWISH"):
        t = tq(code, scale=0.125) if code in (QA, QS) else T(code)
        to = tq(code, scale=1 / 16) if code in (QA, QS) else t
        xv = np.array([-4.0, -3.0, -2.5, -1.0, -0.375, 0.0, 0.625, 1.5, 2.875, 3.0, 4.25, 5.0])
        model(f"hard_swish_{tname(code, relaxed)}", "HARD_SWISH", [I(t, xv)], [O(to, hs(t.rt(xv)))],
              relaxed=relaxed)
    # PRELU: x if x >= 0 else alpha * x (alpha broadcast)
    for code, relaxed in variants("PRELU"):
        t = tq(code)
        ta = T(code, 0.25, 128 if code == QA else 0) if t.quant else t
        to = T(code, 0.25, 120 if code == QA else 5) if t.quant else t
        xv = t.rt(rnd((1, 2, 2, 3), -6, 6, rng=rng))
        al = ta.rt(np.array([0.0, 0.5, -1.25]))
        model(f"prelu_{tname(code, relaxed)}", "PRELU", [I(t, xv), C(ta, al)],
              [O(to, np.where(xv >= 0, xv, xv * al))], relaxed=relaxed)
    # SOFTMAX: exp(beta*(x - max)) / sum
    for code, relaxed in variants("SOFTMAX"):
        t = tq(code, scale=0.25) if code in (QA, QS) else T(code)
        to = T(code, 1 / 256, 0 if code == QA else -128) if t.quant else t
        xv = t.rt(rnd((2, 5), -3, 3, 0.25, rng))
        model(f"softmax_{tname(code, relaxed)}", "SOFTMAX", [I(t, xv), fsc(t, 1.0)],
              [O(to, special.softmax(xv, axis=-1))], relaxed=relaxed)
        if code == F16 or relaxed:
            continue
        # beta != 1 and an explicit axis (feature level 3)
        xv = t.rt(rnd((2, 3, 2), -2, 2, 0.25, rng))
        model(f"softmax_{tname(code, relaxed)}_axis1_beta", "SOFTMAX", [I(t, xv), fsc(t, 0.5), i32(1)],
              [O(to, special.softmax(0.5 * xv, axis=1))], relaxed=relaxed, at_least=29)
    model("softmax_float32_4d", "SOFTMAX", [I(T(F32), x.reshape(1, 3, 1, 4)), fsc(F32, 2.0)],
          [O(T(F32), special.softmax(2 * x.reshape(1, 3, 1, 4), axis=-1))])
    model("softmax_float32_bad_beta", "SOFTMAX", [I(T(F32), [[1.0, 2.0]]), fsc(F32, 0.0)],
          [O(T(F32), [[0.5, 0.5]])], fail=True)
    # LOG_SOFTMAX: beta*x - max - log(sum(exp(beta*x - max)))
    for code, relaxed in variants("LOG_SOFTMAX"):
        t = T(code)
        xv = rnd((2, 4), -3, 3, 0.25, rng)
        model(f"log_softmax_{tname(code, relaxed)}", "LOG_SOFTMAX", [I(t, xv), fsc(t, 1.0), i32(-1)],
              [O(t, special.log_softmax(xv, axis=-1))], relaxed=relaxed)
        model(f"log_softmax_{tname(code, relaxed)}_axis0", "LOG_SOFTMAX", [I(t, xv), fsc(t, 2.0), i32(0)],
              [O(t, special.log_softmax(2 * xv, axis=0))], relaxed=relaxed)


# == comparisons, logical, select =================================================================

def gen_comparisons():
    family("comparisons")
    rng = np.random.default_rng(4)
    fns = {"EQUAL": np.equal, "NOT_EQUAL": np.not_equal, "GREATER": np.greater, "GREATER_EQUAL": np.greater_equal,
           "LESS": np.less, "LESS_EQUAL": np.less_equal}
    for op, fn in fns.items():
        for code, relaxed in variants(op, extra=(B8,)):
            if relaxed:
                continue
            if code == B8:
                a = np.array([True, True, False, False])
                b = np.array([True, False, True, False])
                model(f"{op.lower()}_bool8", op, [I(T(B8), a), I(T(B8), b)], [O(T(B8), fn(a, b))])
                continue
            t = tq(code, scale=1.0) if code == I32 else tq(code)
            a = rnd((2, 3), -2, 2, rng=rng)
            b = np.array([-0.5, 0.0, 1.0])
            a[0] = b  # some equal elements
            model(f"{op.lower()}_{tname(code, relaxed)}", op, [I(t, a), I(t, b)], [O(T(B8), fn(a, b))],
                  relaxed=relaxed, types=[code])
        for code in ((QA, QS) if op in ("EQUAL", "GREATER") else ()):  # differing scales: compare real values
            ta, tb = T(code, 0.5, 10), T(code, 0.25, -20 if code == QS else 40)
            a = np.array([1.0, 2.0, -1.0, 3.5, 0.0])
            b = np.array([1.0, 1.75, -0.75, 3.75, 0.0])
            model(f"{op.lower()}_{short(code).lower()}_scales", op, [I(ta, a), I(tb, b)], [O(T(B8), fn(a, b))],
                  types=[code])
    a = np.array([[True, False, True], [False, False, True]])
    b = np.array([True, True, False])
    model("logical_and_bool8", "LOGICAL_AND", [I(T(B8), a), I(T(B8), b)], [O(T(B8), a & b)])
    model("logical_or_bool8", "LOGICAL_OR", [I(T(B8), a), I(T(B8), b)], [O(T(B8), a | b)])
    model("logical_not_bool8", "LOGICAL_NOT", [I(T(B8), a)], [O(T(B8), ~a)])
    # SELECT: output[i] = cond[i] ? input1[i] : input2[i]
    for code, relaxed in variants("SELECT"):
        t = T(I32) if code == I32 else tq(code)
        c = np.array([[True, False, True], [False, True, False]])
        a, b = rnd((2, 3), rng=rng), rnd((2, 3), rng=rng)
        model(f"select_{tname(code, relaxed)}", "SELECT", [I(T(B8), c), I(t, a), I(t, b)], [O(t, np.where(c, a, b))],
              relaxed=relaxed, types=[code])
    model("select_float32_bad_shape", "SELECT", [I(T(B8), [True, False]), I(T(F32), [1.0, 2.0, 3.0]),
                                                 I(T(F32), [1.0, 2.0, 3.0])],
          [O(T(F32), [1.0, 2.0, 3.0])], fail=True)
