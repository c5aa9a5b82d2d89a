# Generated from chapters/12_gdn2_layer.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""The layer's short causal depthwise convolution and SiLU in Triton, forward and backward, in the layer's
[B, T, D] layout: no transpose and no concatenation of the cached inputs."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # must precede the @triton.jit decorations below

import triton
import triton.language as tl

from gdn2edu.fused_recurrent import _INTERPRET, _check_kernel_dtypes, _on_device

CONV_TILES = dict(BT=64, BD=64, num_warps=4)         # not yet tuned on a GPU


@triton.jit
def _rows(x, state, i_b, r, o_d, T, D: tl.constexpr, W: tl.constexpr, HAS_STATE: tl.constexpr):
    """Rows r [BT] of sequence i_b's inputs, channels o_d [BD], as float32 [BT, BD]: x's for 0 <= r < T, the
    state's column W - 1 + r for -(W - 1) <= r < 0 (zeros without a state), zeros elsewhere."""
    m_d = o_d[None, :] < D
    b_x = tl.load(x + (i_b.to(tl.int64) * T + r[:, None]) * D + o_d[None, :],
                  mask=(r[:, None] >= 0) & (r[:, None] < T) & m_d, other=0.0).to(tl.float32)
    if HAS_STATE:
        b_x += tl.load(state + (i_b.to(tl.int64) * D + o_d[None, :]) * (W - 1) + (W - 1 + r[:, None]),
                       mask=(r[:, None] < 0) & (r[:, None] >= 1 - W) & m_d, other=0.0).to(tl.float32)
    return b_x


@triton.jit
def _weight(weight, j, o_d, D: tl.constexpr, W: tl.constexpr):
    """Tap j of channels o_d, float32 [BD]."""
    return tl.load(weight + o_d * W + j, mask=o_d < D, other=0.0).to(tl.float32)


@triton.jit
def _pre_activation(x, weight, bias, state, i_b, t, o_d, T, D: tl.constexpr, W: tl.constexpr, BT: tl.constexpr,
                    BD: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_STATE: tl.constexpr):
    """z = bias + sum_j weight[:, j] * xbar[t + j] for output rows t [BT], float32 [BT, BD]; xbar's row t + j
    is input row t + j - (W - 1)."""
    b_z = tl.zeros([BT, BD], dtype=tl.float32)
    if HAS_BIAS:
        b_z += tl.load(bias + o_d, mask=o_d < D, other=0.0).to(tl.float32)[None, :]
    for j in tl.static_range(W):
        b_z += _weight(weight, j, o_d, D, W)[None, :] * _rows(x, state, i_b, t + j - (W - 1), o_d, T, D, W,
                                                               HAS_STATE)
    return b_z


@triton.jit
def _grad_pre_activation(x, weight, bias, state, dy, i_b, t, o_d, T, D: tl.constexpr, W: tl.constexpr,
                         BT: tl.constexpr, BD: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_STATE: tl.constexpr):
    """dz = dy * silu'(z) for output rows t [BT] (zero outside 0 <= t < T), z recomputed; float32 [BT, BD]."""
    b_z = _pre_activation(x, weight, bias, state, i_b, t, o_d, T, D, W, BT, BD, HAS_BIAS, HAS_STATE)
    b_dy = _rows(dy, dy, i_b, t, o_d, T, D, W, False)
    b_s = tl.sigmoid(b_z)
    return b_dy * b_s * (1 + b_z * (1 - b_s))


@triton.jit(do_not_specialize=["T"])
def short_conv_fwd_kernel(x, weight, bias, state, y, T, D: tl.constexpr, W: tl.constexpr, BT: tl.constexpr,
                          BD: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_STATE: tl.constexpr):
    """Program (i_b * cdiv(T, BT) + i_t, i_d): y = silu(z) on rows i_t * BT + [0, BT) and channels
    i_d * BD + [0, BD) of sequence i_b (batch and row blocks share the first grid axis, which has no 65535 cap)."""
    i_b, i_t = tl.program_id(0) // tl.cdiv(T, BT), tl.program_id(0) % tl.cdiv(T, BT)
    i_d = tl.program_id(1)
    t = i_t * BT + tl.arange(0, BT)
    o_d = i_d * BD + tl.arange(0, BD)
    b_z = _pre_activation(x, weight, bias, state, i_b, t, o_d, T, D, W, BT, BD, HAS_BIAS, HAS_STATE)
    tl.store(y + (i_b.to(tl.int64) * T + t[:, None]) * D + o_d[None, :], (b_z * tl.sigmoid(b_z)).to(y.dtype.element_ty),
             mask=(t[:, None] < T) & (o_d[None, :] < D))


