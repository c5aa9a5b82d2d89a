"""Check and time gdn2edu's Triton backward (Chapter 10) on one GPU, against FLA's in the same process.

Writes one JSON file with the provenance (GPU, driver, versions, date, commit, command), the relative L2
error of every gradient of ``chunk_gdn2`` (bf16 inputs) against float64 autograd through
``chunk_gdn2_explicit(..., backward="rewy")`` on the same rounded inputs, the thresholds they are held to, and
for each standard shape the forward, backward and forward + backward times (``gdn2edu.bench``'s
``time_forward_backward``: medians of ``triton.testing.do_bench``) and peak memory of ours and of FLA's
``chunk_gdn2`` (when ``fla`` imports) on the same inputs, plus the per-kernel times of our backward.

    python tools/gpu_backward_bench.py --out results/h200_backward.json --commit $(git rev-parse HEAD)

``--tiles FILE`` first applies tile settings written by tools/gpu_tune_backward.py (recorded in the output).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gdn2edu                                                   # noqa: E402
from gdn2edu.chunk_backward_kernels import BACKWARD_TILE_TABLES  # noqa: E402
from gdn2edu.bench import STANDARD_SHAPES, _fla_ops, kernel_times, time_forward_backward  # noqa: E402
from gdn2edu.chunk_kernels import baseline_inputs               # noqa: E402
from gpu_forward_bench import provenance, rel_l2                # noqa: E402

SHAPES = [(1, 8192, 16), (4, 2048, 16)]    # (B, T, H) of the gradient checks
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
    ref = grads(lambda *x, **kw: gdn2edu.chunk_gdn2_explicit(*x, **kw, backward="rewy"),
                [x.double() for x in inputs], S0.double(), do.double(), dht.double())
    errors = {name: rel_l2(x, r) for name, x, r in zip(NAMES, ours, ref)}
    finite = all(bool(torch.isfinite(x).all()) for x in ours)
    passed = finite and all(errors[name] < THRESHOLDS[name] for name in NAMES)
    del ref
    torch.cuda.empty_cache()
    return {"B": B, "T": T, "H": H, "dtype": str(dtype).replace("torch.", ""), "rel_l2": errors,
            "finite": finite, "passed": passed}


def timing(B, T, H, dtype=torch.bfloat16):
    """Forward, backward, forward + backward ms and peak MiB of ours and FLA's on the same baseline inputs,
    ours first then FLA's, twice (the second round is kept: both compiled and warm), and the per-kernel
    times of our backward."""
    inputs = baseline_inputs(B, T, H, K, V, dtype=dtype, seed=0)
    fla = _fla_ops()
    impls = {"gdn2edu": gdn2edu.chunk_gdn2, **({} if isinstance(fla, str) else {"fla": fla["chunk"]})}
    rows = {}
    for _ in range(2):
        for name, fn in impls.items():
            rows[name] = time_forward_backward(fn, inputs)
    leaves = [x.detach().requires_grad_() for x in inputs]
    o = gdn2edu.chunk_gdn2(*leaves)[0]
    do = torch.randn_like(o)
    kernels = kernel_times(lambda: torch.autograd.grad(o, leaves, do, retain_graph=True), repeats=10)
    return {"B": B, "T": T, "H": H, "K": K, "V": V, "dtype": str(dtype).replace("torch.", ""), "impls": rows,
            "fla": "ok" if "fla" in impls else fla, "our_backward_kernels_ms": kernels}


def apply_tiles(path):
    """Update the modules' tile tables from a tools/gpu_tune_backward.py result; returns what was applied."""
    best = json.loads(Path(path).read_text())["best"]
    unknown = sorted(set(best) - set(BACKWARD_TILE_TABLES))
    if unknown:
        raise ValueError(f"--tiles names tables {unknown}; expected some of {sorted(BACKWARD_TILE_TABLES)}")
    for name, setting in best.items():
        BACKWARD_TILE_TABLES[name].update(setting)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--commit", default="unknown", help="git commit of the code being measured")
    parser.add_argument("--budget", type=float, default=200.0, help="seconds after which no new step starts")
    parser.add_argument("--tiles", help="JSON of tools/gpu_tune_backward.py whose best settings to apply first")
    args = parser.parse_args(argv)
    start = time.monotonic()
    result = {"provenance": provenance(args.commit), "thresholds_rel_l2": THRESHOLDS,
              "tile_overrides": apply_tiles(args.tiles) if args.tiles else {},
              "tiles": BACKWARD_TILE_TABLES,
              "checks": [], "timing": [], "skipped": []}

    def save():
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    steps = [("checks", check, (B, T, H, torch.bfloat16)) for B, T, H in SHAPES]   # float32: the interpreter's tests
    steps += [("timing", timing, shape) for shape in STANDARD_SHAPES]
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
