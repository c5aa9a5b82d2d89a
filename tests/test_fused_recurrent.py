"""fused_recurrent_gdn2 (Triton; the interpreter without a GPU) against the float64 oracle recurrent_gdn2.

Tolerances. The oracle runs on the kernel's own (rounded) inputs converted to float64, so the difference is
the kernel's float32 arithmetic only. Per token each state entry sees a handful of float32 operations and
two length-K sums; the transitions have eigenvalues in [-1, 1] (unit keys, b <= 2, g <= 0), so rounding
errors are not amplified and add up like a random walk over T tokens: about sqrt(T * K) * 2^-24, i.e.
~3e-6 in the worst case here (T = 33, K = 64). Measured errors are ~1e-7; 1e-5 leaves margin yet still
catches any real mistake (a wrong gate, mask or order shows up at 1e-2 or above). Half-precision outputs
are float32 results rounded once to their dtype: elementwise relative error at most one unit roundoff u
(2^-11 float16, 2^-8 bfloat16), so in norm at most u, plus the float32 error: tolerance u + 1e-5.
"""

import pytest
import torch

import gdn2edu
import gdn2edu.fused_recurrent as fused_module
from conftest import make_inputs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FP32_TOL = 1e-5
UNIT_ROUNDOFF = {torch.float32: 0.0, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def rel(x, ref):
    return ((x.double().cpu() - ref).norm() / ref.norm()).item()


def gdn2_case(B, T, H, K, V, dtype, seed, with_state):
    """Inputs with strong decay (g down to -5) and erase gates up to 2, in dtype on DEVICE, plus S0."""
    q, k, v, _, b, w = make_inputs(B, T, H, K, V, erase_max=2.0, seed=seed)
    g = -5.0 * torch.rand(B, T, H, K, generator=torch.Generator().manual_seed(seed + 1000), dtype=torch.float64)
    inputs = tuple(x.to(device=DEVICE, dtype=dtype) for x in (q, k, v, g, b, w))
    S0 = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(seed + 2000)).to(DEVICE) if with_state else None
    return inputs, S0


def check_against_oracle(inputs, S0, dtype, scale=None):
    o, S = gdn2edu.fused_recurrent_gdn2(*inputs, scale=scale, initial_state=S0, output_final_state=True)
    o_ref, S_ref = gdn2edu.recurrent_gdn2(*(x.cpu().double() for x in inputs), scale=scale,
                                          initial_state=None if S0 is None else S0.cpu().double(),
                                          output_final_state=True)
    assert o.dtype == dtype and o.shape == o_ref.shape
    assert S.dtype == torch.float32 and S.shape == S_ref.shape
    assert rel(o, o_ref) < UNIT_ROUNDOFF[dtype] + FP32_TOL
    assert rel(S, S_ref) < FP32_TOL


