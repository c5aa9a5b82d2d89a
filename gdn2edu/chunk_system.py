# Generated from chapters/02_unrolling_one_chunk.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""One chunk of GDN2 as a unit lower triangular system M R = Z - E S (Chapter 2)."""

from typing import NamedTuple

import torch


class ChunkFactors(NamedTuple):
    """The factors of one chunk of n tokens; leading axes [...] are batch-like.

    G, gamma, E, Y, Q_g: [..., n, K]; Z: [..., n, V]; L: [..., n, n], strictly lower triangular.
    """

    G: torch.Tensor
    gamma: torch.Tensor
    E: torch.Tensor
    Y: torch.Tensor
    Z: torch.Tensor
    Q_g: torch.Tensor
    L: torch.Tensor


def chunk_factors(q, k, v, g, b, w) -> ChunkFactors:
    """Form G, gamma, E, Y, Z, Q_g and L = tril_<(E Y^T) for one chunk.

    q, k, g, b: [..., n, K] (the query scale already in q); v, w: [..., n, V].
    Y = K / gamma overflows under strong decay: this is the readable form, not the safe one.
    """
    G = g.cumsum(-2)                     # cumulative log-decay within the chunk
    gamma = G.exp()
    E = b * k * gamma                    # erase factor, at the token's own time
    Y = k / gamma                        # key, undecayed to the chunk's start
    L = torch.tril(E @ Y.mT, diagonal=-1)
    return ChunkFactors(G, gamma, E, Y, w * v, q * gamma, L)


def solve_chunk(f: ChunkFactors, S):
    """Outputs and end state of one chunk entered with state S: [..., K, V].

    Solves (I + L) R = Z - E S by a unit triangular solve, then
    O = Q_g S + tril_<=(Q_g Y^T) R and S' = Diag(gamma_n)(S + Y^T R).
    Returns (O [..., n, V], S' [..., K, V]).
    """
    n = f.L.shape[-1]
    M = torch.eye(n, dtype=f.L.dtype, device=f.L.device) + f.L
    R = torch.linalg.solve_triangular(M, f.Z - f.E @ S, upper=False, unitriangular=True)
    O = f.Q_g @ S + torch.tril(f.Q_g @ f.Y.mT) @ R
    S_next = f.gamma[..., -1, :, None] * (S + f.Y.mT @ R)
    return O, S_next
