"""The two intra-chunk paths of chunk_gdn2 (Chapters 9 and 10) in the Triton interpreter: the default path stays
finite and accurate for every gate g <= 0, float32 and float16, forward and backward; safe_gate=True is the
unchecked midpoint path, with FLA's keyword rules.

Cases and the pass rule come from tools/gpu_test_matrix.py, the H200 matrix, at sizes the interpreter runs
in seconds (T = 130: two full chunks and a tail, K = 32 and V = 16, an initial state and a final-state
adjoint). The rule is FLA's: a tensor passes when its largest absolute error is at most 1e-6 or its RMS error
is below FLA's tolerance times the reference's RMS (o, ht 0.005; dq, dk, dv, dh0 0.008; dg, db, dw 0.02).
Those tolerances are FLA's for float16 inputs; float32 passes them by orders of magnitude, so float32 must
also meet the 1e-4 of the other kernel tests. bf16 is the GPU's to test: the interpreter's bf16 products are
wrong (see ../shared/GPU.md).
"""

import sys
import warnings

import pytest
import torch
from conftest import ROOT, make_inputs

from gdn2edu import chunk_gdn2, chunk_gdn2_backward_triton

sys.path.insert(0, str(ROOT / "tools"))
import gpu_test_matrix as matrix  # noqa: E402

GATES = ("one token -100", "every token -12", "zero", "logsigmoid/0.1", "logsigmoid/1")
# the interpreter's numpy warns of the infinities that the first (midpoint) pass forms on flagged chunks,
# which the intra kernel then redoes; the tests judge what comes out
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("gate", GATES)
def test_default_path_matches_float64_for_every_gate(gate, dtype):
    case = matrix.extreme(gate, dtype, B=1, T=130, H=2, K=32, V=16)
    leaves, adjoints, offsets = matrix.case_inputs(case, torch.device("cpu"))
    if gate == "one token -100":                      # the tool puts it on token 37; add one in the second chunk
        leaves[3][:, 100] = -100.0
    want = matrix.reference(leaves, adjoints, offsets, None)
    got = matrix.under_test(chunk_gdn2, leaves, adjoints, case)
    verdict = matrix.judge(got, want)
    assert all(v["finite"] for v in verdict.values()), verdict
    assert all(v["passed"] for v in verdict.values()), {n: v for n, v in verdict.items() if not v["passed"]}
    if dtype == "fp32":
        assert all(v["ratio"] < 1e-4 or v["max_abs"] <= 1e-6 for v in verdict.values()), verdict


def test_packed_sequences_with_strong_gates():
    case = matrix.fla_style(1, 150, 2, 32, 1.0, 0.1, 0.5, dtype="fp32", cu_seqlens=[0, 15, 100, 150])
    leaves, adjoints, offsets = matrix.case_inputs(case, torch.device("cpu"))
    verdict = matrix.judge(matrix.under_test(chunk_gdn2, leaves, adjoints, case),
                           matrix.reference(leaves, adjoints, offsets, case["scale"]))
    assert all(v["passed"] and v["ratio"] < 1e-4 for v in verdict.values()), verdict


def test_safe_gate_is_the_same_midpoint_on_ordinary_gates_and_unchecked_on_strong_ones():
    x = [t.float() for t in make_inputs(1, 70, 2, 16, 16, seed=3)]
    o_default, S_default = chunk_gdn2(*x, output_final_state=True)
    o_safe, S_safe = chunk_gdn2(*x, output_final_state=True, safe_gate=True, lower_bound=-5.0)
    assert torch.equal(o_default, o_safe) and torch.equal(S_default, S_safe)    # the same products, no fallback
    x[3] = torch.full_like(x[3], -12.0)                                         # outside safe_gate's [-5, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                                       # numpy's inf - inf in the interpreter
        o_unchecked, _ = chunk_gdn2(*x, safe_gate=True)
    o_checked, _ = chunk_gdn2(*x)
    assert not torch.isfinite(o_unchecked).all() and torch.isfinite(o_checked).all()


