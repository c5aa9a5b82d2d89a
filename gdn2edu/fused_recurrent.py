# Generated from chapters/08_triton_recurrence.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""GDN2's token recurrence as one fused Triton kernel: the state stays on chip from the first token to the last."""

import contextlib
import math
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # must precede the first `import triton`

import triton
import triton.language as tl

from gdn2edu.inputs import compute_dtype, one_token_as_sequence, validate_inputs

# Triton reads the switch when a kernel is defined; this is its reading of the variable's value
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
_MAX_HEAD_DIM = 256
_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check_kernel_dtypes(named, oracles):
    """Each tensor of the dict named (None skipped) is of a type the Triton kernels take; else a ValueError
    naming it, and the float64 oracles to use instead."""
    for name, x in named.items():
        if x is not None and x.dtype not in _INPUT_DTYPES:
            raise ValueError(f"{name} must be float32, bfloat16 or float16 (the kernels accumulate in float32), "
                             f"got {x.dtype}; {oracles} compute in float64")


@triton.jit(do_not_specialize=["T"])
def _fused_recurrent_gdn2_fwd_kernel(q, k, v, g, b, w, o, h0, ht, scale, T,
                                     H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                                     BK: tl.constexpr, BV: tl.constexpr,
                                     USE_INITIAL_STATE: tl.constexpr, STORE_FINAL_STATE: tl.constexpr):
    i_v, i_bh = tl.program_id(0), tl.program_id(1)     # which value block, which (batch, head)
    i_b, i_h = i_bh // H, i_bh % H
    o_k = tl.arange(0, BK)                               # key lanes 0..BK-1
    o_v = i_v * BV + tl.arange(0, BV)                    # this program's value lanes
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]

    # token 0 of sequence i_b, head i_h, in the contiguous [B, T, H, D] layout (int64: no overflow)
    row = i_b.to(tl.int64) * T * H + i_h
    p_q, p_k, p_g, p_b = q + row * K + o_k, k + row * K + o_k, g + row * K + o_k, b + row * K + o_k
    p_v, p_w, p_o = v + row * V + o_v, w + row * V + o_v, o + row * V + o_v
    p_h = i_bh.to(tl.int64) * K * V + o_k[:, None] * V + o_v[None, :]   # offsets of the state tile

    b_h = tl.zeros([BK, BV], dtype=tl.float32)           # S[:, J] lives in registers, in float32
    if USE_INITIAL_STATE:
        b_h += tl.load(h0 + p_h, mask=m_h, other=0).to(tl.float32)
    for _ in range(0, T):
        b_q = tl.load(p_q, mask=m_k, other=0).to(tl.float32) * scale
        b_k = tl.load(p_k, mask=m_k, other=0).to(tl.float32)
        b_g = tl.load(p_g, mask=m_k, other=0).to(tl.float32)
        b_b = tl.load(p_b, mask=m_k, other=0).to(tl.float32)
        b_v = tl.load(p_v, mask=m_v, other=0).to(tl.float32)
        b_w = tl.load(p_w, mask=m_v, other=0).to(tl.float32)
        b_h *= tl.exp(b_g)[:, None]                      # S <- Diag(exp g) S
        b_r = tl.sum(b_h * (b_b * b_k)[:, None], axis=0)  # r = S^T (b * k)
        b_h += b_k[:, None] * (b_w * b_v - b_r)[None, :]  # S <- S + k (w * v - r)^T
        b_o = tl.sum(b_h * b_q[:, None], axis=0)          # o = S^T (scale * q)
        tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)
        p_q, p_k, p_g, p_b = p_q + H * K, p_k + H * K, p_g + H * K, p_b + H * K   # next token
        p_v, p_w, p_o = p_v + H * V, p_w + H * V, p_o + H * V
    if STORE_FINAL_STATE:
        tl.store(ht + p_h, b_h, mask=m_h)


