"""tools/gpu_scan_overlap.py: the segmented launches give the shipped forward's output bit for bit (in the
interpreter, where the scans run one after another: the GPU run asserts the same before it times), the segments
cover every chunk once, and without a GPU the tool stops before timing (results/h200_scan_overlap.json is the H200
record)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_scan_overlap as overlap  # noqa: E402
from gdn2edu import chunk_kernels  # noqa: E402


def test_segments_cover_the_chunks_once():
    for chunks, count in ((128, 4), (3, 2), (2, 5), (1, 1)):
        parts = overlap.segments(chunks, count)
        assert len(parts) == min(chunks, count)
        assert [c for a, b in parts for c in range(a, b)] == list(range(chunks))
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="count must be a positive int"):
            overlap.segments(8, bad)


@pytest.mark.parametrize("B, T", [(1, 300), (2, 200)])
@pytest.mark.parametrize("order", overlap.ORDERS)
def test_segmented_launches_give_the_shipped_output(B, T, order):
    """Tails (300 and 200 are not multiples of 64), two sequences, three segments, a gate strong enough that mode 2
    redoes a chunk of the last sequence in a segment past the first (the offsets into flags and the chunk map):
    every segment's launches write their own chunks, and each scan starts from the last."""
    q, k, v, g, b, w = chunk_kernels.baseline_inputs(B, T, 2, K=32, V=32, dtype=torch.float32, device="cpu")
    g[B - 1, T - 55, 1] = -100.0                                   # chunk 3 of 5 (B = 1), 2 of 4 (B = 2)
    p = chunk_kernels._plan(q, k, v, g, b, w, None, None, None)
    flagged = (B - 1) * triton.cdiv(T, 64) + (T - 55) // 64         # that chunk in the plan's sequence-major map
    (a, z), = [(a, z) for a, z in overlap.segments(triton.cdiv(T, 64), 3) if a <= (T - 55) // 64 < z]
    assert a > 0 and chunk_kernels._intra_states(q, k, g, b, p)["flags"][flagged, 1] % 2 == 1
    shipped = chunk_kernels.chunk_gdn2_fwd(q, k, v, g, b, w)[0]
    assert torch.equal(overlap.overlapped_forward(q, k, v, g, b, w, 3, order), shipped)
    with pytest.raises(ValueError, match="order must be one of"):
        overlap.overlapped_forward(q, k, v, g, b, w, 3, "fastest")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_refuses_to_time_without_a_gpu(tmp_path):
    out = tmp_path / "overlap.json"
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_scan_overlap.py"), "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1 and "none is here" in run.stderr and not out.exists()
