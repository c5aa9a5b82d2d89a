# Generated from chapters/07_matrix_intra.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""Matrix intra: the backward's gated pairwise contractions as matrix products; Gram elimination (Chapter 7)."""

import torch


def _check_pullback_args(C, G, left, right):
    """C [..., n, n]; G, left, right [..., n, K] with the same shape: else a ValueError naming the argument."""
    if C.dim() < 2 or C.shape[-1] != C.shape[-2]:
        raise ValueError(f"C must be square [..., n, n], got shape {tuple(C.shape)}")
    for name, x in (("G", G), ("left", left), ("right", right)):
        if x.shape[:-1] != C.shape[:-1]:
            raise ValueError(f"{name} must be [..., n, K] with C's leading shape {tuple(C.shape[:-1])}, "
                             f"got {tuple(x.shape)}")
    for name, x in (("left", left), ("right", right)):
        if x.shape != G.shape:
            raise ValueError(f"{name} must have G's shape {tuple(G.shape)}, got {tuple(x.shape)}")


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
    if isinstance(sub, bool) or not isinstance(sub, int) or sub < 1:
        raise ValueError(f"sub must be a positive integer, got {sub!r}")
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
    d_log_decay = {"deltanet": None, "gated_deltanet": dg.sum(-1), "kda": dg}
    if member not in d_log_decay:
        raise ValueError(f"member must be one of {tuple(d_log_decay)}, got {member!r}")
    return d_log_decay[member], db.sum(-1) + dw.sum(-1)
