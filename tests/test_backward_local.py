"""The local chunk backward: 7-product WY graph and ReWY's 3 products against autograd, and their FLOPs."""

import pytest
import torch

import gdn2edu
from gdn2edu.wy_backward import strict_lower

# Both graphs are exact algebra; float64 rounding through a 64x64 unit-triangular inverse with
# O(1)-conditioned M stays near 1e-14, so 1e-9 (the threshold) has ample margin.
TOL = 1e-9


def chunk(n, d_k, d_v, batch=(), seed=0):
    gen = torch.Generator().manual_seed(seed)
    def rnd(*shape, scale=1.0):
        return scale * torch.randn(*batch, *shape, generator=gen, dtype=torch.float64)
    E, Y = rnd(n, d_k, scale=d_k ** -0.5), rnd(n, d_k, scale=d_k ** -0.5)
    return E, Y, rnd(n, d_v), rnd(d_k, d_v), rnd(n, d_v)


def autograd_adjoints(E, Y, Z, S, R_bar):
    Z, E, Y, S = (x.clone().requires_grad_() for x in (Z, E, Y, S))
    M = torch.eye(E.shape[-2], dtype=E.dtype) + strict_lower(E @ Y.transpose(-1, -2))
    R = torch.linalg.solve_triangular(M, Z - E @ S, upper=False, unitriangular=True)
    return torch.autograd.grad(R, (Z, E, Y, S), grad_outputs=R_bar), R.detach(), torch.linalg.inv(M.detach())


@pytest.mark.parametrize("n,d_k,d_v,batch", [(64, 32, 48, ()), (17, 8, 5, (3,)), (1, 4, 4, (2, 2))])
def test_both_graphs_equal_autograd(n, d_k, d_v, batch):
    E, Y, Z, S, R_bar = chunk(n, d_k, d_v, batch)
    expected, R, A = autograd_adjoints(E, Y, Z, S, R_bar)
    for got in (gdn2edu.wy_chunk_backward(A, E, Y, Z, S, R_bar),
                gdn2edu.rewy_chunk_backward(A, E, Y, S, R, R_bar)):
        for g, e in zip(got, expected):
            assert g.shape == e.shape
            if e.norm() == 0:          # n = 1 has no strict-lower interaction: Y_bar is exactly zero
                assert g.abs().max().item() == 0.0
            else:
                assert ((g - e).norm() / e.norm()).item() < TOL


def test_flop_counts_at_the_papers_size():
    assert gdn2edu.flops_wy_backward(64, 128, 128) == 7_340_032
    assert gdn2edu.flops_rewy_backward(64, 128, 128) == 4_194_304
    n, d_k, d_v = 48, 24, 40
    assert gdn2edu.flops_wy_backward(n, d_k, d_v) - gdn2edu.flops_rewy_backward(n, d_k, d_v) == \
        4 * n * n * d_k + 4 * n ** 3


@pytest.mark.parametrize("bad", [dict(n=0), dict(d_k=-1), dict(d_v=2.0), dict(n=True)])
def test_flop_counts_reject_bad_sizes(bad):
    sizes = dict(n=64, d_k=128, d_v=128) | bad
    name = next(iter(bad))
    for fn in (gdn2edu.flops_wy_backward, gdn2edu.flops_rewy_backward):
        with pytest.raises(ValueError, match=f"^{name} "):
            fn(**sizes)
