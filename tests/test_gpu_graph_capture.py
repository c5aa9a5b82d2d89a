"""tools/gpu_graph_capture.py: its step is chunk_gdn2's forward and input gradients, and its arguments are checked.
It and tools/gpu_decode_timing.py, the two tools that time with the host out of the way (gdn2edu.bench.queued_gpu_ms,
tested in test_bench.py), stop before any work without a GPU and refuse counts below 1 (their H200 records:
results/h200_decode_timing_run*.json, which Chapter 11 reads; none yet of the graph capture)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gdn2edu
from gdn2edu.chunk_kernels import baseline_inputs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_decode_timing as decode_timing  # noqa: E402
import gpu_graph_capture as graph_capture  # noqa: E402


def test_the_step_returns_the_output_and_the_six_gradients():
    x = [t.detach().requires_grad_() for t in baseline_inputs(1, 40, 2, 16, 16, dtype=torch.float32, device="cpu")]
    do = torch.randn(1, 40, 2, 16)
    got = graph_capture.training_step(x, do)()
    o = gdn2edu.chunk_gdn2(*x)[0]
    want = [o.detach(), *torch.autograd.grad(o, x, do)]
    assert len(got) == 7 and all(torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this checks the refusal without a GPU")
@pytest.mark.parametrize("tool", ["gpu_graph_capture.py", "gpu_decode_timing.py"])
def test_without_a_gpu_the_tools_stop_before_any_work(tmp_path, tool):
    out = tmp_path / "record.json"
    run = subprocess.run([sys.executable, f"tools/{tool}", "--out", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode != 0 and f"{tool} times kernels on a GPU; none is here" in run.stderr and not out.exists()


@pytest.mark.parametrize("tool, count", [(graph_capture, "--rounds"), (decode_timing, "--calls")])
def test_counts_must_be_positive(tmp_path, tool, count):
    with pytest.raises(SystemExit):
        tool.main(["--out", str(tmp_path / "x.json"), count, "0"])


def test_warmup_must_be_a_positive_int():
    with pytest.raises(ValueError, match="warmup must be a positive int"):
        graph_capture.captured(lambda: None, warmup=0)