L2NORM_EPS = 1e-6            # FLA's use_qk_l2norm_in_kernel: x / sqrt(sum x^2 + 1e-6)


def _check_float_tensor(name, x, layout):
    """x is a floating-point torch.Tensor; else a ValueError naming it (layout: what was expected)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor {layout}, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor {layout}, got dtype {x.dtype}")


def _check_finite_number(name, value, low, high, expected):
    """value is a finite int or float (not a bool) in [low, high); else a ValueError naming it."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not low <= value < high):
        raise ValueError(f"{name} must be {expected}, got {value!r}")


def _on_device(x):
    """Launch on x's GPU even when another one is current (a no-op on the CPU); every entry point of the
    book's kernels launches under it."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


L2NORM_TILES = dict(BR=16, num_warps=4)    # rows per program and warps: not yet tuned on a GPU


@triton.jit
def _row_tile(x, r, o_d, N, D: tl.constexpr):
    """Rows r [BR] and columns o_d [BD] of x [N, D] as float32 (zeros outside), their offsets and mask."""
    m = (r[:, None] < N) & (o_d[None, :] < D)
    offsets = r[:, None].to(tl.int64) * D + o_d[None, :]
    return tl.load(x + offsets, mask=m, other=0.0).to(tl.float32), offsets, m


@triton.jit(do_not_specialize=["N"])
def l2_norm_fwd_kernel(x, y, rstd, eps, N, D: tl.constexpr, BR: tl.constexpr, BD: tl.constexpr):
    """Program i_r: rows r = i_r * BR + [0, BR) of x [N, D]: rstd[r] = rsqrt(sum(x[r]^2) + eps), float32, kept
    for the backward, and y[r] = x[r] * rstd[r] in y's type."""
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    b_x, offsets, m = _row_tile(x, r, tl.arange(0, BD), N, D)
    b_rstd = tl.rsqrt(tl.sum(b_x * b_x, axis=1) + eps)
    tl.store(y + offsets, (b_x * b_rstd[:, None]).to(y.dtype.element_ty), mask=m)
    tl.store(rstd + r, b_rstd, mask=r < N)


@triton.jit(do_not_specialize=["N"])
def l2_norm_bwd_kernel(x, rstd, dy, dx, N, D: tl.constexpr, BR: tl.constexpr, BD: tl.constexpr):
    """Program i_r, rows r as in the forward: with y = x * rstd recomputed, dx = rstd * (dy - y * sum(dy * y))."""
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    b_x, offsets, m = _row_tile(x, r, tl.arange(0, BD), N, D)
    b_dy, _, _ = _row_tile(dy, r, tl.arange(0, BD), N, D)
    b_rstd = tl.load(rstd + r, mask=r < N, other=0.0)
    b_y = b_x * b_rstd[:, None]
    b_dx = b_rstd[:, None] * (b_dy - b_y * tl.sum(b_dy * b_y, axis=1)[:, None])
    tl.store(dx + offsets, b_dx.to(dx.dtype.element_ty), mask=m)


def _row_grid(N, D, tiles):
    """Rows per program (at most tiles["BR"]), the tile width and the grid for N rows of width D, one program
    a block of whole rows: the L2 norm's, and Chapter 12's gated norm's."""
    BR = min(tiles["BR"], triton.next_power_of_2(N))
    return BR, triton.next_power_of_2(D), (triton.cdiv(N, BR),)


class L2NormFunction(torch.autograd.Function):
    """y = x * rsqrt(sum(x^2, -1) + eps) with the Triton kernels, x contiguous [N, D]; saves rstd [N] (float32)."""

    @staticmethod
    def forward(ctx, x, eps):
        N, D = x.shape
        BR, BD, grid = _row_grid(N, D, L2NORM_TILES)
        y, rstd = torch.empty_like(x), x.new_empty(N, dtype=torch.float32)
        l2_norm_fwd_kernel[grid](x, y, rstd, eps, N, D=D, BR=BR, BD=BD, num_warps=L2NORM_TILES["num_warps"])
        ctx.save_for_backward(x, rstd)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable                 # the backward kernel has no backward of its own
    def backward(ctx, dy):
        x, rstd = ctx.saved_tensors
        N, D = x.shape
        BR, BD, grid = _row_grid(N, D, L2NORM_TILES)
        dx = torch.empty_like(x)
        l2_norm_bwd_kernel[grid](x, rstd, dy.contiguous(), dx, N, D=D, BR=BR, BD=BD,
                                 num_warps=L2NORM_TILES["num_warps"])
        return dx, None


