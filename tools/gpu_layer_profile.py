"""Where Chapter 12's layer spends its device time, kernel by kernel: the torch profiler's CUDA kernels of one
forward without autograd and of one training step (forward + backward onto the input and every parameter) of
``gdn2edu.layers.GatedDeltaNet2`` at the layer benchmark's size, in bf16; JSON with provenance.

    python tools/gpu_layer_profile.py --out results/h200_layer_profile.json [--commit SHA] [--top 25]
        [--size B,T,hidden,head_dim,heads]   (default: gdn2edu.layer_bench.LAYER_BENCH_SIZE)

Each phase records its median wall time a call ("wall_ms", triton's do_bench) beside the sum of its kernels'
device times; each kernel row is (name, ms per call, share of the phase's kernel time); "ours" sums the book's Triton kernels
(names starting as OUR_KERNELS lists), the rest is PyTorch's (projections, convolutions, norms,
elementwise work).
"""

import argparse
import json
import sys
from pathlib import Path

import torch

from gdn2edu.bench import gpu_record, kernel_times, measure_ms
from gdn2edu.layer_bench import LAYER_BENCH_SIZE
from gdn2edu.layers import GatedDeltaNet2

OUR_KERNELS = ("chunk_gdn2", "fused_recurrent_gdn2", "short_conv", "gated_norm", "l2_norm")


def phase_rows(times, top):
    """{kernel: ms} -> the phase's total, the book's kernels' sum and the top kernels with their shares."""
    total = sum(times.values())
    ours = sum(ms for name, ms in times.items() if name.startswith(OUR_KERNELS))
    rows = [{"kernel": name, "ms": ms, "share": ms / total} for name, ms in list(times.items())[:top]]
    return {"total_ms": total, "ours_ms": ours, "kernels": rows, "kernel_count": len(times)}


def layer_size(text):
    """--size "B,T,hidden,head_dim,heads" -> the dict of LAYER_BENCH_SIZE's keys; five positive ints, or an error."""
    try:
        values = [int(n) for n in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 5 or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected five positive ints B,T,hidden,head_dim,heads, got {text!r}")
    return dict(zip(("B", "T", "hidden_size", "head_dim", "num_heads"), values))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--commit", default=None)
    p.add_argument("--top", type=int, default=25, help="kernels listed per phase, longest first")
    p.add_argument("--size", type=layer_size,
                   default=dict(LAYER_BENCH_SIZE), help="B,T,hidden,head_dim,heads of the profiled layer")
    args = p.parse_args(argv)
    if args.top < 1:
        raise SystemExit(f"--top must be at least 1, got {args.top}")
    result = gpu_record("gpu_layer_profile.py", args.commit, argv, size=args.size, dtype="bf16")
    size = dict(args.size)
    B, T = size.pop("B"), size.pop("T")
    torch.manual_seed(0)
    layer = GatedDeltaNet2(**size).to("cuda", torch.bfloat16).train()
    x = torch.randn(B, T, size["hidden_size"], device="cuda", dtype=torch.bfloat16)
    xi = x.detach().requires_grad_()
    do = torch.randn_like(x)

    def forward():
        with torch.no_grad():
            layer(x)

    def step():
        layer.zero_grad(set_to_none=True)
        xi.grad = None
        layer(xi)[0].backward(do)

    result.update(forward=phase_rows(kernel_times(forward), args.top), step=phase_rows(kernel_times(step), args.top))
    for phase, fn in (("forward", forward), ("step", step)):
        r = result[phase]
        r["wall_ms"] = measure_ms(fn)                # against the kernels' sum: what launches and syncs add
        print(f"{phase}: {r['wall_ms']:.3f} ms a call, {r['total_ms']:.3f} ms of kernels ({r['kernel_count']} kinds), "
              f"the book's Triton kernels {r['ours_ms']:.3f} ms", flush=True)
        for row in r["kernels"]:
            print(f"  {row['ms']:8.3f} ms {100 * row['share']:5.1f}%  {row['kernel'][:110]}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
