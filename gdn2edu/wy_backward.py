# Generated from chapters/05_conventional_backward.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""The conventional (expanded WY) backward of one chunk, and its arithmetic."""

import torch

from gdn2edu.inputs import check_positive_ints


def strict_lower(x):
    """The strictly lower-triangular part L_<(x) of [..., n, n]."""
    return torch.tril(x, diagonal=-1)


def wy_chunk_adjoints(A, E, Z, S, R_bar):
    """The 7-product graph up to the mask: everything except the interaction products with Y and E; and
    S_bar = -(A E)^T R_bar, two products more, which the count leaves to the state scan.

    A: [..., n, n]; E: [..., n, d_k]; Z: [..., n, d_v]; S: [..., d_k, d_v]; R_bar: [..., n, d_v].
    Returns (Z_bar, E_dir, L_bar, S_bar): E_dir [..., n, d_k] is E's adjoint through E S, and
    L_bar = L_<(-A^T A_bar A^T) [..., n, n] is the adjoint of L = L_<(E Y^T).
    """
    At = A.transpose(-1, -2)
    F_bar = -R_bar @ S.transpose(-1, -2)                                            # product 1
    A_bar = R_bar @ Z.transpose(-1, -2) + F_bar @ E.transpose(-1, -2)               # products 2, 3
    M_bar = -(At @ A_bar) @ At                                                      # products 4, 5
    Z_bar = At @ R_bar                                                              # product 6
    E_dir = At @ F_bar                                                              # product 7
    S_bar = -(A @ E).transpose(-1, -2) @ R_bar
    return Z_bar, E_dir, strict_lower(M_bar), S_bar


def wy_chunk_backward(A, E, Y, Z, S, R_bar):
    """Adjoints of one chunk by the expanded 7-product WY graph.

    A: [..., n, n] = (I + L_<(E Y^T))^{-1}; E, Y: [..., n, d_k]; Z: [..., n, d_v]; S: [..., d_k, d_v];
    R_bar: [..., n, d_v], the adjoint of the corrections R = A Z - (A E) S.
    Returns (Z_bar, E_bar, Y_bar, S_bar) with the shapes of Z, E, Y, S.
    """
    Z_bar, E_dir, L_bar, S_bar = wy_chunk_adjoints(A, E, Z, S, R_bar)
    return Z_bar, E_dir + L_bar @ Y, L_bar.transpose(-1, -2) @ E, S_bar


def _matmul_flops(a, b, c):
    """FLOPs of an [a, b] x [b, c] product: a*b*c multiply-adds of 2 FLOPs."""
    return 2 * a * b * c


def wy_backward_products(n, d_k, d_v):
    """FLOPs of each of the seven products, as {name: count}; works on SymPy symbols too."""
    return {
        "F_bar = -R_bar S^T": _matmul_flops(n, d_v, d_k),
        "A_bar += R_bar Z^T": _matmul_flops(n, d_v, n),
        "A_bar += F_bar E^T": _matmul_flops(n, d_k, n),
        "A^T A_bar": _matmul_flops(n, n, n),
        "(A^T A_bar) A^T": _matmul_flops(n, n, n),
        "Z_bar = A^T R_bar": _matmul_flops(n, n, d_v),
        "E_dir = A^T F_bar": _matmul_flops(n, n, d_k),
    }


def flops_wy_backward(n, d_k, d_v):
    """Dense FLOPs of the expanded WY backward of one chunk and head (n tokens, d_k x d_v state)."""
    check_positive_ints(n=n, d_k=d_k, d_v=d_v)
    return sum(wy_backward_products(n, d_k, d_v).values())
