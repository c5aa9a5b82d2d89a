"""Check and time gdn2edu's Triton backward (Chapter 10) on one GPU.

Writes one JSON file with the provenance (GPU, driver, versions, date, commit, command), the relative L2
error of every gradient of ``chunk_gdn2`` (bf16 and fp32 inputs) against float64 autograd through
``chunk_gdn2_torch(..., backward="rewy")`` on the same rounded inputs, the thresholds they are held to, and
the forward + backward time (median of ``triton.testing.do_bench``) and peak memory of ours. No FLA.

    python tools/gpu_backward_bench.py --out results/h200_backward.json --commit $(git rev-parse HEAD)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gdn2edu                                                   # noqa: E402
from gdn2edu.chunk_kernels import baseline_inputs               # noqa: E402
from gpu_forward_bench import provenance, rel_l2                # noqa: E402

SHAPES = [(1, 8192, 16), (4, 2048, 16)]    # (B, T, H)
K = V = 128
NAMES = ("q", "k", "v", "g", "b", "w", "initial_state")
# ReWY's thresholds (relative L2): 0.8% for q, k, v and the state, 2% for the gate gradients g, b, w
THRESHOLDS = {"q": 8e-3, "k": 8e-3, "v": 8e-3, "initial_state": 8e-3, "g": 2e-2, "b": 2e-2, "w": 2e-2}


def problem(B, T, H, dtype, seed=1):
    """Inputs (baseline_inputs in dtype, g float32), an initial state and the two adjoints, on the GPU."""
    inputs = list(baseline_inputs(B, T, H, K, V, dtype=dtype, seed=seed))
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    S0 = 0.1 * torch.randn(B, H, K, V, device="cuda", generator=gen)
    do = torch.randn(B, T, H, V, device="cuda", generator=gen).to(dtype)
    dht = torch.randn(B, H, K, V, device="cuda", generator=gen)
    return inputs, S0, do, dht


def grads(fn, inputs, S0, do, dht):
    """Gradients of <o, do> + <S_T, dht> through fn(q, k, v, g, b, w, initial_state=...) -> (o, S_T)."""
    leaves = [x.detach().clone().requires_grad_() for x in (*inputs, S0)]
    o, S = fn(*leaves[:6], initial_state=leaves[6], output_final_state=True)
    return torch.autograd.grad([o, S], leaves, [do.to(o.dtype), dht.to(S.dtype)])


def check(B, T, H, dtype):
    inputs, S0, do, dht = problem(B, T, H, dtype)
    ours = grads(gdn2edu.chunk_gdn2, inputs, S0, do, dht)
    ref = grads(lambda *x, **kw: gdn2edu.chunk_gdn2_torch(*x, **kw, backward="rewy"),
                [x.double() for x in inputs], S0.double(), do.double(), dht.double())
    errors = {name: rel_l2(x, r) for name, x, r in zip(NAMES, ours, ref)}
    finite = all(bool(torch.isfinite(x).all()) for x in ours)
    passed = finite and all(errors[name] < THRESHOLDS[name] for name in NAMES)
    del ref
    torch.cuda.empty_cache()
    return {"B": B, "T": T, "H": H, "dtype": str(dtype).replace("torch.", ""), "rel_l2": errors,
            "finite": finite, "passed": passed}


def timing(B, T, H, dtype=torch.bfloat16):
    """Median ms of the forward alone and of forward + backward, and the peak memory of one step."""
    inputs, S0, do, dht = problem(B, T, H, dtype, seed=0)
    leaves = [x.requires_grad_() for x in inputs]

    def forward():
        with torch.no_grad():
            gdn2edu.chunk_gdn2(*inputs)

    def step():
        o, _ = gdn2edu.chunk_gdn2(*leaves)
        o.backward(do)

    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    fwd = triton.testing.do_bench(forward, warmup=25, rep=100, return_mode="median")
    fwd_bwd = triton.testing.do_bench(step, warmup=25, rep=100, grad_to_none=leaves, return_mode="median")
    return {"B": B, "T": T, "H": H, "K": K, "V": V, "dtype": str(dtype).replace("torch.", ""),
            "ms": {"forward": fwd, "forward_backward": fwd_bwd}, "peak_step_memory_gib": peak / 2**30}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--commit", default="unknown", help="git commit of the code being measured")
    parser.add_argument("--budget", type=float, default=200.0, help="seconds after which no new step starts")
    args = parser.parse_args(argv)
    start = time.monotonic()
    result = {"provenance": provenance(args.commit), "thresholds_rel_l2": THRESHOLDS, "checks": [],
              "timing": [], "skipped": []}

    def save():
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    steps = [("checks", check, (B, T, H, dtype)) for B, T, H in SHAPES for dtype in (torch.bfloat16, torch.float32)]
    steps += [("timing", timing, shape) for shape in SHAPES]
    for part, fn, shape in steps:
        if time.monotonic() - start > args.budget:
            result["skipped"].append(f"{part} {shape}")
            continue
        result[part].append(fn(*shape))
        print(part, result[part][-1], flush=True)
        save()
    save()
    failed = [c for c in result["checks"] if not c["passed"]]
    return 1 if failed or result["skipped"] else 0


if __name__ == "__main__":
    sys.exit(main())