@pytest.mark.parametrize("T", [1, 7, 33])
@pytest.mark.parametrize("K,V", [(16, 16), (32, 32), (64, 64), (24, 40), (16, 64), (40, 24)])
def test_float32_matches_oracle(T, K, V):
    inputs, S0 = gdn2_case(2, T, 2, K, V, torch.float32, seed=10 * T + K + V, with_state=T != 7)
    check_against_oracle(inputs, S0, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("K,V", [(32, 32), (24, 40)])
def test_half_precision_inputs_keep_a_float32_state(dtype, K, V):
    inputs, S0 = gdn2_case(1, 7, 2, K, V, dtype, seed=K + V, with_state=True)
    check_against_oracle(inputs, S0.to(dtype), dtype)


def test_several_value_blocks_and_custom_scale():
    """K = 100 (BK = 128) splits V = 40 into three blocks of 16, the last one half masked."""
    assert fused_module._tiles(100, 40) == (128, 16)
    inputs, S0 = gdn2_case(1, 5, 1, 100, 40, torch.float32, seed=3, with_state=True)
    check_against_oracle(inputs, S0, torch.float32, scale=0.37)


def test_no_final_state_and_zero_initial_state():
    inputs, _ = gdn2_case(1, 6, 3, 16, 24, torch.float32, seed=4, with_state=False)
    o, S = gdn2edu.fused_recurrent_gdn2(*inputs)
    o_ref, _ = gdn2edu.recurrent_gdn2(*(x.cpu().double() for x in inputs))
    assert S is None
    assert rel(o, o_ref) < FP32_TOL


def test_non_contiguous_inputs():
    """A [B, H, T, D] tensor transposed to [B, T, H, D] is not contiguous: the wrapper must copy it."""
    inputs, S0 = gdn2_case(1, 7, 2, 16, 32, torch.float32, seed=5, with_state=True)
    strided = tuple(x.transpose(1, 2).contiguous().transpose(1, 2) for x in inputs)
    assert not strided[0].is_contiguous()
    check_against_oracle(strided, S0, torch.float32)


def test_decode_steps_reproduce_the_sequence():
    inputs, S0 = gdn2_case(2, 9, 2, 24, 40, torch.float32, seed=6, with_state=True)
    o, S = gdn2edu.fused_recurrent_gdn2(*inputs, initial_state=S0, output_final_state=True)
    cache = S0.clone()
    state = cache
    for t in range(inputs[0].shape[1]):
        o_t, state = gdn2edu.fused_recurrent_gdn2_step(*(x[:, t] for x in inputs), state=state)
        assert o_t.shape == (2, 2, 40) and state.dtype == torch.float32
        # same float32 operations in the same order; only the state's resting place differs
        assert rel(o_t, o[:, t].cpu().double()) < 1e-6
    assert torch.equal(cache, S0)                             # the cached state is not modified
    assert rel(state, S.cpu().double()) < 1e-6


def test_step_matches_the_pytorch_step():
    inputs, S0 = gdn2_case(2, 1, 3, 32, 16, torch.float32, seed=7, with_state=True)
    token = [x[:, 0] for x in inputs]
    o, S = gdn2edu.fused_recurrent_gdn2_step(*token, state=S0)
    o_ref, S_ref = gdn2edu.recurrent_gdn2_step(*(x.cpu().double() for x in token), state=S0.cpu().double())
    assert rel(o, o_ref) < FP32_TOL and rel(S, S_ref) < FP32_TOL
    o0, S1 = gdn2edu.fused_recurrent_gdn2_step(*token)          # no cache: a zero state
    o0_ref, S1_ref = gdn2edu.recurrent_gdn2_step(*(x.cpu().double() for x in token))
    assert rel(o0, o0_ref) < FP32_TOL and rel(S1, S1_ref) < FP32_TOL


def _bad_calls():
    (q, k, v, g, b, w), S0 = gdn2_case(1, 3, 1, 8, 6, torch.float32, seed=8, with_state=True)
    big_k = torch.randn(1, 2, 1, 264, device=DEVICE)
    big_v = torch.randn(1, 2, 1, 300, device=DEVICE)
    yield "k", dict(q=big_k, k=big_k, g=big_k, b=big_k, v=v[:, :2], w=w[:, :2],
                   initial_state=None), "at most 256"
    yield "v", dict(q=q[:, :2], k=k[:, :2], g=g[:, :2], b=b[:, :2], v=big_v, w=big_v,
                   initial_state=None), "at most 256"
    yield "q", dict(q=q.double()), "float64"
    yield "w", dict(w=w.to(torch.float64)), "float64"
    yield "initial_state", dict(initial_state=S0.double()), "float64"
    yield "w", dict(w=b), "shape of v"                        # validate_inputs' checks still apply
    yield "scale", dict(scale=-1.0), "positive"


@pytest.mark.parametrize("argument,override,words", list(_bad_calls()))
def test_bad_input_raises_value_error_naming_the_argument(argument, override, words):
    (q, k, v, g, b, w), S0 = gdn2_case(1, 3, 1, 8, 6, torch.float32, seed=8, with_state=True)
    kwargs = dict(q=q, k=k, v=v, g=g, b=b, w=w, initial_state=S0)
    kwargs.update(override)
    with pytest.raises(ValueError, match=rf"^{argument} .*{words}"):
        gdn2edu.fused_recurrent_gdn2(**kwargs)


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setattr(fused_module, "_INTERPRET", False)
    inputs = tuple(x.cpu() for x in gdn2_case(1, 2, 1, 8, 8, torch.float32, seed=9, with_state=False)[0])
    with pytest.raises(ValueError, match=r"^q must be a CUDA tensor.*TRITON_INTERPRET=1"):
        gdn2edu.fused_recurrent_gdn2(*inputs)


def test_step_rejects_sequence_layout():
    (q, k, v, g, b, w), _ = gdn2_case(1, 3, 2, 8, 8, torch.float32, seed=10, with_state=False)
    with pytest.raises(ValueError, match="^q .*3-dim"):
        gdn2edu.fused_recurrent_gdn2_step(q, k[:, 0], v[:, 0], g[:, 0], b[:, 0], w[:, 0])
