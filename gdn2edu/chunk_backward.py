# Generated from chapters/06_rewy.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""The complete reverse algorithm of chunked GDN2, and the autograd.Function that runs it (Chapter 6)."""

import torch

from gdn2edu.chunk import (_check_chunk_size, chunk_gdn2_torch, decay_ratios, merge_chunks, split_chunks,
                           state_scan, wy_factors)
from gdn2edu.inputs import compute_dtype, validate_inputs
from gdn2edu.rewy import rewy_chunk_adjoints
from gdn2edu.wy_backward import wy_chunk_adjoints

LOCAL_PULLBACKS = {
    "wy": lambda A, E, Z, S, R, R_bar: wy_chunk_adjoints(A, E, Z, S, R_bar),
    "rewy": lambda A, E, Z, S, R, R_bar: rewy_chunk_adjoints(A, E, S, R, R_bar),
}


def reverse_state_scan(f, do, dht):
    """The reverse scan over chunks: adjoints of the corrections and of every chunk's outgoing state.

    f: WY factors [B, H, N, ...]; do: [B, H, N, n, V]; dht: [B, H, K, V], the final state's adjoint.
    Returns (R_bar [B, H, N, n, V], S_out_bar [B, H, N, K, V], dh0 [B, H, K, V]).
    """
    S_bar, R_bars, S_out_bars = dht, [], []
    for c in reversed(range(do.shape[2])):
        R_bar = f.C_q[:, :, c].mT @ do[:, :, c] + f.kg[:, :, c] @ S_bar             # eq-seq-rbar
        S_out_bars.append(S_bar)
        R_bars.append(R_bar)
        S_bar = (f.Q_g[:, :, c].mT @ do[:, :, c] + f.gamma_n[:, :, c, :, None] * S_bar
                 - f.AE[:, :, c].mT @ R_bar)                                          # eq-seq-sbar
    return torch.stack(R_bars[::-1], dim=2), torch.stack(S_out_bars[::-1], dim=2), S_bar


def _check_pullback_args(C, G, left, right):
    """C [..., n, n]; G, left, right [..., n, K] with the same shape, all floating-point tensors: else a
    ValueError naming the argument."""
    for name, x in (("C", C), ("G", G), ("left", left), ("right", right)):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must be a floating-point torch.Tensor, got {got}")
    if C.dim() < 2 or C.shape[-1] != C.shape[-2]:
        raise ValueError(f"C must be square [..., n, n], got shape {tuple(C.shape)}")
    for name, x in (("G", G), ("left", left), ("right", right)):
        if x.shape[:-1] != C.shape[:-1]:
            raise ValueError(f"{name} must be [..., n, K] with C's leading shape {tuple(C.shape[:-1])}, "
                             f"got {tuple(x.shape)}")
    for name, x in (("left", left), ("right", right)):
        if x.shape != G.shape:
            raise ValueError(f"{name} must have G's shape {tuple(G.shape)}, got {tuple(x.shape)}")


def pairwise_pullback(C, G, left, right):
    """Pull an adjoint C back through X_ij = sum_c left_ic exp(G_ic - G_jc) right_jc, for i >= j.

    C: [..., n, n], causal mask included (zero above the diagonal); G, left, right: [..., n, K].
    Returns (left_bar, right_bar, G_bar), each [..., n, K]:
    left_bar_ic = sum_j C_ij exp(G_ic - G_jc) right_jc, right_bar_jc = sum_i C_ij exp(G_ic - G_jc) left_ic,
    G_bar = left * left_bar - right * right_bar. Only ratios in [0, 1] are formed.
    """
    _check_pullback_args(C, G, left, right)
    ratios = decay_ratios(G)                                               # [..., i, j, K]
    left_bar = torch.einsum("...ij,...ijc,...jc->...ic", C, ratios, right)
    right_bar = torch.einsum("...ij,...ijc,...ic->...jc", C, ratios, left)
    return left_bar, right_bar, left * left_bar - right * right_bar


