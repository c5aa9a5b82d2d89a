"""tools/gpu_scan_concurrency.py: every run it times computes what it claims to (the scan the shipped output, the WY
launch its shipped outputs), in the interpreter, where the side stream's scan runs after the main stream's
launches (the GPU run asserts the same before it times); a bad run name is refused, and without a GPU the tool stops
before timing."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_scan_concurrency as concurrency  # noqa: E402
from gdn2edu import chunk_kernels  # noqa: E402


def test_every_run_computes_the_shipped_values():
    """Tails, two sequences, and a gate strong enough that the intra launches redo one chunk token by token."""
    B, T = 2, 200
    q, k, v, g, b, w = chunk_kernels.baseline_inputs(B, T, 2, K=32, V=32, dtype=torch.float32, device="cpu")
    g[B - 1, T - 55, 1] = -100.0
    launches = concurrency.Launches(q, k, v, g, b, w)
    assert torch.equal(launches.shipped, chunk_kernels.chunk_gdn2_fwd(q, k, v, g, b, w)[0])
    assert launches.intra()["flags"].remainder(2).sum() == 1                 # the chunk with g = -100, flagged
    launches.scan_stages = 1              # not the shipped stages (which the interpreter ignores, as it does these)
    concurrency.check_runs(launches)
    assert concurrency.ck.FUSED_SCAN_STAGES == 3                      # put back after each scan
    launches.f["Aqk"][0, 70, 0, 3] += 1.0     # an intermediate of the scan's (row 6 of chunk 1): its output differs
    with pytest.raises(AssertionError, match="the scan's output differs"):
        concurrency.check_runs(launches)
    with pytest.raises(ValueError, match="name must be one of"):
        launches.run("fastest")


def test_rows_name_each_run_once_per_stage_count():
    names = concurrency.row_names([3, 1])
    assert len(names) == len(set(names)) == 2 + 1 + 5 * 2
    assert "intra,wy|scan stages 1" in names and "wy" in names and "scan stages 3" in names


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_refuses_to_time_without_a_gpu(tmp_path):
    out = tmp_path / "concurrency.json"
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_scan_concurrency.py"), "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1 and "none is here" in run.stderr and not out.exists()
