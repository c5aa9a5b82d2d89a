"""tools/gpu_graph_capture.py: its step is chunk_gdn2's forward and input gradients, its arguments are checked, and
without a GPU it stops before any work (results/h200_graph_capture.json is the H200 record, which Chapter 11
reads)."""

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

import gpu_graph_capture as graph_capture  # noqa: E402


def test_the_step_returns_the_output_and_the_six_gradients():
    x = [t.detach().requires_grad_() for t in baseline_inputs(1, 40, 2, 16, 16, dtype=torch.float32, device="cpu")]
    do = torch.randn(1, 40, 2, 16)
    got = graph_capture.training_step(x, do)()
    o = gdn2edu.chunk_gdn2(*x)[0]
    want = [o.detach(), *torch.autograd.grad(o, x, do)]
    assert len(got) == 7 and all(torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this checks the refusal without a GPU")
def test_without_a_gpu_the_tool_stops_before_any_work(tmp_path):
    out = tmp_path / "graph.json"
    run = subprocess.run([sys.executable, "tools/gpu_graph_capture.py", "--out", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode != 0 and "none is here" in run.stderr and not out.exists()


def test_rounds_must_be_positive(tmp_path):
    with pytest.raises(SystemExit):
        graph_capture.main(["--out", str(tmp_path / "x.json"), "--rounds", "0"])


def test_warmup_must_be_a_positive_int():
    with pytest.raises(ValueError, match="warmup must be a positive int"):
        graph_capture.captured(lambda: None, warmup=0)