L2NORM_MIN_EPS = torch.finfo(torch.float32).tiny    # float32's smallest normal number, about 1.2e-38


def _check_norm_eps(eps):
    """A ValueError naming eps unless it is a finite number >= L2NORM_MIN_EPS: a norm x * rsqrt(s(x) + eps)
    turns a zero row into 0 * inf = NaN when eps is 0 or rounds to 0 in float32, where the kernels add it
    (Chapter 12's gated norm takes the same bound)."""
    _check_finite_number("eps", eps, L2NORM_MIN_EPS, float("inf"),
                         f"a finite number >= {L2NORM_MIN_EPS:.3g} (float32's smallest normal number; with eps = 0 "
                         "a zero row is 0 * inf = NaN)")


def _check_l2_arguments(x, eps):
    """ValueErrors naming the argument unless x is a floating-point tensor [..., D] and eps passes
    _check_norm_eps (the kernels and the PyTorch path for 16- and 32-bit x add it in float32)."""
    _check_float_tensor("x", x, "[..., D]")
    if x.dim() == 0:
        raise ValueError("x must have at least one dim [..., D] (it is normalised over the last), got a 0-dim tensor")
    _check_norm_eps(eps)


def _l2_kernel_refusal(x):
    """Why the L2 kernels cannot take the floating-point tensor x [..., D], or None when they can."""
    if x.dtype not in _INPUT_DTYPES:
        return f"x must be float32, bfloat16 or float16 for the kernels, got {x.dtype}"
    if not 1 <= x.shape[-1] <= _MAX_HEAD_DIM or x.numel() == 0:
        return f"x must have shape [..., D] with 1 <= D <= {_MAX_HEAD_DIM} and at least one row, got {tuple(x.shape)}"
    if x.device.type != "cuda" and not _INTERPRET:
        return f"x must be on a CUDA device, got {x.device}"
    return None


def l2_normalize_triton(x, eps=L2NORM_EPS):
    """l2_normalize with the Triton kernels (in the interpreter when there is no GPU). x: [..., D] float32,
    bfloat16 or float16 with 1 <= D <= 256, at least one row; eps: a finite number >= L2NORM_MIN_EPS, as
    l2_normalize's. Returns x's dtype, differentiable in x."""
    _check_l2_arguments(x, eps)
    refusal = _l2_kernel_refusal(x)
    if refusal is not None:
        raise ValueError(f"{refusal}; l2_normalize takes any floating-point x")
    return _l2_normalize_kernels(x, eps)


def _l2_normalize_kernels(x, eps):
    """The launch of both entry points, on checked arguments: the kernels on x's device, x viewed as rows."""
    with _on_device(x):
        return L2NormFunction.apply(x.contiguous().view(-1, x.shape[-1]), float(eps)).view(x.shape)


def l2_normalize(x, eps=L2NORM_EPS):
    """x / sqrt(sum(x^2) + eps) over the last dim: FLA's use_qk_l2norm_in_kernel. x: [..., D], floating point;
    eps: a finite number >= L2NORM_MIN_EPS (float32's smallest normal number, about 1.2e-38), so that a zero row
    maps to zero and not to 0/0 = NaN. Computes in float32 (float64 for float64 x) and returns x's dtype: with the
    Triton kernels for CUDA tensors the kernels take (l2_normalize_triton), else in PyTorch."""
    _check_l2_arguments(x, eps)
    if x.is_cuda and _l2_kernel_refusal(x) is None:
        return _l2_normalize_kernels(x, eps)
    y = x.to(compute_dtype(x))
    return (y * torch.rsqrt(y.square().sum(-1, keepdim=True) + eps)).to(x.dtype)