def test_backward_without_autograd_takes_the_same_keywords():
    x = [t.float() for t in make_inputs(1, 70, 2, 16, 16, seed=4)]
    x[3][:, 20] = -100.0
    do = torch.randn(1, 70, 2, 16)
    leaves = [t.clone().requires_grad_() for t in x]
    want = torch.autograd.grad((chunk_gdn2(*leaves)[0] * do).sum(), leaves)
    got = chunk_gdn2_backward_triton(*x, do)[:6]
    assert all(torch.isfinite(a).all() and torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("kwargs, message", [
    (dict(safe_gate=True, lower_bound=-6.0), "lower_bound must lie in \\[-5, 0\\)"),
    (dict(safe_gate=True, lower_bound=0.0), "lower_bound must lie in \\[-5, 0\\)"),
    (dict(safe_gate=1), "safe_gate must be a bool"),
    (dict(lower_bound="-5"), "lower_bound must be a number"),
    (dict(disable_recompute=None), "disable_recompute must be a bool"),
])
def test_gate_keywords_are_checked(kwargs, message):
    x = [t.float() for t in make_inputs(1, 20, 1, 16, 16)]
    with pytest.raises(ValueError, match=message):
        chunk_gdn2(*x, **kwargs)


def test_float64_is_refused_with_the_oracles_named():
    x = make_inputs(1, 20, 1, 16, 16)
    with pytest.raises(ValueError, match="q must be float32, bfloat16 or float16.*recurrent_gdn2"):
        chunk_gdn2(*x)



def test_matrix_case_numbers():
    """--cases of the GPU matrix: numbers and ranges as the run prints them, anything else refused by name."""
    import argparse
    assert matrix.case_numbers("14-16,3") == [3, 14, 15, 16]
    assert matrix.case_numbers(str(len(matrix.CASES))) == [len(matrix.CASES)]
    for bad in ("0", f"1-{len(matrix.CASES) + 1}", "a", "3-"):
        with pytest.raises(argparse.ArgumentTypeError):
            matrix.case_numbers(bad)


def test_matrix_recompute_mode_rows():
    """--recompute-modes: two more rows of ours, chunk_gdn2 with recompute_states=True and with
    disable_recompute=True; on a small case in the interpreter each passes and equals the default (vs_default 0)."""
    impls = matrix.implementations(recompute_modes=True)
    assert list(impls) == ["gdn2edu", *matrix.RECOMPUTE_MODES]
    assert [impls[name][0].keywords for name in matrix.RECOMPUTE_MODES] == list(matrix.RECOMPUTE_MODES.values())
    assert list(matrix.implementations()) == ["gdn2edu"]
    case = matrix.extreme("one token -100", "fp16", B=1, T=130, H=1, K=32, V=16)
    leaves, adjoints, offsets = matrix.case_inputs(case, torch.device("cpu"))
    want = matrix.reference(leaves, adjoints, offsets, None)
    default = matrix.under_test(chunk_gdn2, leaves, adjoints, case)
    for name in matrix.RECOMPUTE_MODES:
        got = matrix.under_test(impls[name][0], leaves, adjoints, case)
        assert all(v["passed"] for v in matrix.judge(got, want).values()), name
        assert matrix.versus(got, default) == dict.fromkeys(matrix.TOLERANCE, 0.0), name


def test_matrix_float32_intermediates_switch():
    """--fp32-intermediates: inside the block float16 inputs keep float32 intermediates (a different, more
    accurate o at g = 0), and the shipped setting is back after the block, also after an error in it."""
    from gdn2edu import chunk_kernels
    shipped = chunk_kernels.LOW_PRECISION_INTERMEDIATES
    case = matrix.extreme("zero", "fp16", B=1, T=130, H=1, K=32, V=16)
    leaves, adjoints, offsets = matrix.case_inputs(case, torch.device("cpu"))
    want = matrix.reference(leaves, adjoints, offsets, None)
    low = matrix.judge(matrix.under_test(chunk_gdn2, leaves, adjoints, case), want)
    with matrix.float32_intermediates():
        assert chunk_kernels.LOW_PRECISION_INTERMEDIATES is False
        high = matrix.judge(matrix.under_test(chunk_gdn2, leaves, adjoints, case), want)
    assert chunk_kernels.LOW_PRECISION_INTERMEDIATES == shipped
    assert high["o"]["ratio"] < low["o"]["ratio"]
    with pytest.raises(RuntimeError), matrix.float32_intermediates():
        raise RuntimeError("inside the block")
    assert chunk_kernels.LOW_PRECISION_INTERMEDIATES == shipped


def test_matrix_fp32_dot_holds_for_the_run_and_is_restored(monkeypatch, tmp_path):
    """--fp32-dot sets chunk_kernels.FLOAT32_DOT for the run (seen where the run asks for a GPU) through
    kernel_settings, as --fp32-intermediates does, so the value from before is back after main, here after the
    SystemExit of a machine without a GPU: a later call in the same process runs with its own setting."""
    from gdn2edu import chunk_kernels
    before, seen = chunk_kernels.FLOAT32_DOT, []
    other = next(dot for dot in chunk_kernels.FLOAT32_DOTS if dot != before)

    def no_gpu():
        seen.append(chunk_kernels.FLOAT32_DOT)
        return False

    monkeypatch.setattr(matrix.torch.cuda, "is_available", no_gpu)
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        matrix.main(["--out", str(tmp_path / "matrix.json"), "--fp32-dot", other])
    assert seen == [other] and chunk_kernels.FLOAT32_DOT == before
