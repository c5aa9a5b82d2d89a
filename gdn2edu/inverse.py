# Generated from chapters/04_the_inverse.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""(I + L)^{-1} for a strictly lower triangular L: row by row, and by blocks (Chapter 4)."""

import torch

from gdn2edu.inputs import check_positive_ints


def _check_strictly_lower(L):
    if not isinstance(L, torch.Tensor) or L.dim() < 2 or not L.is_floating_point():
        shape = tuple(L.shape) if isinstance(L, torch.Tensor) else type(L).__name__
        raise ValueError(f"L must be a floating-point tensor [..., n, n], got {shape}")
    if L.shape[-1] != L.shape[-2]:
        raise ValueError(f"L must be square [..., n, n], got shape {tuple(L.shape)}")
    above = torch.count_nonzero(torch.triu(L)).item()
    if above > 0:
        raise ValueError(f"L must be strictly lower triangular (zero on and above the diagonal), got {above} "
                         "nonzero entries there")


def forward_substitution(L):
    """(I + L)^{-1} by forward substitution, one row at a time.

    L: [..., n, n] strictly lower triangular. Returns A = (I + L)^{-1}: [..., n, n], unit lower triangular.
    Row i is e_i - L[i, :i] A[:i]: it needs only the rows above it.
    """
    _check_strictly_lower(L)
    n = L.shape[-1]
    eye = torch.eye(n, dtype=L.dtype, device=L.device).expand(L.shape)
    rows = []
    for i in range(n):
        row = eye[..., i, :]
        if i > 0:
            row = row - (L[..., i:i + 1, :i] @ torch.stack(rows, dim=-2)).squeeze(-2)
        rows.append(row)
    return torch.stack(rows, dim=-2)


def block_inverse(L, block=16):
    """(I + L)^{-1} by inverting diagonal blocks row by row and merging them with matrix products.

    L: [..., n, n] strictly lower triangular; block: positive int, the diagonal block size (the last block
    is smaller when block does not divide n). Returns A = (I + L)^{-1}: [..., n, n].
    Off-diagonal blocks: A[r, c] = -A[r, r] sum_{c <= k < r} L[r, k] A[k, c].
    """
    _check_strictly_lower(L)
    check_positive_ints(block=block)
    n = L.shape[-1]
    edges = list(range(0, n, block)) + [n]
    spans = list(zip(edges[:-1], edges[1:]))
    A = {}
    for r, (r0, r1) in enumerate(spans):
        A[r, r] = forward_substitution(L[..., r0:r1, r0:r1])
        for c in range(r):
            coupled = sum(L[..., r0:r1, spans[k][0]:spans[k][1]] @ A[k, c] for k in range(c, r))
            A[r, c] = -A[r, r] @ coupled
    rows = [torch.cat([A[r, c] if c <= r else L.new_zeros(*L.shape[:-2], r1 - r0, c1 - c0)
                       for c, (c0, c1) in enumerate(spans)], dim=-1)
            for r, (r0, r1) in enumerate(spans)]
    return torch.cat(rows, dim=-2)