def gate_activation(g, A_log, dt_bias=None, lower_bound=None):
    """FLA's use_gate_in_kernel gate from raw logits g [..., H, K], with x = g + dt_bias:
    -exp(A_log) * softplus(x), or lower_bound * sigmoid(exp(A_log) * x) when lower_bound is a number.
    A_log: [H]; dt_bias: [H * K] or None, both floating point on g's device; lower_bound: None or a finite
    number < 0. Computes and returns float32 (float64 for float64 g). Only shapes, dtypes and devices are
    checked, never values in the tensors, so the checks cost no device synchronisation."""
    _check_float_tensor("g", g, "[..., H, K]")
    if g.dim() < 2:
        raise ValueError(f"g must have at least two dims [..., H, K], got shape {tuple(g.shape)}")
    H, K = g.shape[-2:]
    for name, x, shape, layout in (("A_log", A_log, (H,), "[H]"), ("dt_bias", dt_bias, (H * K,), "[H * K]")):
        if x is None and name == "dt_bias":
            continue
        _check_float_tensor(name, x, layout)
        if x.shape != shape or x.device != g.device:
            raise ValueError(f"{name} must have shape {layout} = {shape} (g is [..., H, K] = {tuple(g.shape)}) on "
                             f"g's device {g.device}, got {tuple(x.shape)} on {x.device}")
    if lower_bound is not None:
        _check_finite_number("lower_bound", lower_bound, -float("inf"), 0, "a finite number < 0 or None")
    dtype = compute_dtype(g)
    x = g.to(dtype)
    if dt_bias is not None:
        x = x + dt_bias.to(dtype).view(H, K)
    rate = A_log.to(dtype).exp()[:, None]
    if lower_bound is None:
        return -rate * torch.nn.functional.softplus(x)
    return lower_bound * torch.sigmoid(rate * x)


