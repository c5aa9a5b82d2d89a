"""Matrix intra (centered, sub-chunk) against the ratio-tensor pullback; Gram elimination against autograd."""

import pytest
import torch

import gdn2edu

# exact algebra in float64, rounding near 1e-15
TOL = 1e-12
# float32: the contractions are accurate to ~1e-6; G_bar = left * left_bar - right * right_bar cancels, and
# measured ~1e-5 here; 1e-4 is well inside the ReWY paper's 2% gate-gradient threshold.
F32_TOL = 1e-4


def rel(x, y):
    return ((x - y).norm() / y.norm()).item()


def case(n, K, strength, seed=0, batch=(2,)):
    gen = torch.Generator().manual_seed(seed)
    def rnd(*shape):
        return torch.randn(*batch, *shape, generator=gen, dtype=torch.float64)
    G = (-strength * torch.rand(*batch, n, K, generator=gen, dtype=torch.float64)).cumsum(-2)
    return rnd(n, n).tril(), G, rnd(n, K), rnd(n, K)


@pytest.mark.parametrize("n,sub", [(64, 16), (32, 8), (16, 16), (8, 16)])
def test_matrix_intra_equals_pairwise(n, sub):
    C, G, left, right = case(n, 5, 1.0, seed=n)
    expected = gdn2edu.pairwise_pullback(C, G, left, right)
    for got in (gdn2edu.centered_pullback(C, G, left, right),
                gdn2edu.subchunk_pullback(C, G, left, right, sub=sub)):
        for x, y in zip(got, expected):
            assert rel(x, y) < TOL


def test_float32_ranges():
    # g = -5 per token and channel on 64 tokens: range ~ 320 > 2 * 88.7, beyond centering in float32
    C, G, left, right = case(64, 8, 0.0, seed=3)
    G = torch.full_like(G, -5.0).cumsum(-2)
    expected = gdn2edu.pairwise_pullback(C, G, left, right)
    centered = gdn2edu.centered_pullback(*(x.float() for x in (C, G, left, right)))
    assert not all(torch.isfinite(x).all() for x in centered)
    sub = gdn2edu.subchunk_pullback(*(x.float() for x in (C, G, left, right)), sub=16)
    for x, y in zip(sub, expected):
        assert torch.isfinite(x).all() and rel(x.double(), y) < F32_TOL
    # g = -2: range 126 < 2 ln(float32 max) = 177.4, centering suffices
    G = torch.full_like(G, -2.0).cumsum(-2)
    expected = gdn2edu.pairwise_pullback(C, G, left, right)
    for x, y in zip(gdn2edu.centered_pullback(*(x.float() for x in (C, G, left, right))), expected):
        assert torch.isfinite(x).all() and rel(x.double(), y) < F32_TOL


@pytest.mark.parametrize("zero_beta", [False, True])
def test_gram_free_scalar_gate(zero_beta):
    gen = torch.Generator().manual_seed(1)
    n, K = 24, 6
    k = torch.randn(3, n, K, generator=gen, dtype=torch.float64).requires_grad_()
    beta = torch.rand(3, n, generator=gen, dtype=torch.float64)
    if zero_beta:
        beta[:, ::2] = 0.0
    beta.requires_grad_()
    G = (-torch.rand(3, n, generator=gen, dtype=torch.float64)).cumsum(-1).requires_grad_()
    D = torch.randn(3, n, n, generator=gen, dtype=torch.float64).tril(-1)
    ratios = (G[..., :, None] - G[..., None, :]).clamp(max=0).exp()
    L = (beta[..., None] * ratios * (k @ k.mT)).tril(-1)
    expected = torch.autograd.grad((L * D).sum(), (k, beta, G))
    got = gdn2edu.gram_free_scalar_gate(D, G.detach(), k.detach(), beta.detach())
    for x, y in zip(got, expected):
        assert torch.isfinite(x).all() and rel(x, y) < TOL


def test_pullbacks_name_bad_arguments():
    from gdn2edu.matrix_intra import centered_pullback, subchunk_pullback
    C, G = torch.randn(4, 4, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="^C "):
        centered_pullback(torch.randn(4, 5), G, G, G)
    with pytest.raises(ValueError, match="^G "):
        centered_pullback(C, torch.randn(5, 3), G, G)
    with pytest.raises(ValueError, match="^right "):
        subchunk_pullback(C, G, G, torch.randn(4, 2))
    with pytest.raises(ValueError, match="^sub "):
        subchunk_pullback(C, G, G, G, sub=0)


def test_pullback_and_gate_helpers_name_bad_arguments():
    C, G, k = torch.randn(4, 4, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3)
    with pytest.raises(ValueError, match="^left"):
        gdn2edu.pairwise_pullback(C, G, G[:1], G)
    with pytest.raises(ValueError, match="^C"):
        gdn2edu.pairwise_pullback(C.int(), G, G, G)
    with pytest.raises(ValueError, match="^beta"):
        gdn2edu.gram_free_scalar_gate(C, G[:, 0], k.double(), G[:1, 0])
    with pytest.raises(ValueError, match="^member"):
        gdn2edu.tied_gate_grads("mamba", None, None, None)
    with pytest.raises(ValueError, match="^dg, db"):
        gdn2edu.tied_gate_grads("kda", torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 2, 5))
    with pytest.raises(ValueError, match="^K"):
        gdn2edu.family_gates("deltanet", torch.rand(1, 2, 3), 0, 4)
