"""Chapter 12's Triton gated RMSNorm (gdn2edu.gated_norm) against RMSNormGated's PyTorch path: output and
every gradient, in the interpreter."""

import copy

import pytest
import torch
from test_short_conv import relative_errors

from gdn2edu.fused_recurrent import _row_grid
from gdn2edu.gated_norm import NORM_TILES, rms_norm_gated_triton
from gdn2edu.layers import GatedDeltaNet2, RMSNormGated


def norm_and_grads(norm, x, gate, use_triton, dtype):
    """(y, dx, dgate, dweight) of norm on copies of x and gate cast to dtype, pulled back from a fixed random
    cotangent of y (drawn in float64, rounded to x's dtype)."""
    given = x.dtype
    norm = copy.deepcopy(norm).to(dtype)
    x, gate = (t.to(dtype, copy=True).requires_grad_() for t in (x, gate))
    y = norm(x, gate, use_triton)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(given).to(dtype)
    (y * dy).sum().backward()
    return y, x.grad, gate.grad, norm.weight.grad


def random_norm(D):
    norm = RMSNormGated(D)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.5 * torch.randn(D))          # not all ones: the weight's role is tested
    return norm


CASES = [(D, rows) for D in (16, 100, 128) for rows in (1, 7, 40)]


@pytest.mark.parametrize("D, rows", CASES)
def test_triton_matches_pytorch_float32(D, rows):
    """float32: both paths compute the same float32 formula, the kernel's row sums and dweight's sum over rows
    in another order; measured relative errors up to 2.5e-7 (four float32 unit roundoffs of 6e-8), so 1e-6."""
    torch.manual_seed(D * 100 + rows)
    norm = random_norm(D)
    x, gate = torch.randn(rows, 3, D), torch.randn(rows, 3, D)          # leading dims [rows, 3] flattened
    got = norm_and_grads(norm, x, gate, True, torch.float32)
    want = norm_and_grads(norm, x, gate, False, torch.float32)
    assert got[0].shape == x.shape and got[0].dtype == torch.float32
    assert all(e < 1e-6 for e in relative_errors(got, want)), relative_errors(got, want)


@pytest.mark.parametrize("dtype, roundoff", [(torch.float16, 2.0 ** -11), (torch.bfloat16, 2.0 ** -8)])
@pytest.mark.parametrize("D, rows", [(16, 1), (100, 7), (128, 40)])
def test_triton_16_bit_within_three_roundoffs_of_float64(dtype, roundoff, D, rows):
    """16-bit inputs, against the PyTorch path in float64 on the same 16-bit values (weight and cotangent too).
    The kernels accumulate in float32 and round each result once to the 16-bit type: at most one unit
    roundoff u of the tensor's largest entry, two in the interpreter's bfloat16, which truncates (as
    tests/test_short_conv.py found). Measured: up to 0.63 u in float16, 1.23 u in bfloat16; the bound is 3 u."""
    torch.manual_seed(D + rows)
    norm = random_norm(D)
    x, gate = torch.randn(rows, 2, D).to(dtype), torch.randn(rows, 2, D).to(dtype)
    got = norm_and_grads(norm.to(dtype), x, gate, True, dtype)
    want = norm_and_grads(norm.to(dtype), x, gate, False, torch.float64)
    assert all(t.dtype == dtype for t in got)
    assert all(e < 3 * roundoff for e in relative_errors(got, want)), relative_errors(got, want)


def test_errors_name_the_argument():
    w = torch.ones(8)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match="weight must have shape"):
        rms_norm_gated_triton(x, x, torch.ones(2, 8))
    with pytest.raises(ValueError, match="weight must have shape"):
        rms_norm_gated_triton(torch.randn(2, 300), torch.randn(2, 300), torch.ones(300))
    with pytest.raises(ValueError, match="x must have shape"):
        rms_norm_gated_triton(torch.randn(2, 3, 6), x, w)
    with pytest.raises(ValueError, match="gate must have x's shape"):
        rms_norm_gated_triton(x, x[:, :2], w)
    with pytest.raises(ValueError, match="gate must have x's shape and dtype"):
        rms_norm_gated_triton(x, x.half(), w)
    with pytest.raises(ValueError, match="weight must be on x's device"):
        rms_norm_gated_triton(x, x, torch.ones(8, device="meta"))
    with pytest.raises(ValueError, match="at least one row"):
        rms_norm_gated_triton(torch.randn(0, 8), torch.randn(0, 8), w)
    with pytest.raises(ValueError, match="x must be float32"):
        rms_norm_gated_triton(x.double(), x.double(), w)
    with pytest.raises(ValueError, match="weight must be float32"):
        rms_norm_gated_triton(x, x, w.double())


def test_strided_inputs_and_large_row_grid():
    """Strided x and gate are read as their values; rows past CUDA's 65535 cap on a grid's second and third
    axes still launch (rows are on the first axis)."""
    torch.manual_seed(0)
    norm = random_norm(8)
    x, gate = torch.randn(5, 16)[:, ::2], torch.randn(8, 5).T
    with torch.no_grad():
        assert (norm(x, gate, True) - norm(x, gate)).abs().max() < 1e-6
    BR, BD, grid = _row_grid(70000 * 16, 8, NORM_TILES)
    assert len(grid) == 1 and grid[0] == 70000 and BD == 8


def test_layer_takes_the_triton_norm_only_with_triton_kernels(monkeypatch):
    """backend "triton" sends the output norm to the kernel, "torch" (and "auto" on a CPU) does not."""
    calls = []
    original = RMSNormGated.forward
    monkeypatch.setattr(RMSNormGated, "forward", lambda self, x, gate, use_triton=False: calls.append(use_triton)
                        or original(self, x, gate, use_triton))
    x = torch.randn(1, 6, 32)
    for backend, expected in (("triton", True), ("torch", False), ("auto", False)):
        calls.clear()
        GatedDeltaNet2(hidden_size=32, head_dim=16, num_heads=2, backend=backend).eval()(x)
        assert calls == [expected]
