"""The Triton backward of chunk_gdn2 (Chapter 10) against float64 autograd through recurrent_gdn2, in the
Triton interpreter on the CPU.

Tolerance: float32 inputs and accumulation over 64-token chunks with a triangular inverse lose a few 1e-6
relative to a gradient's largest entry (measured up to about 2e-5 under strong decay); each gradient must be
within 1e-4 of its reference's largest entry, and a reference whose entries are all below 1e-6 (a zero
gate's gradient path) is compared with the absolute threshold 1e-6. Wrong masks, decays, signs or offsets
give errors of order 1.
"""

import pytest
import torch
from conftest import make_inputs

from gdn2edu import chunk_gdn2, chunk_gdn2_backward_triton, recurrent_gdn2

TOL, NEAR_ZERO = 1e-4, 1e-6
NAMES = ("q", "k", "v", "g", "b", "w", "initial_state")


def oracle(x, S0, do, dST, offsets):
    """float64 autograd through recurrent_gdn2, sequence by sequence along T; grads of (q..w, S0 or None)."""
    leaves = [t.clone().requires_grad_() for t in x] + ([S0.clone().requires_grad_()] if S0 is not None else [])
    loss = 0.0
    for n, (t0, t1) in enumerate(zip(offsets, offsets[1:])):
        o, S = recurrent_gdn2(*(t[:, t0:t1] for t in leaves[:6]),
                              initial_state=None if S0 is None else leaves[6][n:n + 1], output_final_state=True)
        loss = loss + (o * do[:, t0:t1]).sum() + (0.0 if dST is None else (S * dST[n:n + 1]).sum())
    return list(torch.autograd.grad(loss, leaves)) + ([] if S0 is not None else [None])


def kernel(x, S0, do, dST, cu_seqlens):
    leaves = [t.float().requires_grad_() for t in x] + ([S0.float().requires_grad_()] if S0 is not None else [])
    o, S = chunk_gdn2(*leaves[:6], initial_state=None if S0 is None else leaves[6], output_final_state=True,
                      cu_seqlens=cu_seqlens)
    loss = (o * do.float()).sum() + (0.0 if dST is None else (S * dST.float()).sum())
    return list(torch.autograd.grad(loss, leaves)) + ([] if S0 is not None else [None])


def assert_close(got, want):
    for name, x, ref in zip(NAMES, got, want):
        if ref is None:
            assert x is None, name
            continue
        assert x.shape == ref.shape and x.dtype == torch.float32 and torch.isfinite(x).all(), name
        err, peak = (x.double() - ref).abs().max().item(), ref.abs().max().item()
        assert err < (NEAR_ZERO if peak < NEAR_ZERO else TOL * peak), (name, err, peak)


def run_case(B, T, H, K, V, offsets=None, h0=True, upstream=True, seed=0, decay_max=None, erase_max=2.0,
             zero_gates=False):
    x = list(make_inputs(B, T, H, K, V, erase_max=erase_max, seed=seed))
    gen = torch.Generator().manual_seed(seed + 1)
    if decay_max is not None:
        x[3] = -decay_max * torch.rand(B, T, H, K, generator=gen, dtype=torch.float64)
    if zero_gates:
        x[4][:, ::5] = 0.0
        x[5][:, 2::7] = 0.0
    N = B if offsets is None else len(offsets) - 1
    S0 = torch.randn(N, H, K, V, generator=gen, dtype=torch.float64) if h0 else None
    dST = torch.randn(N, H, K, V, generator=gen, dtype=torch.float64) if upstream else None
    do = torch.randn(B, T, H, V, generator=gen, dtype=torch.float64)
    if offsets is None:       # the batch as B packed sequences of length T, for the oracle
        want = oracle([t.reshape(1, B * T, H, -1) for t in x], S0, do.reshape(1, B * T, H, V), dST,
                      list(range(0, (B + 1) * T, T)))
        want = [t.reshape(B, T, H, -1) for t in want[:6]] + want[6:]
        got = kernel(x, S0, do, dST, None)
    else:
        want = oracle(x, S0, do, dST, offsets)
        got = kernel(x, S0, do, dST, torch.tensor(offsets))
    assert_close(got, want)


@pytest.mark.parametrize("B, T, K, V", [(2, 17, 16, 16), (1, 100, 32, 16), (1, 130, 16, 32), (1, 64, 32, 32)])
def test_tails_and_unequal_dims(B, T, K, V):
    run_case(B, T, 2, K, V, seed=T + K)


