"""Chapter 12's Triton short convolution (gdn2edu.short_conv) against the layer's PyTorch path: output, new
state and every gradient, in the interpreter."""

import copy

import pytest
import torch

from gdn2edu.layers import GDN2Cache, GatedDeltaNet2, ShortConvolution
from gdn2edu.short_conv import short_conv_triton


def conv_and_grads(conv, x, state, use_triton, dtype):
    """(y, new state, dx, dweight, dbias, dstate) of conv on copies of x and state cast to dtype, pulled back
    from fixed random cotangents of y and the new state (drawn in float64 and rounded to x's dtype, laid out
    as [B, T, D] and [B, D, W - 1] whatever the strides of y)."""
    given = x.dtype
    conv = copy.deepcopy(conv).to(dtype)
    x = x.to(dtype, copy=True).requires_grad_()
    state = None if state is None else state.to(dtype, copy=True).requires_grad_()
    y, new_state = conv(x, state, use_triton)
    gen = torch.Generator().manual_seed(1)
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64).to(given).to(dtype)
    dstate = torch.randn(new_state.shape, generator=gen, dtype=torch.float64).to(given).to(dtype)
    ((y * dy).sum() + (new_state * dstate).sum()).backward()
    return (y, new_state, x.grad, conv.weight.grad, None if conv.bias is None else conv.bias.grad,
            None if state is None else state.grad)


def relative_errors(got, want):
    """Largest absolute difference over the reference's largest magnitude, per tensor (None and empty skipped)."""
    errors = []
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None and b.numel():
            assert a.shape == b.shape
            errors.append(((a.double() - b.double()).abs().max() / b.double().abs().max()).item())
    return errors


CASES = [(W, T, with_state, bias) for W in (1, 2, 4) for T in (1, 5, 67, 130)
         for with_state, bias in ((True, True), (False, False), (True, False))]


@pytest.mark.parametrize("W, T, with_state, bias", CASES)
def test_triton_matches_pytorch_float32(W, T, with_state, bias):
    """float32: the kernels sum the same W products in float32 as conv1d does, in another order; measured
    relative errors up to 9e-7 (a few float32 roundoffs, the sums over B and T for dweight), so 2e-6."""
    torch.manual_seed(W * 1000 + T)
    conv = ShortConvolution(100, W, bias=bias)                                  # D = 100: masked tiles
    x = torch.randn(3, T, 100)
    state = torch.randn(3, 100, W - 1) if with_state else None
    got = conv_and_grads(conv, x, state, True, torch.float32)
    want = conv_and_grads(conv, x, state, False, torch.float32)
    assert got[0].is_contiguous() and got[1].shape == (3, 100, W - 1)
    assert all(e < 2e-6 for e in relative_errors(got, want)), relative_errors(got, want)


@pytest.mark.parametrize("dtype, roundoff", [(torch.float16, 2.0 ** -11), (torch.bfloat16, 2.0 ** -8)])
@pytest.mark.parametrize("W, T", [(2, 5), (4, 67), (4, 130)])
def test_triton_16_bit_within_three_roundoffs_of_float64(dtype, roundoff, W, T):
    """16-bit inputs, against the PyTorch path run in float64 on the same 16-bit values (and cotangents).
    The kernels accumulate in float32 and round each result once to the 16-bit type: one unit roundoff u of
    the tensor's largest entry, two in the interpreter's bfloat16, which truncates (seen: 1.96 u on random
    floats, against 0.99 u for torch's rounding); dx and dstate add one more, where PyTorch adds the new
    state's gradient to the kernel's. Measured: 0.8 u in float16, 1.8 u in bfloat16; the bound is 3 u.
    (No tl.dot here, so the interpreter's bf16 dot problem does not arise.)"""
    torch.manual_seed(T)
    conv = ShortConvolution(100, W, bias=True).to(dtype)
    x, state = torch.randn(2, T, 100).to(dtype), torch.randn(2, 100, W - 1).to(dtype)
    got = conv_and_grads(conv, x, state, True, dtype)
    want = conv_and_grads(conv, x, state, False, torch.float64)
    assert all(t is None or t.dtype == dtype for t in got)
    assert all(e < 3 * roundoff for e in relative_errors(got, want)), relative_errors(got, want)


def test_state_without_grad_and_decoding_steps():
    """A state that needs no gradient, and T = 1 steps through the returned states, equal one long call."""
    torch.manual_seed(0)
    conv = ShortConvolution(33, 4, bias=True)
    x = torch.randn(2, 9, 33)
    with torch.no_grad():
        whole, _ = conv(x, None, True)
        y, state = conv(x[:, :6], None, True)
        steps = [y]
        for t in range(6, 9):
            y, state = conv(x[:, t:t + 1], state, True)
            steps.append(y)
    assert (torch.cat(steps, 1) - whole).abs().max() < 1e-6
    assert torch.equal(state, x[:, 6:].transpose(1, 2))


