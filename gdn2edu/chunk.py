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
    kg = Y Diag(gamma_n), the keys decayed to the chunk's end: [..., n, K]; gamma_n: [..., K];
    A = (I + L)^{-1}: [..., n, n], which the backward of Chapter 6 needs.
    """

    AE: torch.Tensor
    AZ: torch.Tensor
    Q_g: torch.Tensor
    C_q: torch.Tensor
    kg: torch.Tensor
    gamma_n: torch.Tensor
    A: torch.Tensor


def wy_factors(q, k, v, g, b, w) -> WYFactors:
    """The WY factors of every chunk at once; q, k, g, b: [..., n, K] (scale in q); v, w: [..., n, V]."""
    n = g.shape[-2]
    G = g.cumsum(-2)
    ratios = decay_ratios(G)                                     # [..., n, n, K]
    L = torch.einsum("...ic,...ijc,...jc->...ij", b * k, ratios, k).tril(-1)     # tril_<(E Y^T)
    C_q = torch.einsum("...ic,...ijc,...jc->...ij", q, ratios, k)                # tril_<=(Q_g Y^T)
    eye = torch.eye(n, dtype=L.dtype, device=L.device)
    gamma = G.exp()
    E, Z = b * k * gamma, w * v
    A = torch.linalg.solve_triangular(eye + L, eye, upper=False, unitriangular=True)     # (I + L)^{-1}
    kg = k * (G[..., -1:, :] - G).exp()
    return WYFactors(A @ E, A @ Z, q * gamma, C_q, kg, gamma[..., -1, :], A)


def _check_chunk_size(chunk_size):
    if (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0
            or chunk_size & (chunk_size - 1)):
        raise ValueError(f"chunk_size must be a positive power of two, got {chunk_size!r}")


def split_chunks(x, chunk_size, dtype):
    """[B, T, H, D] -> [B, H, N, n, D] in dtype, N = ceil(T / n), the tail padded with zeros."""
    B, T, H, D = x.shape
    num_chunks = -(-T // chunk_size)
    x = torch.nn.functional.pad(x.to(dtype).transpose(1, 2), (0, 0, 0, num_chunks * chunk_size - T))
    return x.reshape(B, H, num_chunks, chunk_size, D)


def merge_chunks(x, T):
    """[B, H, N, n, D] -> [B, T, H, D]: the inverse of ``split_chunks``, padding dropped."""
    B, H, N, n, D = x.shape
    return x.reshape(B, H, N * n, D)[:, :, :T].transpose(1, 2)


def state_scan(f: WYFactors, S):
    """The sequential part: chunk by chunk from the entering state S [B, H, K, V].

    f: the WY factors of all chunks, [B, H, N, ...]. Returns (O [B, H, N, n, V], R [B, H, N, n, V],
    states [B, H, N + 1, K, V]: the state entering each chunk, then the final state).
    """
    outputs, corrections, states = [], [], [S]
    for c in range(f.AE.shape[2]):                               # the only sequential loop: T / n steps
        R = f.AZ[:, :, c] - f.AE[:, :, c] @ S                    # corrections of chunk c
        outputs.append(f.Q_g[:, :, c] @ S + f.C_q[:, :, c] @ R)
        S = f.gamma_n[:, :, c, :, None] * S + f.kg[:, :, c].mT @ R
        corrections.append(R)
        states.append(S)
    return torch.stack(outputs, dim=2), torch.stack(corrections, dim=2), torch.stack(states, dim=2)


def chunk_gdn2_torch(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False,
                     chunk_size=64):
    """Gated DeltaNet-2 by chunks in plain PyTorch: same call and results as ``recurrent_gdn2``.

    q, k, g, b: [B, T, H, K]; v, w: [B, T, H, V]; initial_state: [B, H, K, V] or None (zeros);
    scale: None for K ** -0.5; chunk_size: a positive power of two. Any T: the last chunk is padded with
    tokens k = 0, g = 0 that leave the state unchanged. Computes in float64 if any input is float64,
    else float32; PyTorch's autograd differentiates it (Chapter 6's chunk_gdn2_explicit runs the explicit
    reverse algorithm instead). Returns (o [B, T, H, V] in v's dtype, final state [B, H, K, V] in the
    compute dtype or None).
    """
    dims = validate_inputs(q, k, v, g, b, w, scale, initial_state)
    _check_chunk_size(chunk_size)
    dtype = compute_dtype(q, k, v, g, b, w, initial_state)
    f = wy_factors(split_chunks(q, chunk_size, dtype) * dims.scale,
                   *(split_chunks(x, chunk_size, dtype) for x in (k, v, g, b, w)))
    S = q.new_zeros(dims.B, dims.H, dims.K, dims.V, dtype=dtype) if initial_state is None \
        else initial_state.to(dtype)
    O, _, states = state_scan(f, S)
    return merge_chunks(O, dims.T).to(v.dtype), (states[:, :, -1] if output_final_state else None)