def chunk_gdn2_backward(q, k, v, g, b, w, do, scale=None, initial_state=None, dht=None, chunk_size=64,
                        local="rewy"):
    """Gradients of chunked GDN2 by the explicit reverse algorithm, without autograd.

    q, k, g, b: [B, T, H, K]; v, w: [B, T, H, V]; do: [B, T, H, V], the outputs' adjoint;
    initial_state, dht: [B, H, K, V] or None (zeros), the entering state and the final state's adjoint;
    local: "wy" (7 products) or "rewy" (3 products), the local pullback of each chunk.
    Returns (dq, dk, dv, dg, db, dw, dh0) in the compute dtype; dh0 is None when initial_state is None.
    """
    dims = validate_inputs(q, k, v, g, b, w, scale, initial_state)
    _check_chunk_size(chunk_size)
    if local not in LOCAL_PULLBACKS:
        raise ValueError(f"local must be one of {tuple(LOCAL_PULLBACKS)}, got {local!r}")
    if not isinstance(do, torch.Tensor) or do.shape != v.shape:
        raise ValueError(f"do must have v's shape {tuple(v.shape)}, got {getattr(do, 'shape', do)}")
    state_shape = (dims.B, dims.H, dims.K, dims.V)
    if dht is not None and (not isinstance(dht, torch.Tensor) or dht.shape != state_shape):
        raise ValueError(f"dht must be None or of shape {state_shape}, got {getattr(dht, 'shape', dht)}")
    dtype = compute_dtype(q, k, v, g, b, w, initial_state)
    q, k, v, g, b, w, do = (split_chunks(x, chunk_size, dtype) for x in (q, k, v, g, b, w, do))
    q = q * dims.scale
    f = wy_factors(q, k, v, g, b, w)
    zeros = q.new_zeros(state_shape)
    _, R, states = state_scan(f, zeros if initial_state is None else initial_state.to(dtype))
    R_bar, S_out_bar, dh0 = reverse_state_scan(f, do, zeros if dht is None else dht.to(dtype))
    S_in = states[:, :, :-1]

    G = g.cumsum(-2)
    gamma = G.exp()
    E = b * k * gamma
    Z_bar, E_dir, L_bar, _ = LOCAL_PULLBACKS[local](f.A, E, w * v, S_in, R, R_bar)
    bk_bar, k_bar, G_bar = pairwise_pullback(L_bar, G, b * k, k)             # L = tril_<(E Y^T)
    q_bar, kq_bar, Gq_bar = pairwise_pullback(torch.tril(do @ R.mT), G, q, k)  # C_q, eq-seq-hq
    bk_bar = bk_bar + E_dir * gamma                                          # eq-seq-direct from here
    Qg_bar = do @ S_in.mT
    q_bar = q_bar + Qg_bar * gamma
    kg_bar = R @ S_out_bar.mT
    k_bar = k_bar + kq_bar + kg_bar * (G[..., -1:, :] - G).exp() + bk_bar * b
    G_bar = G_bar + Gq_bar + E_dir * E + Qg_bar * f.Q_g - kg_bar * f.kg
    G_bar[..., -1, :] += (kg_bar * f.kg).sum(-2) + f.gamma_n * (S_in * S_out_bar).sum(-1)
    dg = G_bar.flip(-2).cumsum(-2).flip(-2)                                  # eq-seq-g
    grads = (q_bar * dims.scale, k_bar, Z_bar * w, dg, bk_bar * k, Z_bar * v)
    return (*(merge_chunks(x, dims.T) for x in grads), None if initial_state is None else dh0)


class ChunkGDN2Function(torch.autograd.Function):
    """chunk_gdn2_torch's forward, with chunk_gdn2_backward as its backward.

    apply(q, k, v, g, b, w, initial_state, scale, chunk_size, local) -> (o, final state), shapes as in
    chunk_gdn2_torch; scale is a number (not None), initial_state a tensor or None, local "wy" or "rewy".
    """

    @staticmethod
    def forward(ctx, q, k, v, g, b, w, initial_state, scale, chunk_size, local):
        ctx.save_for_backward(q, k, v, g, b, w, initial_state)
        ctx.settings = (scale, chunk_size, local)
        return chunk_gdn2_torch(q, k, v, g, b, w, scale, initial_state, True, chunk_size)

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, g, b, w, initial_state = ctx.saved_tensors
        scale, chunk_size, local = ctx.settings
        grads = chunk_gdn2_backward(q, k, v, g, b, w, do, scale, initial_state, dht, chunk_size, local)
        inputs = (q, k, v, g, b, w, initial_state)
        return (*(None if d is None else d.to(x.dtype) for d, x in zip(grads, inputs)), None, None, None)


BACKWARDS = ("wy", "rewy")


def chunk_gdn2_explicit(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False,
                        chunk_size=64, backward="rewy"):
    """chunk_gdn2_torch (same arguments and results) whose gradients come from the explicit reverse algorithm:
    backward="wy" (the 7-product local pullback) or "rewy" (the 3-product one)."""
    dims = validate_inputs(q, k, v, g, b, w, scale, initial_state)
    if backward not in BACKWARDS:
        raise ValueError(f"backward must be one of {BACKWARDS}, got {backward!r}")
    o, S = ChunkGDN2Function.apply(q, k, v, g, b, w, initial_state, dims.scale, chunk_size, backward)
    return o, (S if output_final_state else None)
