# Generated from chapters/03_wy_factors.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""GDN2 by chunks: WY factors prepared for all chunks at once, then a short state scan (Chapter 3)."""

from typing import NamedTuple

import torch

from gdn2edu.inputs import compute_dtype, validate_inputs


def decay_ratios(G):
    """Pairwise decays exp(G_i - G_j) for i >= j and 0 for i < j, per key channel.

    G: [..., n, K] cumulative log-decay (non-increasing along n). Returns [..., n, n, K] with entries in
    [0, 1]: exp(G) and exp(-G) are never formed alone, so nothing overflows however strong the decay.
    """
    n = G.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool, device=G.device).tril()
    diff = G.unsqueeze(-2) - G.unsqueeze(-3)                     # [..., i, j, K] = G_i - G_j
    return diff.masked_fill(~causal[:, :, None], float("-inf")).exp()


class WYFactors(NamedTuple):
    """What each chunk prepares without knowing its entering state.

    AE: [..., n, K], AZ: [..., n, V] the WY factors; Q_g: [..., n, K]; C_q = tril_<=(Q_g Y^T): [..., n, n];
    kg = Y Diag(gamma_n), the keys decayed to the chunk's end: [..., n, K]; gamma_n: [..., K].
    """

    AE: torch.Tensor
    AZ: torch.Tensor
    Q_g: torch.Tensor
    C_q: torch.Tensor
    kg: torch.Tensor
    gamma_n: torch.Tensor


def wy_factors(q, k, v, g, b, w) -> WYFactors:
    """The WY factors of every chunk at once; q, k, g, b: [..., n, K] (scale in q); v, w: [..., n, V]."""
    n = g.shape[-2]
    G = g.cumsum(-2)
    ratios = decay_ratios(G)                                     # [..., n, n, K]
    L = torch.einsum("...ic,...ijc,...jc->...ij", b * k, ratios, k).tril(-1)     # tril_<(E Y^T)
    C_q = torch.einsum("...ic,...ijc,...jc->...ij", q, ratios, k)                # tril_<=(Q_g Y^T)
    M = torch.eye(n, dtype=L.dtype, device=L.device) + L
    gamma = G.exp()
    E, Z = b * k * gamma, w * v
    AE_AZ = torch.linalg.solve_triangular(M, torch.cat([E, Z], dim=-1), upper=False, unitriangular=True)
    AE, AZ = AE_AZ.split([E.shape[-1], Z.shape[-1]], dim=-1)
    kg = k * (G[..., -1:, :] - G).exp()
    return WYFactors(AE, AZ, q * gamma, C_q, kg, gamma[..., -1, :])


def _check_chunk_size(chunk_size):
    if (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0
            or chunk_size & (chunk_size - 1)):
        raise ValueError(f"chunk_size must be a positive power of two, got {chunk_size!r}")


def chunk_gdn2_torch(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False,
                     chunk_size=64):
    """Gated DeltaNet-2 by chunks in plain PyTorch: same call and results as ``recurrent_gdn2``.

    q, k, g, b: [B, T, H, K]; v, w: [B, T, H, V]; initial_state: [B, H, K, V] or None (zeros);
    scale: None for K ** -0.5; chunk_size: a positive power of two. Any T: the last chunk is padded with
    tokens k = 0, g = 0 that leave the state unchanged. Computes in float64 if any input is float64,
    else float32; differentiable by autograd.
    Returns (o [B, T, H, V] in v's dtype, final state [B, H, K, V] in the compute dtype or None).
    """
    dims = validate_inputs(q, k, v, g, b, w, scale, initial_state)
    _check_chunk_size(chunk_size)
    dtype = compute_dtype(q, k, v, g, b, w, initial_state)
    B, T, H, V, n = dims.B, dims.T, dims.H, dims.V, chunk_size
    num_chunks = -(-T // n)

    def chunked(x):                                              # [B, T, H, D] -> [B, H, N, n, D]
        x = torch.nn.functional.pad(x.to(dtype).transpose(1, 2), (0, 0, 0, num_chunks * n - T))
        return x.reshape(B, H, num_chunks, n, x.shape[-1])

    f = wy_factors(chunked(q) * dims.scale, *(chunked(x) for x in (k, v, g, b, w)))
    S = q.new_zeros(B, H, dims.K, V, dtype=dtype) if initial_state is None else initial_state.to(dtype)
    outputs = []
    for c in range(num_chunks):                                  # the only sequential loop: T / n steps
        R = f.AZ[:, :, c] - f.AE[:, :, c] @ S                    # corrections of chunk c
        outputs.append(f.Q_g[:, :, c] @ S + f.C_q[:, :, c] @ R)
        S = f.gamma_n[:, :, c, :, None] * S + f.kg[:, :, c].mT @ R
    o = torch.stack(outputs, dim=2).reshape(B, H, num_chunks * n, V)[:, :, :T]
    return o.transpose(1, 2).to(v.dtype), (S if output_final_state else None)
