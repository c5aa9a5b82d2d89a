# Generated from chapters/01_token_recurrence.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""Checks shared by every public GDN2 function: FLA's layout, one clear error per mistake."""

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GDN2Dims:
    """Sizes of a validated call: batch B, length T, heads H, key dim K, value dim V, and the scale."""

    B: int
    T: int
    H: int
    K: int
    V: int
    scale: float


def _check_state(name, state, shape, device, layout="[B, H, K, V]"):
    """A state argument: a floating-point tensor of the given shape (named by layout) on the given device."""
    _check_tensor(name, state, 4, layout)
    if state.shape != shape:
        raise ValueError(f"{name} must have shape {layout} = {shape}, got {tuple(state.shape)}")
    if state.device != device:
        raise ValueError(f"{name} must be on q's device {device}, got {state.device}")


def _check_tensor(name, x, ndim, layout):
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dims {layout}, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")


def validate_inputs(q, k, v, g, b, w, scale=None, initial_state=None) -> GDN2Dims:
    """Check a GDN2 call and return its sizes.

    q, k, g, b: [B, T, H, K]; v, w: [B, T, H, V]; initial_state: [B, H, K, V] or None;
    scale: a positive number, or None for K ** -0.5. Raises ValueError naming the argument.
    """
    for name, x in dict(q=q, k=k, g=g, b=b).items():
        _check_tensor(name, x, 4, "[B, T, H, K]")
    for name, x in dict(v=v, w=w).items():
        _check_tensor(name, x, 4, "[B, T, H, V]")
    B, T, H, K = q.shape
    V = v.shape[-1]
    for name, x in dict(k=k, g=g, b=b).items():
        if x.shape != q.shape:
            raise ValueError(f"{name} must have the shape of q [B, T, H, K] = {tuple(q.shape)}, "
                             f"got {tuple(x.shape)}")
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(f"v must share [B, T, H] = {tuple(q.shape[:3])} with q, got {tuple(v.shape[:3])}")
    if w.shape != v.shape:
        raise ValueError(f"w must have the shape of v [B, T, H, V] = {tuple(v.shape)}, got {tuple(w.shape)}")
    for name, x in dict(k=k, v=v, g=g, b=b, w=w).items():
        if x.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {x.device}")
    if initial_state is not None:
        _check_state("initial_state", initial_state, (B, H, K, V), q.device)
    if scale is None:
        scale = K ** -0.5
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number or None, got {scale!r}")
    return GDN2Dims(B, T, H, K, V, float(scale))


def one_token_as_sequence(q, k, v, g, b, w, state=None):
    """Check a decoding step's inputs (q, k, g, b: [B, H, K]; v, w: [B, H, V]; state: [B, H, K, V] or None)
    and return q..w as sequences of one token, [B, 1, H, D], for the sequence functions to validate and run
    (the state's errors name it ``state``, as the step functions do)."""
    named = dict(q=q, k=k, v=v, g=g, b=b, w=w)
    for name, x in named.items():
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must be a 3-dim tensor [B, H, D] for one decoding step, got {shape}")
    if state is not None:
        _check_state("state", state, (*q.shape, v.shape[-1]), q.device)
    return tuple(x.unsqueeze(1) for x in named.values())


def compute_dtype(*tensors) -> torch.dtype:
    """float64 if any given tensor is float64 (the oracle's precision), else float32."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def check_positive_ints(**sizes):
    """Every keyword argument an int of at least 1 (a bool is not one), else a ValueError naming the first that
    is not; every size, count and block width of the package is checked so."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def random_inputs(B, T, H, K, V, dtype=torch.float64, erase_max=2.0, decay_max=None, seed=None, device="cpu"):
    """Random GDN2 inputs in their ranges: q, v standard normal; unit-norm keys; g = logsigmoid of a normal, or
    -decay_max * U(0, 1) when decay_max is given; b in [0, erase_max]; w in [0, 1]. Drawn in float64 (from a
    generator seeded with seed, else from torch's global one), then cast. Returns (q, k, v, g, b, w): q, k, g, b
    [B, T, H, K] and v, w [B, T, H, V] in dtype on device."""
    check_positive_ints(B=B, T=T, H=H, K=K, V=V)
    for name, bound in dict(erase_max=erase_max, decay_max=decay_max).items():
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float)) or not bound >= 0):
            raise ValueError(f"{name} must be a number >= 0{' or None' if name == 'decay_max' else ''}, got {bound!r}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    gen = None if seed is None else torch.Generator().manual_seed(seed)

    def draw(sample, *shape):
        return sample(*shape, generator=gen, dtype=torch.float64)

    q = draw(torch.randn, B, T, H, K)
    k = torch.nn.functional.normalize(draw(torch.randn, B, T, H, K), dim=-1)
    v = draw(torch.randn, B, T, H, V)
    g = (torch.nn.functional.logsigmoid(draw(torch.randn, B, T, H, K)) if decay_max is None
         else -decay_max * draw(torch.rand, B, T, H, K))
    b = erase_max * draw(torch.rand, B, T, H, K)
    w = draw(torch.rand, B, T, H, V)
    return tuple(x.to(device=device, dtype=dtype) for x in (q, k, v, g, b, w))
