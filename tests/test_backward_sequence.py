"""The explicit reverse algorithm (chunk_gdn2_explicit(backward="wy" | "rewy")) against float64 autograd."""

import pytest
import torch
from conftest import make_inputs

import gdn2edu

# Exact algebra in float64: rounding through chunk inverses and a few chunks of scan stays near 1e-14;
# 1e-9 relative (the threshold) leaves a wide margin.
TOL = 1e-9
LOCALS = ("wy", "rewy")


def rel(x, y):
    return ((x - y).norm() / y.norm()).item()


def reference_grads(inputs, S0, do, dht):
    leaves = [x.clone().requires_grad_() for x in inputs] + [S0.clone().requires_grad_()]
    o, S_T = gdn2edu.recurrent_gdn2(*leaves[:6], initial_state=leaves[6], output_final_state=True)
    return torch.autograd.grad((o * do).sum() + (S_T * dht).sum(), leaves)


def explicit_grads(inputs, S0, do, dht, chunk_size, local):
    leaves = [x.clone().requires_grad_() for x in inputs] + [S0.clone().requires_grad_()]
    o, S_T = gdn2edu.chunk_gdn2_explicit(*leaves[:6], initial_state=leaves[6], output_final_state=True,
                                      chunk_size=chunk_size, backward=local)
    return torch.autograd.grad((o * do).sum() + (S_T * dht).sum(), leaves)


@pytest.mark.parametrize("local", LOCALS)
@pytest.mark.parametrize("T,chunk_size", [(5, 16), (37, 16), (64, 16), (40, 64)])
def test_every_gradient_matches_the_recurrence(local, T, chunk_size):
    B, H, K, V = 2, 2, 8, 6
    inputs = make_inputs(B, T, H, K, V, erase_max=2.0, seed=T)
    gen = torch.Generator().manual_seed(T + 1)
    S0, dht = (torch.randn(B, H, K, V, generator=gen, dtype=torch.float64) for _ in range(2))
    do = torch.randn(B, T, H, V, generator=gen, dtype=torch.float64)
    expected = reference_grads(inputs, S0, do, dht)
    got = explicit_grads(inputs, S0, do, dht, chunk_size, local)
    for name, x, y in zip(("q", "k", "v", "g", "b", "w", "initial_state"), got, expected):
        assert x.shape == y.shape and x.dtype == y.dtype, name
        assert rel(x, y) < TOL, (name, rel(x, y))


@pytest.mark.parametrize("local", LOCALS)
def test_no_initial_state_and_no_final_state(local):
    inputs = [x.requires_grad_() for x in make_inputs(1, 21, 2, 4, 4, seed=5)]
    o, S_T = gdn2edu.chunk_gdn2_explicit(*inputs, chunk_size=8, backward=local)
    assert S_T is None
    got = torch.autograd.grad(o.square().sum(), inputs)
    o_ref, _ = gdn2edu.recurrent_gdn2(*inputs)
    for x, y in zip(got, torch.autograd.grad(o_ref.square().sum(), inputs)):
        assert rel(x, y) < TOL


@pytest.mark.parametrize("local", LOCALS)
def test_strong_decay_in_float32_is_finite_and_close(local):
    inputs = list(make_inputs(1, 128, 2, 16, 16, seed=7))
    inputs[3] = -5 * torch.rand_like(inputs[3])                 # G falls to about -160 in a chunk of 64
    leaves = [x.clone().requires_grad_() for x in inputs]
    o_ref, _ = gdn2edu.recurrent_gdn2(*leaves)
    do = torch.randn_like(o_ref)
    expected = torch.autograd.grad((o_ref * do).sum(), leaves)
    leaves32 = [x.float().requires_grad_() for x in inputs]
    o, _ = gdn2edu.chunk_gdn2_explicit(*leaves32, backward=local)
    got = torch.autograd.grad((o * do.float()).sum(), leaves32)
    for x, y in zip(got, expected):
        assert x.dtype == torch.float32 and torch.isfinite(x).all()
        # float32 through a 64-token inverse and two chunks: measured ~5e-6; 1e-4 keeps margin
        assert rel(x.double(), y) < 1e-4


@pytest.mark.parametrize("member", ["deltanet", "gated_deltanet", "kda"])
def test_tied_family_with_zero_and_tiny_beta(member):
    B, T, H, K, V = 1, 19, 2, 4, 3
    q, k, v, *_ = make_inputs(B, T, H, K, V, seed=11)
    gen = torch.Generator().manual_seed(12)
    beta = torch.rand(B, T, H, generator=gen, dtype=torch.float64)
    beta[:, ::3], beta[:, 1::3] = 0.0, 1e-12
    shape = {"deltanet": None, "gated_deltanet": (B, T, H), "kda": (B, T, H, K)}[member]
    log_decay = None if shape is None else \
        torch.nn.functional.logsigmoid(torch.randn(*shape, generator=gen, dtype=torch.float64))
    params = [beta.clone().requires_grad_()] + ([] if log_decay is None else [log_decay.clone().requires_grad_()])
    do = torch.randn(B, T, H, V, generator=gen, dtype=torch.float64)
    o_ref, _ = gdn2edu.recurrent_gdn2(q, k, v, *gdn2edu.family_gates(member, params[0], K, V, *params[1:]))
    expected = torch.autograd.grad((o_ref * do).sum(), params)
    for local in LOCALS:
        gates = [x.detach().requires_grad_() for x in gdn2edu.family_gates(member, beta, K, V, log_decay)]
        o, _ = gdn2edu.chunk_gdn2_explicit(q, k, v, *gates, chunk_size=8, backward=local)
        d_log_decay, d_beta = gdn2edu.tied_gate_grads(member, *torch.autograd.grad((o * do).sum(), gates))
        assert torch.isfinite(d_beta).all() and rel(d_beta, expected[0]) < TOL
        if log_decay is not None:
            assert rel(d_log_decay, expected[1]) < TOL


@pytest.mark.parametrize("local", LOCALS)
def test_gradcheck(local):
    inputs = make_inputs(1, 6, 1, 3, 2, seed=13)
    S0 = torch.randn(1, 1, 3, 2, dtype=torch.float64)
    leaves = [x.clone().requires_grad_() for x in (*inputs, S0)]

    def fn(*args):
        return gdn2edu.chunk_gdn2_explicit(*args[:6], initial_state=args[6], output_final_state=True,
                                        chunk_size=4, backward=local)
    assert torch.autograd.gradcheck(fn, leaves, fast_mode=True)


def test_value_errors():
    inputs = make_inputs(1, 4, 1, 2, 2)
    for bad in ("fla", None, "REWY"):
        with pytest.raises(ValueError, match="backward"):
            gdn2edu.chunk_gdn2_explicit(*inputs, backward=bad)
    with pytest.raises(ValueError, match="chunk_size"):
        gdn2edu.chunk_gdn2_explicit(*inputs, chunk_size=3, backward="rewy")
    do = torch.randn(1, 4, 1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="^local"):
        gdn2edu.chunk_gdn2_backward(*inputs, do, local="autograd")
    with pytest.raises(ValueError, match="^do "):
        gdn2edu.chunk_gdn2_backward(*inputs, do[:, :2])
    with pytest.raises(ValueError, match="^dht "):
        gdn2edu.chunk_gdn2_backward(*inputs, do, dht=torch.zeros(1, 1, 2, 3))
    with pytest.raises(ValueError, match="^member"):
        gdn2edu.tied_gate_grads("mamba", *(torch.zeros(1) for _ in range(3)))
