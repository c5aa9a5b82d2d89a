"""recurrent_gdn2 against an independent float64 implementation, the family reductions, and bad input."""

import re

import numpy as np
import pytest
import torch

import gdn2edu
from conftest import make_inputs

# float64 rounding over a few dozen tokens of O(d) work stays near 1e-15; 1e-12 leaves three orders of
# margin while still catching any real error (a wrong gate or order shows up at 1e-2 or above).
TOL = 1e-12


def numpy_gdn2(q, k, v, g, b, w, scale, S0):
    """Independent oracle: the closed form (I - k (b*k)^T) Diag(exp g) S + k (w*v)^T in NumPy, per head."""
    q, k, v, g, b, w = (x.numpy() for x in (q, k, v, g, b, w))
    B, T, H, K = q.shape
    o = np.zeros(v.shape)
    S_end = np.zeros((B, H, K, v.shape[-1]))
    for bi in range(B):
        for h in range(H):
            S = S0[bi, h].numpy().copy()
            for t in range(T):
                kt = k[bi, t, h][:, None]
                S = (np.eye(K) - kt @ (b[bi, t, h][:, None] * kt).T) @ np.diag(np.exp(g[bi, t, h])) @ S \
                    + kt @ (w[bi, t, h] * v[bi, t, h])[None]
                o[bi, t, h] = S.T @ (scale * q[bi, t, h])
            S_end[bi, h] = S
    return torch.from_numpy(o), torch.from_numpy(S_end)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("with_state", [False, True])
def test_matches_independent_oracle_odd_sizes(with_state):
    B, T, H, K, V = 2, 37, 2, 24, 40
    inputs = make_inputs(B, T, H, K, V, erase_max=2.0, seed=1)
    S0 = torch.randn(B, H, K, V, dtype=torch.float64) if with_state else torch.zeros(B, H, K, V, dtype=torch.float64)
    o, S = gdn2edu.recurrent_gdn2(*inputs, initial_state=S0 if with_state else None, output_final_state=True)
    o_ref, S_ref = numpy_gdn2(*inputs, K ** -0.5, S0)
    assert o.dtype == torch.float64 and S.dtype == torch.float64
    assert rel(o, o_ref) < TOL
    assert rel(S, S_ref) < TOL


def test_custom_scale_and_no_final_state():
    inputs = make_inputs(1, 9, 1, 8, 4, seed=2)
    o, S = gdn2edu.recurrent_gdn2(*inputs, scale=0.3)
    o_ref, _ = numpy_gdn2(*inputs, 0.3, torch.zeros(1, 1, 8, 4, dtype=torch.float64))
    assert S is None
    assert rel(o, o_ref) < TOL


def test_kda_reduction():
    """b = w = beta (scalar per token) reproduces KDA's own update (I - beta k k^T) Diag(alpha) S + beta k v^T."""
    B, T, H, K, V = 1, 29, 2, 12, 7
    q, k, v, g, _, _ = make_inputs(B, T, H, K, V, seed=3)
    beta = torch.rand(B, T, H, dtype=torch.float64)
    g_, b, w = gdn2edu.family_gates("kda", beta, K, V, log_decay=g)
    o, _ = gdn2edu.recurrent_gdn2(q, k, v, g_, b, w, scale=1.0)
    o_ref = torch.zeros_like(o)
    for h in range(H):
        S = torch.zeros(K, V, dtype=torch.float64)
        for t in range(T):
            kt, bt = k[0, t, h][:, None], beta[0, t, h]
            S = (torch.eye(K, dtype=torch.float64) - bt * kt @ kt.T) @ torch.diag(g[0, t, h].exp()) @ S \
                + bt * kt @ v[0, t, h][None]
            o_ref[0, t, h] = S.T @ q[0, t, h]
    assert rel(o, o_ref) < TOL


def test_gated_deltanet_and_deltanet_gates():
    beta = torch.rand(2, 5, 3, dtype=torch.float64)
    decay = -torch.rand(2, 5, 3, dtype=torch.float64)
    g, b, w = gdn2edu.family_gates("gated_deltanet", beta, 4, 6, log_decay=decay)
    assert g.shape == (2, 5, 3, 4) and torch.equal(g[..., 2], decay)
    assert b.shape == (2, 5, 3, 4) and w.shape == (2, 5, 3, 6) and torch.equal(w[..., 5], beta)
    g, _, _ = gdn2edu.family_gates("deltanet", beta, 4, 6)
    assert torch.count_nonzero(g) == 0
    with pytest.raises(ValueError, match="member"):
        gdn2edu.family_gates("mamba", beta, 4, 6)
    with pytest.raises(ValueError, match="log_decay"):
        gdn2edu.family_gates("kda", beta, 4, 6, log_decay=decay)


def test_decode_steps_reproduce_the_sequence():
    B, T, H, K, V = 2, 11, 3, 8, 5
    inputs = make_inputs(B, T, H, K, V, seed=4)
    S0 = torch.randn(B, H, K, V, dtype=torch.float64)
    o, S = gdn2edu.recurrent_gdn2(*inputs, initial_state=S0, output_final_state=True)
    state, S0_copy = S0, S0.clone()
    for t in range(T):
        o_t, state_next = gdn2edu.recurrent_gdn2_step(*(x[:, t] for x in inputs), state=state)
        assert rel(o_t, o[:, t]) < TOL
        assert state_next is not state
        state = state_next
    assert torch.equal(S0, S0_copy) and rel(state, S) < TOL


