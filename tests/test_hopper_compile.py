"""Every Triton kernel compiles for Hopper (sm_90) and fits its shared memory, checked without a GPU.

The interpreter runs the kernels' logic; it accepts code the GPU compiler refuses and never allocates
shared memory. Both failures were first seen on the H200; this catches them here. The two head dims compile
in two processes at once: compiling is single-threaded, and CI has two cores (K = 256 takes the longer)."""

import subprocess
import sys


def test_kernels_compile_for_hopper_within_shared_memory(root):
    runs = [subprocess.Popen([sys.executable, "tools/hopper_compile_check.py", "--dim", dim], cwd=root,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for dim in ("128", "256")]
    outputs = [run.communicate() for run in runs]                 # (stdout, stderr) of each, both finished
    for run, (stdout, stderr) in zip(runs, outputs):
        assert run.returncode == 0, stdout + stderr[-3000:]
    lines = [line for stdout, _ in outputs for line in stdout.splitlines() if line.startswith(("ok", "FAIL"))]
    assert all(any(line.startswith("ok") for line in stdout.splitlines()) for stdout, _ in outputs)  # each dim
    assert len(lines) >= 9 and all(line.startswith("ok") for line in lines), "\n".join(lines)
