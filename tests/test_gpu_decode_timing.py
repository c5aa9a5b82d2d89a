"""tools/gpu_decode_timing.py: its arguments are checked, and without a GPU it stops before timing
(results/h200_decode_timing_run*.json are the H200 records, which Chapter 11 reads; its timer,
gdn2edu.bench.queued_gpu_ms, is tested in test_bench.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_decode_timing as decode_timing  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="this checks the refusal without a GPU")
def test_without_a_gpu_the_tool_stops_before_timing(tmp_path):
    out = tmp_path / "decode.json"
    run = subprocess.run([sys.executable, "tools/gpu_decode_timing.py", "--out", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode != 0 and "none is here" in run.stderr and not out.exists()


def test_calls_must_be_positive(tmp_path):
    with pytest.raises(SystemExit):
        decode_timing.main(["--out", str(tmp_path / "x.json"), "--calls", "0"])
