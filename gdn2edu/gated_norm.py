# Generated from chapters/12_gdn2_layer.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""The layer's output norm in Triton, forward and backward: y = weight * x * rsqrt(mean(x^2) + eps) *
sigmoid(gate) over the last dim, one kernel that reads x and gate once and writes y once."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # must precede the @triton.jit decorations below

import triton
import triton.language as tl

from gdn2edu.fused_recurrent import _MAX_HEAD_DIM, _check_norm_eps, _on_device, _row_grid, _row_tile
from gdn2edu.short_conv import _check_triton_call

NORM_TILES = dict(BR=16, num_warps=4)                # not yet tuned on a GPU


@triton.jit(do_not_specialize=["N"])
def gated_norm_fwd_kernel(x, gate, weight, y, rstd, eps, N, D: tl.constexpr, BR: tl.constexpr, BD: tl.constexpr):
    """Program i_r: rows r = i_r * BR + [0, BR) of y = weight * x * rstd * sigmoid(gate), with
    rstd[r] = rsqrt(mean(x[r]^2) + eps) stored for the backward."""
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    o_d = tl.arange(0, BD)
    b_x, offsets, m = _row_tile(x, r, o_d, N, D)                  # Chapter 8's row tiles, of x and of the gate
    b_g, _, _ = _row_tile(gate, r, o_d, N, D)
    b_w = tl.load(weight + o_d, mask=o_d < D, other=0.0).to(tl.float32)
    b_rstd = tl.rsqrt(tl.sum(b_x * b_x, axis=1) / D + eps)
    b_y = b_x * b_rstd[:, None] * b_w[None, :] * tl.sigmoid(b_g)
    tl.store(y + offsets, b_y.to(y.dtype.element_ty), mask=m)
    tl.store(rstd + r, b_rstd, mask=r < N)


@triton.jit(do_not_specialize=["N"])
def gated_norm_bwd_kernel(x, gate, weight, rstd, dy, dx, dgate, dw, N, D: tl.constexpr, BR: tl.constexpr,
                          BD: tl.constexpr):
    """Program i_r, rows r as in the forward, with xhat = x * rstd and s = sigmoid(gate):
    dgate = dy * weight * xhat * s * (1 - s); dxhat = dy * weight * s, dx = rstd * (dxhat - xhat *
    mean(dxhat * xhat)); and the partial sum dw[i_r] = sum_r dy * xhat * s."""
    i_r = tl.program_id(0)
    r = i_r * BR + tl.arange(0, BR)
    o_d = tl.arange(0, BD)
    b_x, offsets, m = _row_tile(x, r, o_d, N, D)
    b_g, _, _ = _row_tile(gate, r, o_d, N, D)
    b_w = tl.load(weight + o_d, mask=o_d < D, other=0.0).to(tl.float32)
    b_rstd = tl.load(rstd + r, mask=r < N, other=0.0)
    b_dy = tl.load(dy + offsets, mask=m, other=0.0).to(tl.float32)
    b_xhat = b_x * b_rstd[:, None]
    b_s = tl.sigmoid(b_g)
    b_dys = b_dy * b_s
    b_dxhat = b_dys * b_w[None, :]
    tl.store(dgate + offsets, (b_dxhat * b_xhat * (1 - b_s)).to(dgate.dtype.element_ty), mask=m)
    b_dx = b_rstd[:, None] * (b_dxhat - b_xhat * (tl.sum(b_dxhat * b_xhat, axis=1) / D)[:, None])
    tl.store(dx + offsets, b_dx.to(dx.dtype.element_ty), mask=m)
    tl.store(dw + i_r.to(tl.int64) * D + o_d, tl.sum(b_dys * b_xhat, axis=0), mask=o_d < D)


class GatedNormFunction(torch.autograd.Function):
    """y = weight * x * rstd * sigmoid(gate) with the Triton kernels, x and gate contiguous [N, D], weight [D];
    saves rstd [N] (float32) and recomputes the rest in the backward."""

    @staticmethod
    def forward(ctx, x, gate, weight, eps):
        N, D = x.shape
        BR, BD, grid = _row_grid(N, D, NORM_TILES)
        y, rstd = torch.empty_like(x), x.new_empty(N, dtype=torch.float32)
        gated_norm_fwd_kernel[grid](x, gate, weight, y, rstd, eps, N, D=D, BR=BR, BD=BD,
                                    num_warps=NORM_TILES["num_warps"])
        ctx.save_for_backward(x, gate, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, gate, weight, rstd = ctx.saved_tensors
        N, D = x.shape
        BR, BD, grid = _row_grid(N, D, NORM_TILES)
        dx, dgate = torch.empty_like(x), torch.empty_like(gate)
        dw = x.new_empty(grid[0], D, dtype=torch.float32)
        gated_norm_bwd_kernel[grid](x, gate, weight, rstd, dy.contiguous(), dx, dgate, dw, N, D=D, BR=BR, BD=BD,
                                    num_warps=NORM_TILES["num_warps"])
        return dx, dgate, dw.sum(0).to(weight.dtype), None


def _check_norm_inputs(x, gate, weight):
    """ValueErrors naming the argument unless weight: [D] with 1 <= D <= 256, x: [..., D] and gate: x's shape
    and dtype, all on x's device."""
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or not 1 <= weight.shape[0] <= _MAX_HEAD_DIM:
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"weight must have shape [D] with 1 <= D <= {_MAX_HEAD_DIM}, got {shape}")
    D = weight.shape[0]
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != D:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must have shape [..., D = {D}], got {shape}")
    if not isinstance(gate, torch.Tensor) or gate.shape != x.shape or gate.dtype != x.dtype:
        got = (tuple(gate.shape), gate.dtype) if isinstance(gate, torch.Tensor) else type(gate).__name__
        raise ValueError(f"gate must have x's shape and dtype {(tuple(x.shape), x.dtype)}, got {got}")
    for name, t in (("gate", gate), ("weight", weight)):
        if t.device != x.device:
            raise ValueError(f"{name} must be on x's device {x.device}, got {t.device}")


def rms_norm_gated_triton(x, gate, weight, eps=1e-5):
    """weight * x * rsqrt(mean(x^2, -1) + eps) * sigmoid(gate) in Triton. x, gate: [..., D], same shape and
    dtype (float32, bfloat16 or float16); weight: [D], D <= 256; eps: a finite number >= float32's smallest
    normal number (else a zero row is NaN). Returns y [..., D] in x's dtype, differentiable in x, gate and
    weight; accumulates in float32."""
    _check_norm_inputs(x, gate, weight)
    _check_norm_eps(eps)
    _check_triton_call(x, dict(x=x, weight=weight), "at least one row", "RMSNormGated's PyTorch path (use_triton=False)")
    D = weight.shape[0]
    with _on_device(x):
        y = GatedNormFunction.apply(x.contiguous().view(-1, D), gate.contiguous().view(-1, D), weight.contiguous(),
                                    float(eps))
    return y.view(x.shape)
