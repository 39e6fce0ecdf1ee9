"""Spatial parameters shared by the convolutions and the pooling operations: the padding schemes
(explicit, implicit SAME/VALID), output sizes, the NCHW layout flag, and the strided views of a
padded input that the convolutions and pools compute on."""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Call, T, check
from nnapi_ref.ops.common import check_fuse_code
from nnapi_ref.types import PaddingCode

I32 = T.INT32


class Spatial:
    """Parsed spatial parameters of a convolution or pooling call (see :func:`parse_spatial`)."""

    __slots__ = ("explicit", "pads", "padding_code", "stride_w", "stride_h", "extra", "fuse", "nchw",
                 "dilation_w", "dilation_h")

    def __init__(self):
        self.explicit = False
        self.pads = (0, 0, 0, 0)  # left, right, top, bottom
        self.padding_code = None
        self.stride_w = self.stride_h = 1
        self.extra: list = []
        self.fuse = 0
        self.nchw = False
        self.dilation_w = self.dilation_h = 1


def parse_spatial(call: Call, name: str, base: int, n_extra: int, dilation: bool) -> Spatial:
    """Read the padding/stride/extra/fuse/layout/dilation scalars of a convolution or pooling.

    ``base`` is the index of the first scalar input; ``n_extra`` scalars (depth multiplier,
    number of groups, filter sizes) follow the strides. The explicit-padding form is recognised,
    as NNAPI does, by an INT32 where the implicit form would have its layout BOOL."""
    ins = call.ins
    n = len(ins)
    p = Spatial()
    layout_implicit = base + 4 + n_extra
    p.explicit = n >= base + 7 + n_extra and ins[layout_implicit].type == I32
    first_optional = base + (7 if p.explicit else 4) + n_extra
    n_optional = n - first_optional
    check(n_optional in ((0, 1, 3) if dilation else (0, 1)),
          f"{name}: {n} inputs: only one dilation factor given, both are required" if n_optional == 2
          else f"{name}: unexpected number of inputs {n}")
    if p.explicit:
        p.pads = tuple(int(ins[base + k].scalar()) for k in range(4))
        check(min(p.pads) >= 0, f"{name}: explicit paddings must be >= 0, got {list(p.pads)}")
        s = base + 4
    else:
        p.padding_code = int(ins[base].scalar())
        check(p.padding_code in (PaddingCode.SAME, PaddingCode.VALID),
              f"{name}: implicit padding scheme {p.padding_code} is not SAME (1) or VALID (2)")
        s = base + 1
    p.stride_w, p.stride_h = int(ins[s].scalar()), int(ins[s + 1].scalar())
    check(p.stride_w > 0 and p.stride_h > 0, f"{name}: strides must be > 0, got width {p.stride_w} "
                                             f"height {p.stride_h}")
    p.extra = [ins[s + 2 + k].scalar() for k in range(n_extra)]
    p.fuse = int(ins[s + 2 + n_extra].scalar())
    check_fuse_code(p.fuse)
    if n_optional >= 1:
        p.nchw = bool(ins[first_optional].scalar())
    if n_optional == 3:
        p.dilation_w = int(ins[first_optional + 1].scalar())
        p.dilation_h = int(ins[first_optional + 2].scalar())
        check(p.dilation_w > 0 and p.dilation_h > 0,
              f"{name}: dilation factors must be > 0, got width {p.dilation_w} height {p.dilation_h}")
    return p


def same_padding(in_size: int, stride: int, dilation: int, filter_size: int, transpose: bool = False):
    """NNAPI's SAME padding (head, tail) for one spatial dimension."""
    effective = (filter_size - 1) * dilation + 1
    out_size = (in_size + stride - 1) // stride
    total = (out_size - 1) * stride + effective - in_size
    head = max(total, 0) // 2
    tail = total - head if (total > 0 or transpose) else 0
    return head, tail


def resolve_padding(p: Spatial, in_h: int, in_w: int, filter_h: int, filter_w: int) -> None:
    """Turn an implicit padding scheme into explicit paddings, in place."""
    if p.explicit:
        return
    if p.padding_code == PaddingCode.SAME:
        left, right = same_padding(in_w, p.stride_w, p.dilation_w, filter_w)
        top, bottom = same_padding(in_h, p.stride_h, p.dilation_h, filter_h)
        p.pads = (left, right, top, bottom)
    else:
        p.pads = (0, 0, 0, 0)


def out_size(in_size: int, filter_size: int, stride: int, dilation: int, head: int, tail: int) -> int:
    effective = (filter_size - 1) * dilation + 1
    return (in_size - effective + stride + head + tail) // stride


def nhwc_dims(shape, nchw: bool):
    """(batches, height, width, channels) of a 4-D tensor in the given layout."""
    if nchw:
        return shape[0], shape[2], shape[3], shape[1]
    return shape[0], shape[1], shape[2], shape[3]


def to_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return x.transpose(0, 2, 3, 1) if nchw else x


def from_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x


def layout_shape(n, h, w, c, nchw: bool):
    return (n, c, h, w) if nchw else (n, h, w, c)


def padded_window_input(x: np.ndarray, top: int, left: int, need_h: int, need_w: int, fill=0) -> np.ndarray:
    """The NHWC input as seen by windows starting at padded row/col 0: ``need_h`` x ``need_w``
    padded rows/cols, input row r at padded row r + top, ``fill`` elsewhere."""
    n, h, w, c = x.shape
    if top == 0 and left == 0 and need_h <= h and need_w <= w:
        return x[:, :need_h, :need_w, :]
    xp = np.full((n, need_h, need_w, c), fill, dtype=x.dtype)
    r0, r1 = max(0, -top), min(h, need_h - top)
    c0, c1 = max(0, -left), min(w, need_w - left)
    if r1 > r0 and c1 > c0:
        xp[:, r0 + top:r1 + top, c0 + left:c1 + left, :] = x[:, r0:r1, c0:c1, :]
    return xp


def im2col(xp: np.ndarray, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, oh: int, ow: int) -> np.ndarray:
    """(N, OH, OW, KH, KW, C) windows of a padded NHWC input, as a strided view."""
    s0, s1, s2, s3 = xp.strides
    n, c = xp.shape[0], xp.shape[3]
    return np.lib.stride_tricks.as_strided(xp, (n, oh, ow, kh, kw, c), (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3),
                                           writeable=False)


