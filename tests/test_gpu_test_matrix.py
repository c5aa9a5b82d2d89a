"""tools/gpu_test_matrix.py's run on one small case in the Triton interpreter: what it writes for the recompute
modes against the default (the H200 record's "vs_default"), and what it writes when the default cannot run.
The cases of the H200 matrix and its pass rule are tested at interpreter sizes in test_gate_paths.py."""

import argparse
import json
import sys

import pytest
import torch
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import gpu_test_matrix as matrix  # noqa: E402

# the interpreter's numpy warns of the infinities of the midpoint launch on flagged chunks, which the second
# launch redoes (as in test_gate_paths.py); with a GPU the kernels do not run on CPU tensors
pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.skipif(torch.cuda.is_available(), reason="runs the kernels in Triton's interpreter")]


def run(tmp_path, monkeypatch):
    """run_matrix with --recompute-modes on one float32 case (g = -12 on every token: both intra paths), on the
    CPU; (exit status, the case's results)."""
    monkeypatch.setattr(matrix, "CASES", [matrix.extreme("every token -12", "fp32", T=70, H=1, K=16, V=16)])
    args = argparse.Namespace(out=tmp_path / "matrix.json", fla=False, fla_dtype="", fla_dim="",
                              fp32_intermediates=False, recompute_modes=True, commit="test", budget=600.0,
                              skip_large=True, cases=None)
    status = matrix.run_matrix(args, ["--recompute-modes"], device=torch.device("cpu"))
    record = json.loads(args.out.read_text())
    assert record["provenance"]["command"].endswith("gpu_test_matrix.py --recompute-modes")   # the argv given
    assert record["offsets_past_int32"] is None and record["offsets_past_int32_skipped"] == "--skip-large"
    return status, record["cases"][0]["results"]


def test_a_spent_budget_says_the_large_batch_did_not_run(tmp_path, monkeypatch, capsys):
    """With the budget spent before the 2^31-offset batch (here: before anything), the record and the log say
    that it did not run and why, instead of leaving only a None that a reader takes for a missing run; the
    record lists the cases not run, and the exit status is 2 (work undone), not 0."""
    monkeypatch.setattr(matrix, "offsets_past_int32", lambda device: pytest.fail("the batch must not start"))
    args = argparse.Namespace(out=tmp_path / "matrix.json", fla=False, fla_dtype="", fla_dim="",
                              fp32_intermediates=False, recompute_modes=False, commit="test", budget=-1.0,
                              skip_large=False, cases=None)
    assert matrix.run_matrix(args, [], device=torch.device("cpu")) == 2
    record = json.loads(args.out.read_text())
    assert record["cases"] == [] and record["offsets_past_int32"] is None
    assert record["cases_not_run"] == list(range(1, len(matrix.CASES) + 1))
    assert record["offsets_past_int32_skipped"].startswith("budget spent: ")
    log = capsys.readouterr().out
    assert f"budget spent: {len(matrix.CASES)} cases not run" in log and "2^31-offset batch did not run" in log


def test_each_recompute_mode_is_compared_with_the_default(tmp_path, monkeypatch):
    status, results = run(tmp_path, monkeypatch)
    assert status == 0 and set(results) == {"gdn2edu", *matrix.RECOMPUTE_MODES}
    for mode in matrix.RECOMPUTE_MODES:
        assert set(results[mode]) == set(matrix.TOLERANCE)
        assert all(v["passed"] for v in results[mode].values())
        # Chapter 10: the interpreter gives the three modes the same outputs and gradients, bit for bit
        assert all(v["vs_default"] == 0 for v in results[mode].values()), results[mode]
    assert all("vs_default" not in v for v in results["gdn2edu"].values())


def broken_default(implementations):
    """``matrix.implementations`` with our default replaced by a launch that raises."""
    def impls_with_broken_default(*args, **kwargs):
        impls = implementations(*args, **kwargs)
        _, setting = impls["gdn2edu"]

        def fails(*_, **__):
            raise RuntimeError("the default's launch failed")

        return {**impls, "gdn2edu": (fails, setting)}

    return impls_with_broken_default


def test_modes_are_not_compared_when_the_default_did_not_run(tmp_path, monkeypatch):
    monkeypatch.setattr(matrix, "implementations", broken_default(matrix.implementations))
    status, results = run(tmp_path, monkeypatch)
    assert status == 1 and results["gdn2edu"] == {"error": "RuntimeError: the default's launch failed"}
    for mode in matrix.RECOMPUTE_MODES:
        assert all(v["passed"] and v["vs_default"] is None for v in results[mode].values())


def test_a_failure_does_not_hide_work_undone(tmp_path, monkeypatch):
    """A case that fails and a budget spent before the 2^31-offset batch: exit status 3 (both bits), not 1, so
    that a known failing case (bf16 at g = 0 on the H200) does not hide a record with work missing."""
    monkeypatch.setattr(matrix, "CASES", [matrix.extreme("every token -12", "fp32", T=70, H=1, K=16, V=16)])
    clock = iter([0.0, 0.0])                       # the run's start and the one case's budget check; then late
    monkeypatch.setattr(matrix.time, "monotonic", lambda: next(clock, 1e6))
    monkeypatch.setattr(matrix, "implementations", broken_default(matrix.implementations))
    monkeypatch.setattr(matrix, "offsets_past_int32", lambda device: pytest.fail("the batch must not start"))
    args = argparse.Namespace(out=tmp_path / "matrix.json", fla=False, fla_dtype="", fla_dim="",
                              fp32_intermediates=False, recompute_modes=False, commit="test", budget=10.0,
                              skip_large=False, cases=None)
    assert matrix.run_matrix(args, [], device=torch.device("cpu")) == 3
    record = json.loads(args.out.read_text())
    assert record["cases_not_run"] == [] and record["offsets_past_int32_skipped"].startswith("budget spent: ")
    assert record["cases"][0]["results"]["gdn2edu"] == {"error": "RuntimeError: the default's launch failed"}