@triton.jit(do_not_specialize=["T"])
def short_conv_bwd_kernel(x, weight, bias, state, dy, dx, dstate, dw, db, T, D: tl.constexpr, W: tl.constexpr,
                          BT: tl.constexpr, BD: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_STATE: tl.constexpr,
                          STATE_GRAD: tl.constexpr):
    """Program (p = i_b * cdiv(T + W - 1, BT) + i_t, i_d) owns input rows s = i_t * BT - (W - 1) + [0, BT)
    (s < 0: the state's) of sequence i_b and channels o_d: d xbar[s] = sum_j weight[:, j] * dz[s + W - 1 - j],
    stored to dx (and dstate with STATE_GRAD); and the partial sums of its output rows t = s:
    dw[p, j] = sum_t dz[t] * xbar[t + j] and db[p] = sum_t dz[t]."""
    blocks = tl.cdiv(T + W - 1, BT)
    i_b, i_t, i_d = tl.program_id(0) // blocks, tl.program_id(0) % blocks, tl.program_id(1)
    s = i_t * BT - (W - 1) + tl.arange(0, BT)
    o_d = i_d * BD + tl.arange(0, BD)
    m_d = o_d < D
    p = tl.program_id(0).to(tl.int64)
    b_dz = _grad_pre_activation(x, weight, bias, state, dy, i_b, s, o_d, T, D, W, BT, BD, HAS_BIAS, HAS_STATE)
    if HAS_BIAS:
        tl.store(db + p * D + o_d, tl.sum(b_dz, axis=0), mask=m_d)
    for j in tl.static_range(W):
        b_x = _rows(x, state, i_b, s + j - (W - 1), o_d, T, D, W, HAS_STATE)
        tl.store(dw + (p * W + j) * D + o_d, tl.sum(b_dz * b_x, axis=0), mask=m_d)
    b_dx = _weight(weight, W - 1, o_d, D, W)[None, :] * b_dz
    for j in tl.static_range(W - 1):
        b_dx += _weight(weight, j, o_d, D, W)[None, :] * _grad_pre_activation(
            x, weight, bias, state, dy, i_b, s + W - 1 - j, o_d, T, D, W, BT, BD, HAS_BIAS, HAS_STATE)
    tl.store(dx + (i_b.to(tl.int64) * T + s[:, None]) * D + o_d[None, :], b_dx.to(dx.dtype.element_ty),
             mask=(s[:, None] >= 0) & (s[:, None] < T) & m_d[None, :])
    if STATE_GRAD:
        tl.store(dstate + (i_b.to(tl.int64) * D + o_d[None, :]) * (W - 1) + (W - 1 + s[:, None]),
                 b_dx.to(dstate.dtype.element_ty), mask=(s[:, None] < 0) & m_d[None, :])


def _grid(x, n_rows):
    """Tiles and programs for n_rows rows of each sequence of x [B, T, D]:
    (BT, BD, (B * cdiv(n_rows, BT), cdiv(D, BD)))."""
    B, T, D = x.shape
    BT = min(CONV_TILES["BT"], triton.next_power_of_2(n_rows))
    BD = min(CONV_TILES["BD"], triton.next_power_of_2(D))
    return BT, BD, (B * triton.cdiv(n_rows, BT), triton.cdiv(D, BD))


def _launch(kernel, x, weight, bias, state, n_rows, *tensors, **flags):
    """One launch over _grid(x, n_rows); tensors follow state in the kernel's arguments; a missing bias or
    state is passed as x, unread."""
    BT, BD, grid = _grid(x, n_rows)
    kernel[grid](x, weight, x if bias is None else bias, x if state is None else state, *tensors, x.shape[1],
                 D=x.shape[2], W=weight.shape[-1], BT=BT, BD=BD, HAS_BIAS=bias is not None,
                 HAS_STATE=state is not None, num_warps=CONV_TILES["num_warps"], **flags)