def test_several_key_and_value_blocks(monkeypatch):
    """16-wide key and value blocks on K = 48, V = 40, under strong decay: the scan runs three value-block
    programs (the last one partial), the local and inputs kernels loop over three value blocks, and the
    inputs kernel runs three key-block programs per chunk."""
    from gdn2edu import chunk_backward_kernels as cb

    monkeypatch.setitem(cb.BWD_INPUTS_TILES, "BK", 16)
    monkeypatch.setitem(cb.BWD_INPUTS_TILES, "BV", 16)
    monkeypatch.setitem(cb.BWD_LOCAL_TILES, "BV", 16)
    monkeypatch.setitem(cb.BWD_SCAN_TILES, "BV", 16)
    run_case(1, 100, 1, 48, 40, decay_max=3.0, seed=6)


def test_shorter_than_a_chunk_without_state_or_upstream():
    run_case(2, 9, 1, 16, 32, h0=False, upstream=False, seed=3)


def test_packed_sequences_strong_decay_zero_gates():
    run_case(1, 133, 1, 16, 16, offsets=[0, 5, 70, 133], decay_max=5.0, zero_gates=True, seed=4)


def test_strong_decay_all_finite():
    run_case(1, 130, 1, 16, 16, decay_max=5.0, seed=5)


def test_zero_gate_gradients_are_near_zero_paths():
    """Erase gates all zero (the state is only decayed and written): every gradient matches, db included."""
    run_case(1, 70, 1, 16, 16, erase_max=0.0, seed=6)


def test_functional_backward_matches_autograd_function():
    x = [t.float() for t in make_inputs(1, 40, 2, 16, 16, seed=7)]
    do, dht = torch.randn(1, 40, 2, 16), torch.randn(1, 2, 16, 16)
    grads = chunk_gdn2_backward_triton(*x, do, dht=dht)
    assert grads[6] is None
    leaves = [t.clone().requires_grad_() for t in x]
    o, S = chunk_gdn2(*leaves, output_final_state=True)
    want = torch.autograd.grad((o * do).sum() + (S * dht).sum(), leaves)
    for got, ref in zip(grads[:6], want):
        assert torch.equal(got, ref)


def test_bad_adjoints_are_named():
    x = [t.float() for t in make_inputs(1, 20, 1, 16, 16)]
    with pytest.raises(ValueError, match="do"):
        chunk_gdn2_backward_triton(*x, torch.zeros(1, 20, 1, 8))
    with pytest.raises(ValueError, match="dht"):
        chunk_gdn2_backward_triton(*x, torch.zeros(1, 20, 1, 16), dht=torch.zeros(2, 1, 16, 16))


def test_no_grad_keeps_the_forward_only_path():
    x = [t.float().requires_grad_() for t in make_inputs(1, 20, 1, 16, 16)]
    with torch.no_grad():
        o, _ = chunk_gdn2(*x)
    assert o.grad_fn is None
    o, _ = chunk_gdn2(*x)
    assert o.grad_fn is not None


def test_saved_intermediates_give_the_recomputed_gradients(monkeypatch):
    """The default keeps the intra and scan kernels' results (its backward launches neither), recompute_states
    keeps the intra kernel's only (its backward runs the scan again), disable_recompute keeps everything,
    chunk_gdn2_backward_triton recomputes everything; the same float32 kernels give the same bits."""
    import gdn2edu.chunk_kernels as ck
    from gdn2edu.chunk_backward_kernels import KEPT, KEPT_LEAN, SAVED, chunk_gdn2_backward_triton
    launches = []
    launch_intra, scan_states = ck._launch_intra, ck._scan_states
    monkeypatch.setattr(ck, "_launch_intra", lambda *args: launches.append(args[-1]) or launch_intra(*args))
    monkeypatch.setattr(ck, "_scan_states", lambda *args: launches.append("scan") or scan_states(*args))
    x = [t.float() for t in make_inputs(1, 70, 2, 16, 16, seed=8)]
    S0, do = torch.randn(1, 2, 16, 16), torch.randn(1, 70, 2, 16)
    results = []
    modes = ((dict(), KEPT, []), (dict(recompute_states=True), KEPT_LEAN, ["scan"]),
             (dict(disable_recompute=True), SAVED, []))
    for options, kept, relaunched in modes:
        leaves = [t.clone().requires_grad_() for t in (*x, S0)]
        o, _ = chunk_gdn2(*leaves[:6], initial_state=leaves[6], **options)
        assert len(o.grad_fn.saved_tensors) == 7 + len(kept)
        launches.clear()
        results.append(torch.autograd.grad((o * do).sum(), leaves))
        assert launches == relaunched                           # no backward recomputes A or Aqk
    results.append(chunk_gdn2_backward_triton(*x, do, initial_state=S0))
    assert launches == [1, "scan"]                              # the recomputing one does: intra (checked mode)
    for default, *others in zip(*results):
        assert all(torch.equal(default, other) for other in others)