def test_low_precision_inputs_compute_in_float32():
    inputs64 = make_inputs(1, 16, 2, 16, 16, seed=5)
    inputs16 = tuple(x.to(torch.bfloat16) for x in inputs64)
    o, S = gdn2edu.recurrent_gdn2(*inputs16, output_final_state=True)
    o_ref, _ = gdn2edu.recurrent_gdn2(*(x.to(torch.float64) for x in inputs16))
    assert o.dtype == torch.bfloat16 and S.dtype == torch.float32
    # bf16 output rounding (2^-8 relative) dominates the float32 compute error
    assert rel(o.double(), o_ref) < 1e-2


def _bad_calls():
    q, k, v, g, b, w = make_inputs(2, 5, 3, 8, 6, seed=6)
    S0 = torch.zeros(2, 3, 8, 6, dtype=torch.float64)
    yield "k", dict(k=k[:, :4])                                  # mismatched T
    yield "v", dict(v=v[:1])                                     # mismatched B
    yield "w", dict(w=w[:, :, :2])                               # mismatched H
    yield "g", dict(g=g[..., :7])                                # q/k/g/b not sharing K
    yield "b", dict(b=b[..., :7])
    yield "w", dict(w=w[..., :5])                                # v/w not sharing V
    yield "initial_state", dict(initial_state=S0[:, :, :, :5])
    yield "initial_state", dict(initial_state=S0[0])
    yield "q", dict(q=q.to(torch.int64))                         # non-floating dtypes
    yield "v", dict(v=v.to(torch.int32))
    yield "initial_state", dict(initial_state=S0.to(torch.int64))
    yield "scale", dict(scale=0.0)                               # scale not positive
    yield "scale", dict(scale=-1.0)
    yield "scale", dict(scale=float("nan"))
    yield "q", dict(q=q[0])                                      # wrong rank
    yield "q", dict(q=q.numpy())                                 # not a tensor


@pytest.mark.parametrize("argument,override", list(_bad_calls()))
def test_bad_input_raises_value_error_naming_the_argument(argument, override):
    q, k, v, g, b, w = make_inputs(2, 5, 3, 8, 6, seed=6)
    kwargs = dict(q=q, k=k, v=v, g=g, b=b, w=w)
    kwargs.update(override)
    with pytest.raises(ValueError, match=rf"^{argument} "):
        gdn2edu.recurrent_gdn2(**kwargs)


def test_step_rejects_sequence_layout():
    q, k, v, g, b, w = make_inputs(1, 3, 2, 4, 4, seed=7)
    with pytest.raises(ValueError, match="^q .*3-dim"):
        gdn2edu.recurrent_gdn2_step(q, k[:, 0], v[:, 0], g[:, 0], b[:, 0], w[:, 0])


@pytest.mark.parametrize("step", [gdn2edu.recurrent_gdn2_step, gdn2edu.fused_recurrent_gdn2_step])
def test_step_errors_name_the_state_argument(step):
    q, v = torch.randn(2, 3, 4), torch.randn(2, 3, 5)
    for bad in (torch.randn(2, 3, 4, 6), torch.randn(2, 3, 4), "cache"):
        with pytest.raises(ValueError, match="^state must"):
            step(q, q, v, q, q, v, state=bad)


@pytest.mark.parametrize("kwargs, message", [
    (dict(T=0), "T must be a positive int"),
    (dict(K=2.5), "K must be a positive int"),
    (dict(erase_max=-1.0), "erase_max must be a number >= 0"),
    (dict(decay_max=-5.0), "decay_max must be a number >= 0 or None"),
    (dict(dtype=torch.int32), "dtype must be a floating-point"),
])
def test_random_inputs_names_bad_arguments(kwargs, message):
    sizes = dict(B=1, T=4, H=1, K=3, V=2)
    with pytest.raises(ValueError, match=message):
        gdn2edu.random_inputs(**{**sizes, **kwargs})


def test_random_inputs_are_in_their_ranges_and_seeded():
    q, k, v, g, b, w = gdn2edu.random_inputs(2, 5, 3, 4, 6, decay_max=5.0, erase_max=1.5, seed=1)
    assert torch.allclose(k.norm(dim=-1), torch.ones(2, 5, 3, dtype=torch.float64))
    assert (g <= 0).all() and (g >= -5).all() and (b >= 0).all() and (b <= 1.5).all()
    assert (w >= 0).all() and (w <= 1).all() and v.shape == (2, 5, 3, 6)
    again = gdn2edu.random_inputs(2, 5, 3, 4, 6, decay_max=5.0, erase_max=1.5, seed=1)
    assert all(torch.equal(x, y) for x, y in zip((q, k, v, g, b, w), again))


@pytest.mark.parametrize("value", [0, -3, 2.0, True, "4", None])
def test_check_positive_ints_names_the_first_size_that_is_not_one(value):
    from gdn2edu.inputs import check_positive_ints
    with pytest.raises(ValueError, match=f"^H must be a positive int, got {re.escape(repr(value))}$"):
        check_positive_ints(B=2, H=value, K=value)
    assert check_positive_ints(B=1, T=7) is None        # nothing to say about good sizes