class ShortConvFunction(torch.autograd.Function):
    """y = silu(conv(xbar)) with the Triton kernels; the backward recomputes z. Contiguous inputs of
    short_conv_triton; state None or [B, D, W - 1] with W >= 2."""

    @staticmethod
    def forward(ctx, x, weight, bias, state):
        y = torch.empty_like(x)
        _launch(short_conv_fwd_kernel, x, weight, bias, state, x.shape[1], y)
        ctx.save_for_backward(x, weight, bias, state)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, state = ctx.saved_tensors
        B, T, D = x.shape
        W = weight.shape[-1]
        state_grad = state is not None and ctx.needs_input_grad[3]
        n_rows = T + W - 1                               # the state's W - 1 rows, then x's
        blocks = _grid(x, n_rows)[2][0]
        dx, dstate = torch.empty_like(x), torch.empty_like(state) if state_grad else None
        dw = x.new_empty(blocks, W, D, dtype=torch.float32)
        db = x.new_empty(blocks, D, dtype=torch.float32) if bias is not None else None
        _launch(short_conv_bwd_kernel, x, weight, bias, state, n_rows, dy.contiguous(), dx,
                x if dstate is None else dstate, dw, x if db is None else db, STATE_GRAD=state_grad)
        dweight = dw.sum(0).T.reshape(weight.shape).to(weight.dtype)
        dbias = None if bias is None else db.sum(0).to(bias.dtype)
        return dx, dweight, dbias, dstate


def _check_conv_inputs(x, weight, state, bias=None):
    """ValueErrors naming the argument unless weight: [D, 1, W], x: [B, T, D], bias None or [D] and state None
    or [B, D, W - 1], all on x's device."""
    if not isinstance(weight, torch.Tensor) or weight.dim() != 3 or weight.shape[1] != 1:
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"weight must have shape [D, 1, W], got {shape}")
    D, _, W = weight.shape
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != D:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must have shape [B, T, D = {D}], got {shape}")
    if state is not None and state.shape != (x.shape[0], D, W - 1):
        raise ValueError(f"state must have shape [B, D, W - 1] = {(x.shape[0], D, W - 1)}, "
                         f"got {tuple(state.shape)}")
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.shape != (D,)):
        shape = tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise ValueError(f"bias must be None or have shape [D] = ({D},), got {shape}")
    for name, t in (("weight", weight), ("bias", bias), ("state", state)):
        if t is not None and t.device != x.device:
            raise ValueError(f"{name} must be on x's device {x.device}, got {t.device}")


def _check_triton_call(x, tensors, nonempty, pytorch_path):
    """What every Triton entry point of this chapter checks once its shapes are right: x on a CUDA device (or
    the interpreter selected), x not empty (``nonempty`` says what that means), and the tensors {name: tensor
    or None} in float32 or a 16-bit type (float64 belongs to ``pytorch_path``)."""
    if x.device.type != "cuda" and not _INTERPRET:
        raise ValueError(f"x must be on a CUDA device for the Triton kernels, got {x.device} (or set "
                         "TRITON_INTERPRET=1 before importing gdn2edu)")
    if x.numel() == 0:
        raise ValueError(f"x must have {nonempty} for the Triton kernels, got shape {tuple(x.shape)}")
    _check_kernel_dtypes(tensors, pytorch_path)


def short_conv_triton(x, weight, bias=None, state=None, output_final_state=True):
    """Causal depthwise convolution then SiLU, in Triton. x: [B, T, D] (float32, bfloat16 or float16);
    weight: [D, 1, W]; bias: [D] or None; state: [B, D, W - 1], the W - 1 inputs before x, or None (zeros).
    Returns (y [B, T, D] in x's dtype, new state [B, D, W - 1] in x's dtype: the last W - 1 inputs, cached
    ones included; None unless output_final_state), differentiable in x, weight, bias and state; accumulates
    in float32."""
    _check_conv_inputs(x, weight, state, bias)
    _check_triton_call(x, dict(x=x, state=state), "B >= 1 and T >= 1",
                       "ShortConvolution's PyTorch path (use_triton=False)")
    B, T, D = x.shape
    W = weight.shape[-1]
    cached = state if W > 1 else None
    with _on_device(x):
        y = ShortConvFunction.apply(x.contiguous(), weight.contiguous(), None if bias is None else bias.contiguous(),
                                    None if cached is None else cached.contiguous())
    if not output_final_state:
        return y, None
    head = x.new_zeros(B, D, W - 1) if state is None else state.to(x.dtype)
    tail = torch.cat([head, x[:, max(T - (W - 1), 0):].transpose(1, 2)], dim=-1)
    return y, tail[..., tail.shape[-1] - (W - 1):]