def test_returned_final_state_may_be_changed_in_place():
    """The forward keeps its final state for the backward; changing the returned one in place (a decoding
    cache) must not break the backward, in any mode."""
    x = [t.float() for t in make_inputs(1, 70, 2, 16, 16, seed=5)]
    for options in ({}, dict(recompute_states=True), dict(disable_recompute=True)):
        leaves = [t.clone().requires_grad_() for t in x]
        o, ht = chunk_gdn2(*leaves, output_final_state=True, **options)
        want = torch.autograd.grad(o.sum(), leaves, retain_graph=True)
        with torch.no_grad():
            ht.mul_(0.5)
        got = torch.autograd.grad(o.sum(), leaves)
        assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_recompute_options_are_checked():
    """recompute_states and disable_recompute are bools, and not both True."""
    leaves = [t.float().requires_grad_() for t in make_inputs(1, 20, 1, 16, 16, seed=2)]
    with pytest.raises(ValueError, match="recompute_states must be a bool"):
        chunk_gdn2(*leaves, recompute_states=1)
    with pytest.raises(ValueError, match="choose one"):
        chunk_gdn2(*leaves, disable_recompute=True, recompute_states=True)


def test_half_precision_within_the_rewy_thresholds():
    """fp16 inputs take the 16-bit path of the GPU (16-bit intermediates and products, float32 accumulation);
    the interpreter computes fp16 products correctly (bf16 ones it does not, see ../shared/GPU.md). Each
    gradient is held to ReWY's relative L2 thresholds for bf16 on the H200: 0.8% for q, k, v and the initial
    state, 2% for g, b, w; fp16 carries 3 more mantissa bits than bf16, so it must pass them with room."""
    B, T, H, K, V = 1, 130, 2, 32, 32
    x = [t.half().double() for t in make_inputs(B, T, H, K, V, erase_max=1.0, seed=9)]
    x[3] = x[3].float().double()                               # g stays float32, as in the baseline
    gen = torch.Generator().manual_seed(10)
    S0 = 0.1 * torch.randn(B, H, K, V, generator=gen, dtype=torch.float64)
    dST = torch.randn(B, H, K, V, generator=gen, dtype=torch.float64)
    do = torch.randn(B, T, H, V, generator=gen, dtype=torch.float64).half().double()
    want = oracle(x, S0, do, dST, [0, T])
    leaves = [t.half().requires_grad_() for t in x] + [S0.float().requires_grad_()]
    leaves[3] = x[3].float().requires_grad_()
    o, S = chunk_gdn2(*leaves[:6], initial_state=leaves[6], output_final_state=True)
    got = torch.autograd.grad((o.float() * do.float()).sum() + (S * dST.float()).sum(), leaves)
    limits = {"q": 8e-3, "k": 8e-3, "v": 8e-3, "initial_state": 8e-3, "g": 2e-2, "b": 2e-2, "w": 2e-2}
    for name, x_, ref in zip(NAMES, got, want):
        assert x_.dtype == leaves[NAMES.index(name)].dtype and torch.isfinite(x_).all(), name
        err = ((x_.double() - ref).norm() / ref.norm()).item()
        assert err < limits[name], (name, err)


def test_backward_refuses_a_kept_dict_of_other_names():
    """_backward takes what the forward kept: the names of KEPT_LEAN, KEPT or SAVED, nothing in between."""
    from gdn2edu.chunk_backward_kernels import KEPT, _backward
    from gdn2edu.chunk_kernels import _forward_states, _plan
    x = [t.float() for t in make_inputs(1, 20, 1, 16, 16, seed=3)]
    p = _plan(*x, None, None, None)
    f = _forward_states(*x, None, True, p, store_G=True)
    with pytest.raises(ValueError, match="kept must hold the names of KEPT_LEAN"):
        _backward(*x, None, torch.zeros_like(x[2]), None, p, {name: f[name] for name in KEPT[:2]})
