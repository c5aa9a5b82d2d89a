# Generated from chapters/07_matrix_intra.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""Matrix intra: the backward's gated pairwise contractions as matrix products; Gram elimination (Chapter 7)."""

import torch

from gdn2edu.chunk_backward import _check_pullback_args
from gdn2edu.family import FAMILY_MEMBERS
from gdn2edu.inputs import check_positive_ints


def centered_pullback(C, G, left, right):
    """pairwise_pullback by two matrix products on factors centered at each feature's midpoint.

    C: [..., n, n] (causal mask included); G, left, right: [..., n, K]. Returns (left_bar, right_bar,
    G_bar), each [..., n, K]. Exact algebra; in floating point safe while the per-feature range of G in
    the chunk stays below twice the largest exponent of the dtype (2 ln(finfo.max), about 177 in float32).
    """
    _check_pullback_args(C, G, left, right)
    m = (G.amax(-2, keepdim=True) + G.amin(-2, keepdim=True)) / 2
    alpha, zeta = (G - m).exp(), (m - G).exp()                # both within exp(+-range / 2)
    left_bar = alpha * (C @ (right * zeta))
    right_bar = zeta * (C.mT @ (left * alpha))
    return left_bar, right_bar, left * left_bar - right * right_bar


def subchunk_pullback(C, G, left, right, sub=16):
    """centered_pullback on diagonal blocks of sub tokens; earlier tokens anchored at each block's start.

    C: [..., n, n] (causal mask included); G, left, right: [..., n, K]; sub: the block length.
    Returns (left_bar, right_bar, G_bar), each [..., n, K]. Off-diagonal factors lie in [0, 1]; diagonal
    blocks need only their own range below the dtype's limit (16 tokens of g = -5 give 75).
    """
    _check_pullback_args(C, G, left, right)
    check_positive_ints(sub=sub)
    left_bar, right_bar = torch.zeros_like(left), torch.zeros_like(right)
    for a in range(0, G.shape[-2], sub):
        I = slice(a, a + sub)
        block = centered_pullback(C[..., I, I], G[..., I, :], left[..., I, :], right[..., I, :])
        left_bar[..., I, :] += block[0]
        right_bar[..., I, :] += block[1]
        if a:
            recv = (G[..., I, :] - G[..., a:a + 1, :]).exp()          # e^{G_i - G_a} <= 1
            send = (G[..., a:a + 1, :] - G[..., :a, :]).exp()         # e^{G_a - G_j} <= 1
            left_bar[..., I, :] += recv * (C[..., I, :a] @ (right[..., :a, :] * send))
            right_bar[..., :a, :] += send * (C[..., I, :a].mT @ (left[..., I, :] * recv))
    return left_bar, right_bar, left * left_bar - right * right_bar


def gram_free_scalar_gate(D, G, k, beta):
    """Key, beta and gate adjoints of L = tril_<(Diag(beta) Gamma * K K^T) for scalar gates, without K K^T.

    D: [..., n, n] strictly lower, the adjoint of L; G: [..., n] cumulative log-decay (one per token);
    k: [..., n, K]; beta: [..., n]. Returns (k_bar [..., n, K], beta_bar [..., n], G_bar [..., n]);
    valid at beta = 0 (nothing is divided by beta).
    """
    for name, x in (("D", D), ("G", G), ("k", k), ("beta", beta)):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise ValueError(f"{name} must be a floating-point torch.Tensor, got {getattr(x, 'dtype', type(x))}")
    if D.dim() < 2 or D.shape[-1] != D.shape[-2]:
        raise ValueError(f"D must be square [..., n, n], got shape {tuple(D.shape)}")
    for name, x, layout in (("G", G, "[..., n]"), ("beta", beta, "[..., n]"), ("k", k, "[..., n, K]")):
        if (x.shape[:-1] if name == "k" else x.shape) != D.shape[:-1]:
            raise ValueError(f"{name} must be {layout} with D's leading shape {tuple(D.shape[:-1])}, "
                             f"got {tuple(x.shape)}")
    ratios = (G[..., :, None] - G[..., None, :]).clamp(max=0).exp()   # e^{G_i - G_j} on i >= j, 1 above
    D_tilde = D * ratios                                               # D is zero above the diagonal
    X = D_tilde @ k
    X_right = D_tilde.mT @ (beta[..., None] * k)
    beta_bar = (k * X).sum(-1)
    return beta[..., None] * X + X_right, beta_bar, beta * beta_bar - (k * X_right).sum(-1)


def tied_gate_grads(member, dg, db, dw):
    """Gradients of a tied family member's (log_decay, beta) from GDN2's dg, db [B, T, H, K], dw [B, T, H, V].

    member: "deltanet", "gated_deltanet" or "kda" (see family_gates). Returns (d_log_decay, d_beta):
    d_log_decay is None (deltanet), [B, T, H] (gated_deltanet) or [B, T, H, K] (kda); d_beta [B, T, H]
    sums the erase and the write path.
    """
    if member not in FAMILY_MEMBERS:
        raise ValueError(f"member must be one of {FAMILY_MEMBERS}, got {member!r}")
    for name, x in (("dg", dg), ("db", db), ("dw", dw)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"{name} must be a 4-dim tensor, got {getattr(x, 'shape', type(x).__name__)}")
    if dg.shape != db.shape or dw.shape[:3] != db.shape[:3]:
        raise ValueError(f"dg, db must share one shape [B, T, H, K] and dw [B, T, H, V] its [B, T, H], got "
                         f"{tuple(dg.shape)}, {tuple(db.shape)}, {tuple(dw.shape)}")
    d_log_decay = {"deltanet": None, "gated_deltanet": dg.sum(-1), "kda": dg}[member]
    return d_log_decay, db.sum(-1) + dw.sum(-1)