def apply_kernel_options(q, k, v, g, b, w, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, A_log=None,
                         dt_bias=None, lower_bound=None):
    """FLA's input options of chunk_gdn2 and fused_recurrent_gdn2, applied before the kernel, differentiable
    (the gate in PyTorch, the L2 normalisation with l2_normalize's kernels on a GPU). q, k, g, b: [B, T, H, K];
    v, w: [B, T, H, V]. use_qk_l2norm_in_kernel: l2_normalize q and k. use_gate_in_kernel: g holds raw logits,
    turned into log-decays by gate_activation with A_log [H] (required), dt_bias [H * K] (optional) and
    lower_bound (None, or a number < 0). Returns (q, k, v, g, b, w)."""
    for name, flag in (("use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel),
                       ("use_gate_in_kernel", use_gate_in_kernel)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be a bool, got {flag!r}")
    if not use_gate_in_kernel:
        for name, x in (("A_log", A_log), ("dt_bias", dt_bias)):
            if x is not None:
                raise ValueError(f"{name} is read only with use_gate_in_kernel=True, which was not given")
        if not use_qk_l2norm_in_kernel:
            return q, k, v, g, b, w
    validate_inputs(q, k, v, g, b, w)
    if use_gate_in_kernel:
        if A_log is None:
            raise ValueError("A_log [H] is required with use_gate_in_kernel=True (g then holds raw logits)")
        g = gate_activation(g, A_log, dt_bias, lower_bound)            # checks A_log, dt_bias and lower_bound
    if use_qk_l2norm_in_kernel:
        q, k = l2_normalize(q), l2_normalize(k)
    return q, k, v, g, b, w


def _tiles(K, V):
    """Tile sizes (BK, BV): all K in one tile, V split so that a BK x BV float32 tile has <= 2048 entries."""
    BK = triton.next_power_of_2(K)
    return BK, min(triton.next_power_of_2(V), max(8, 2048 // BK))


def fused_recurrent_gdn2(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False, *,
                         use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, A_log=None, dt_bias=None,
                         lower_bound=None):
    """Gated DeltaNet-2 by its token recurrence in one Triton kernel, the state held in registers.

    q, k: [B, T, H, K] queries and keys; v: [B, T, H, V] values;
    g: [B, T, H, K] natural-log decay; b: [B, T, H, K] erase gate; w: [B, T, H, V] write gate;
    scale: query scale, None for K ** -0.5; initial_state: [B, H, K, V] or None (zeros).
    FLA's options use_qk_l2norm_in_kernel and use_gate_in_kernel (g then holds raw logits; A_log [H],
    dt_bias [H * K], lower_bound), applied before the kernel by apply_kernel_options.
    Inputs in bfloat16, float16 or float32 (may be mixed), K and V at most 256, CUDA tensors (or any
    device with TRITON_INTERPRET=1, the interpreter). Computes in float32. Forward only, as FLA's: no gradients.
    Returns (o [B, T, H, V] in v's dtype, final state [B, H, K, V] in float32 or None).
    """
    if lower_bound is not None and use_gate_in_kernel is not True:
        raise ValueError(f"lower_bound bounds the gate of use_gate_in_kernel=True, which was not given "
                         f"(lower_bound={lower_bound!r})")
    q, k, v, g, b, w = apply_kernel_options(q, k, v, g, b, w, use_qk_l2norm_in_kernel, use_gate_in_kernel, A_log,
                                            dt_bias, lower_bound)
    dims = validate_inputs(q, k, v, g, b, w, scale, initial_state)
    _check_kernel_dtypes(dict(q=q, k=k, v=v, g=g, b=b, w=w, initial_state=initial_state), "recurrent_gdn2")
    for name, size in (("k", dims.K), ("v", dims.V)):
        if size > _MAX_HEAD_DIM:
            raise ValueError(f"{name} has head dim {size}, fused_recurrent_gdn2 supports at most {_MAX_HEAD_DIM} "
                             "(its state tiles live in registers)")
    if q.device.type != "cuda" and not _INTERPRET:
        raise ValueError(f"q must be a CUDA tensor for the compiled kernel, got device {q.device}; "
                         "TRITON_INTERPRET=1 (set before importing triton) runs it on the CPU")
    q, k, v, g, b, w = (x.contiguous() for x in (q, k, v, g, b, w))
    o = torch.empty_like(v)
    h0 = initial_state.contiguous() if initial_state is not None else None
    ht = q.new_empty(dims.B, dims.H, dims.K, dims.V, dtype=torch.float32) if output_final_state else None
    BK, BV = _tiles(dims.K, dims.V)
    grid = (triton.cdiv(dims.V, BV), dims.B * dims.H)
    with _on_device(q):
        _fused_recurrent_gdn2_fwd_kernel[grid](
            q, k, v, g, b, w, o, h0, ht, dims.scale, dims.T, H=dims.H, K=dims.K, V=dims.V, BK=BK, BV=BV,
            USE_INITIAL_STATE=h0 is not None, STORE_FINAL_STATE=ht is not None, num_warps=1)
    return o, ht


def fused_recurrent_gdn2_step(q, k, v, g, b, w, state=None, scale=None):
    """One decoding step with the fused kernel: ``fused_recurrent_gdn2`` with T = 1 and a cached state.

    q, k, g, b: [B, H, K]; v, w: [B, H, V]; state: [B, H, K, V] or None (zeros).
    Returns (o [B, H, V] in v's dtype, new state [B, H, K, V] in float32); ``state`` is left unchanged.
    """
    o, new_state = fused_recurrent_gdn2(*one_token_as_sequence(q, k, v, g, b, w, state), scale=scale,
                                        initial_state=state, output_final_state=True)
    return o[:, 0], new_state
