"""Chapter 8's Triton L2 normalisation (FLA's use_qk_l2norm_in_kernel), in the interpreter: forward and backward
against float64 autograd, tails and odd widths, zero rows, and the argument checks."""

import pytest
import torch

from gdn2edu.fused_recurrent import L2NORM_EPS, L2NORM_MIN_EPS, l2_normalize, l2_normalize_triton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"      # the interpreter runs the kernels on the CPU


def float64_reference(x, dy, eps=L2NORM_EPS):
    """y = x / sqrt(sum x^2 + eps) and dL/dx for L = <y, dy>, in float64 from x's rounded values."""
    x64 = x.double().requires_grad_()
    y = x64 / torch.sqrt(x64.square().sum(-1, keepdim=True) + eps)
    (dx,) = torch.autograd.grad((y * dy.double()).sum(), x64)
    return y.detach(), dx


def triton_values(x, dy, eps=L2NORM_EPS):
    xt = x.clone().requires_grad_()
    y = l2_normalize_triton(xt, eps)
    (dx,) = torch.autograd.grad((y.double() * dy.double()).sum(), xt)
    return y, dx


@pytest.mark.parametrize("shape", [(1, 1, 1, 128), (2, 37, 3, 100), (1, 5, 60), (17, 256), (3, 1)])
def test_float32_matches_float64(shape):
    """float32 in, float32 math: a sum of D squares and one rsqrt, a few units of 2^-24 per element."""
    torch.manual_seed(0)
    x, dy = torch.randn(shape, device=DEVICE), torch.randn(shape, device=DEVICE)
    want_y, want_dx = float64_reference(x, dy)
    y, dx = triton_values(x, dy)
    assert y.dtype == torch.float32 and y.shape == x.shape
    assert (y.double() - want_y).abs().max() < 1e-6
    assert (dx.double() - want_dx).abs().max() < 1e-6 * want_dx.abs().max().clamp(min=1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_is_rounded_once(dtype):
    """16-bit in and out, float32 inside: y within one rounding of the output type (|y| <= 1, so 2^-11 for
    float16, 2^-8 for bfloat16, relative to the largest entry), the gradient within two. The interpreter
    runs no tl.dot here, so bfloat16 is valid on the CPU too."""
    torch.manual_seed(1)
    x, dy = (torch.randn(4, 33, 2, 64, device=DEVICE).to(dtype) for _ in range(2))
    u = 2.0 ** (-11 if dtype == torch.float16 else -8)
    want_y, want_dx = float64_reference(x, dy)
    y, dx = triton_values(x, dy)
    assert y.dtype == dtype and dx.dtype == dtype
    assert (y.double() - want_y).abs().max() <= u * want_y.abs().max()
    assert (dx.double() - want_dx).abs().max() <= 2 * u * want_dx.abs().max()


def test_zero_rows_and_eps():
    """A zero row maps to zero with a finite gradient (1/sqrt(eps) times dy); eps enters as given."""
    x = torch.zeros(3, 8, device=DEVICE)
    x[1] = torch.arange(8.0)
    dy = torch.ones(3, 8, device=DEVICE)
    y, dx = triton_values(x, dy, eps=1e-2)
    want_y, want_dx = float64_reference(x, dy, eps=1e-2)
    assert torch.equal(y[0], torch.zeros(8, device=DEVICE)) and torch.isfinite(dx).all()
    assert torch.allclose(y.double(), want_y, atol=1e-7) and torch.allclose(dx.double(), want_dx, atol=1e-6)


def test_l2_normalize_agrees_with_the_kernel():
    """l2_normalize (PyTorch on the CPU, float64 included; the kernels on a GPU) and the kernels agree to float32
    rounding with the formula written out here, and inputs the kernels refuse stay in PyTorch."""
    torch.manual_seed(2)
    x = torch.randn(5, 7, 48, device=DEVICE)
    by_hand = x * torch.rsqrt(x.square().sum(-1, keepdim=True) + L2NORM_EPS)
    assert torch.allclose(l2_normalize(x), by_hand, atol=1e-6, rtol=0)
    assert torch.allclose(l2_normalize_triton(x), by_hand, atol=1e-6, rtol=0)
    assert l2_normalize(x.double()).dtype == torch.float64
    wide = torch.randn(3, 300, device=DEVICE)                            # D > 256: the kernels' limit
    assert torch.allclose(l2_normalize(wide), wide * torch.rsqrt(wide.square().sum(-1, keepdim=True) + L2NORM_EPS))


@pytest.mark.parametrize("x, eps, message", [
    (torch.randn(2, 300), L2NORM_EPS, "1 <= D <= 256"),
    (torch.randn(0, 8), L2NORM_EPS, "at least one row"),
    (torch.randn(2, 8).double(), L2NORM_EPS, "float32, bfloat16 or float16 for the kernels"),
    (torch.arange(8).view(2, 4), L2NORM_EPS, "floating-point"),
    (torch.tensor(1.0), L2NORM_EPS, "at least one dim"),
    (torch.randn(2, 8), -1.0, "eps must be"),
    ([1.0, 2.0], L2NORM_EPS, "x must be a torch.Tensor"),
])
def test_bad_arguments_are_named(x, eps, message):
    with pytest.raises(ValueError, match=message):
        l2_normalize_triton(x, eps)


@pytest.mark.parametrize("entry", [l2_normalize, l2_normalize_triton])
@pytest.mark.parametrize("eps", [0, 0.0, 1e-50])
def test_eps_that_makes_a_zero_row_nan_is_refused(entry, eps):
    """eps = 0 divides a zero row by 0; 1e-50 > 0 rounds to 0 in float32, where both paths add eps, and does
    the same. Both entry points refuse them with one message naming eps, what came and the bound."""
    with pytest.raises(ValueError, match=r"^eps must be a finite number >= 1\.18e-38 .*got " + repr(eps) + "$"):
        entry(torch.zeros(2, 8, device=DEVICE), eps)


@pytest.mark.parametrize("entry", [l2_normalize, l2_normalize_triton])
def test_smallest_eps_keeps_a_zero_row_finite(entry):
    """At the bound, float32's smallest normal number, a zero row maps to zero in both paths, and so does the
    PyTorch path in float64."""
    x = torch.zeros(2, 8, device=DEVICE)
    x[1] = torch.arange(8.0)
    y = entry(x, L2NORM_MIN_EPS)
    assert torch.equal(y[0], torch.zeros(8, device=DEVICE)) and torch.isfinite(y).all()
    assert torch.equal(l2_normalize(x.double(), L2NORM_MIN_EPS)[0], torch.zeros(8, dtype=torch.float64, device=DEVICE))
