# Generated from chapters/06_rewy.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""ReWY: the 3-product local backward of one chunk, from the residual equation M R = Z - E S."""

from gdn2edu.inputs import check_positive_ints
from gdn2edu.wy_backward import _matmul_flops, strict_lower


def rewy_chunk_adjoints(A, E, S, R, R_bar):
    """ReWY's three products: everything except the interaction products with Y and E.

    A: [..., n, n]; E: [..., n, d_k]; S: [..., d_k, d_v]; R, R_bar: [..., n, d_v].
    Returns (Z_bar, E_dir, D, S_bar): Z_bar = P = A^T R_bar, E_dir = -P S^T, D = -L_<(P R^T) [..., n, n]
    the adjoint of L = L_<(E Y^T), and S_bar = -E^T P.
    """
    P = A.transpose(-1, -2) @ R_bar                                   # product 1
    D = -strict_lower(P @ R.transpose(-1, -2))                        # product 2
    return P, -P @ S.transpose(-1, -2), D, -E.transpose(-1, -2) @ P   # product 3: P S^T


def rewy_chunk_backward(A, E, Y, S, R, R_bar):
    """Adjoints of one chunk by ReWY's shared sensitivity P = A^T R_bar.

    A: [..., n, n] = (I + L_<(E Y^T))^{-1}; E, Y: [..., n, d_k]; S: [..., d_k, d_v];
    R: [..., n, d_v], the forward's corrections; R_bar: [..., n, d_v], their adjoint.
    Returns (Z_bar, E_bar, Y_bar, S_bar) with the shapes of Z, E, Y, S.
    """
    Z_bar, E_dir, D, S_bar = rewy_chunk_adjoints(A, E, S, R, R_bar)
    return Z_bar, E_dir + D @ Y, D.transpose(-1, -2) @ E, S_bar


def rewy_backward_products(n, d_k, d_v):
    """FLOPs of each of ReWY's three products, as {name: count}; works on SymPy symbols too."""
    return {
        "P = A^T R_bar": _matmul_flops(n, n, d_v),
        "P R^T": _matmul_flops(n, d_v, n),
        "P S^T": _matmul_flops(n, d_v, d_k),
    }


def flops_rewy_backward(n, d_k, d_v):
    """Dense FLOPs of ReWY's local backward of one chunk and head (n tokens, d_k x d_v state)."""
    check_positive_ints(n=n, d_k=d_k, d_v=d_v)
    return sum(rewy_backward_products(n, d_k, d_v).values())