def test_errors_name_the_argument():
    conv = ShortConvolution(4, 3)
    with pytest.raises(ValueError, match="state"):
        conv(torch.randn(1, 5, 4), torch.zeros(1, 4, 3), True)
    with pytest.raises(ValueError, match="x must have shape"):
        conv(torch.randn(1, 5, 6), None, True)
    with pytest.raises(ValueError, match="x must have shape"):
        conv(torch.randn(1, 5, 6))
    with pytest.raises(ValueError, match="T >= 1"):
        short_conv_triton(torch.randn(1, 0, 4), conv.weight)
    with pytest.raises(ValueError, match="x must be float32"):
        short_conv_triton(torch.randn(1, 5, 4, dtype=torch.float64), conv.weight)
    with pytest.raises(ValueError, match="weight must have shape"):
        short_conv_triton(torch.randn(1, 5, 4), conv.weight[:, 0])
    with pytest.raises(ValueError, match="bias must be None or have shape"):
        short_conv_triton(torch.randn(1, 5, 4), conv.weight, torch.zeros(3))
    with pytest.raises(ValueError, match="bias must be on x's device"):
        short_conv_triton(torch.randn(1, 5, 4), conv.weight, torch.zeros(4, device="meta"))


def test_strided_bias_and_large_batch_grid():
    """A bias that is a strided view is read as its values, not its storage; and a batch past CUDA's 65535
    cap on a grid's second and third axes still launches (batch and row blocks share the first axis)."""
    torch.manual_seed(0)
    conv = ShortConvolution(8, 3, bias=True)
    x = torch.randn(2, 9, 8)
    every_other = torch.randn(16)[::2]
    with torch.no_grad():
        conv.bias.copy_(every_other)
    want, _ = conv(x, None, False)
    got, _ = short_conv_triton(x, conv.weight, every_other)
    assert (got - want).abs().max() < 1e-6
    from gdn2edu.short_conv import _grid
    BT, BD, grid = _grid(torch.empty(70000, 1, 8, device="meta"), 1)
    assert len(grid) == 2 and grid[0] == 70000 and grid[1] == 1


def test_layer_takes_the_triton_convolution_only_with_triton_kernels(monkeypatch):
    """backend "triton" sends the three convolutions to the kernels, "torch" (and "auto" on a CPU) does not;
    the convolutions return their states only when the call keeps a cache."""
    calls = []
    original = ShortConvolution.forward

    def spy(self, x, state=None, use_triton=False, output_final_state=True):
        y, new_state = original(self, x, state, use_triton, output_final_state)
        calls.append((use_triton, new_state is not None))
        return y, new_state
    monkeypatch.setattr(ShortConvolution, "forward", spy)
    x = torch.randn(1, 6, 32)
    for backend, triton in (("triton", True), ("torch", False), ("auto", False)):
        for use_cache in (False, True):
            calls.clear()
            layer = GatedDeltaNet2(hidden_size=32, head_dim=16, num_heads=2, backend=backend, layer_idx=0).eval()
            layer(x, use_cache=use_cache)
            assert calls == [(triton, use_cache)] * 3


def test_triton_layer_decodes_through_its_conv_states_like_torch():
    """Prefill then one-token steps through a GDN2Cache on backend "triton" (conv states from the kernels'
    path) against backend "torch", float32: within the layer test's 1e-4 of the output's size."""
    torch.manual_seed(0)
    args = dict(hidden_size=32, head_dim=16, num_heads=2, layer_idx=0, conv_bias=True)
    ours = GatedDeltaNet2(**args, backend="torch").eval()
    tri = GatedDeltaNet2(**args, backend="triton").eval()
    tri.load_state_dict(ours.state_dict(), strict=True)
    x = torch.randn(2, 8, 32)
    outputs = []
    with torch.no_grad():
        for layer in (ours, tri):
            cache = GDN2Cache()
            outs = [layer(x[:, :5], past_key_values=cache, use_cache=True)[0]]
            outs += [layer(x[:, t:t + 1], past_key_values=cache, use_cache=True)[0] for t in range(5, 8)]
            outputs.append((torch.cat(outs, 1), *cache.get(0)["conv_state"]))
    for got, want in zip(outputs[1], outputs[0]):
        assert (got - want).abs().max() < 1e-4 * want.abs().max()
