"""forward_substitution and block_inverse against torch.linalg.inv."""

import pytest
import torch

from gdn2edu import block_inverse, forward_substitution


def random_L(shape, n, seed):
    """Strictly lower triangular, entries N(0, 1) / n: then ||L||_2 <= ||L||_F ~ 1/sqrt(2), so I + L has a
    condition number of a few units and float64 inversion loses at most a few bits; 1e-12 is safe."""
    gen = torch.Generator().manual_seed(seed)
    return torch.tril(torch.randn(*shape, n, n, generator=gen, dtype=torch.float64), diagonal=-1) / n


def reference(L):
    return torch.linalg.inv(torch.eye(L.shape[-1], dtype=L.dtype) + L)


def rel(x, ref):
    return ((x - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("n", [1, 2, 17, 64])
def test_forward_substitution(n):
    L = random_L((2, 3), n, seed=n)
    assert rel(forward_substitution(L), reference(L)) < 1e-12


@pytest.mark.parametrize("n, block", [(64, 16), (64, 64), (64, 1), (50, 16), (5, 16), (33, 8)])
def test_block_inverse(n, block):
    L = random_L((3,), n, seed=100 + n + block)
    A = block_inverse(L, block)
    assert A.shape == L.shape
    assert rel(A, reference(L)) < 1e-12


def test_block_inverse_of_chunk_matrix():
    """A real chunk matrix L = tril_<(E Y^T): erase gates up to 2, mild decay."""
    gen = torch.Generator().manual_seed(7)
    k = torch.nn.functional.normalize(torch.randn(64, 32, generator=gen, dtype=torch.float64), dim=-1)
    b = 2 * torch.rand(64, 32, generator=gen, dtype=torch.float64)
    G = (-0.5 * torch.rand(64, 32, generator=gen, dtype=torch.float64)).cumsum(0)
    L = torch.tril((b * k * G.exp()) @ (k / G.exp()).T, -1)
    A_ref = reference(L)
    cond = torch.linalg.cond(torch.eye(64, dtype=torch.float64) + L).item()
    # error of a backward-stable inverse ~ cond * 2^-53; n * cond * eps covers the constants
    bound = 64 * cond * torch.finfo(torch.float64).eps
    assert rel(block_inverse(L), A_ref) < bound and rel(forward_substitution(L), A_ref) < bound


@pytest.mark.parametrize("bad", [torch.zeros(3, 4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64),
                                 torch.eye(4, dtype=torch.float64), torch.ones(4, 4, dtype=torch.float64).triu(1),
                                 torch.zeros(4, 4, dtype=torch.int64), [[0.0]]])
def test_bad_L(bad):
    for fn in (forward_substitution, block_inverse):
        with pytest.raises(ValueError, match="^L "):
            fn(bad)


@pytest.mark.parametrize("block", [0, -4, 2.0, True])
def test_bad_block(block):
    with pytest.raises(ValueError, match="^block "):
        block_inverse(random_L((), 8, seed=1), block)
