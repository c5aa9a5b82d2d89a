"""Check and time gdn2edu's Triton forward kernels against flash-linear-attention on one GPU.

Writes one JSON file with the provenance (GPU, driver, versions, date, commit, command), the correctness
of ``chunk_gdn2`` against a float64 token recurrence on the same rounded inputs, and the forward and
decode times of ours and FLA's, measured in this one process on the same inputs, interleaved.

    python tools/gpu_forward_bench.py --out results/h200_forward.json --commit $(git rev-parse HEAD)
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton
import triton.testing

import gdn2edu
from gdn2edu import chunk_kernels
from gdn2edu.chunk_kernels import baseline_inputs

FORWARD_SHAPES = [(1, 8192, 16), (4, 2048, 16), (8, 1024, 16), (2, 8192, 16)]   # (B, T, H)
CHECK_SHAPES = [(1, 8192, 16), (4, 2048, 16)]
DECODE_BATCHES = [1, 64]
K = V = 128


def rel_l2(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


def check(B, T, H, dtype):
    """Relative L2 error of chunk_gdn2 (o, final state) against float64 on the same rounded inputs."""
    inputs = baseline_inputs(B, T, H, K, V, dtype=dtype, seed=1)
    S0 = torch.randn(B, H, K, V, device="cuda") * 0.1
    o, S = gdn2edu.chunk_gdn2(*inputs, initial_state=S0, output_final_state=True)
    o_ref, S_ref = gdn2edu.recurrent_gdn2(*(x.double() for x in inputs), initial_state=S0.double(),
                                          output_final_state=True)
    return {"B": B, "T": T, "H": H, "dtype": str(dtype).replace("torch.", ""),
            "o_rel_l2": rel_l2(o, o_ref), "state_rel_l2": rel_l2(S, S_ref),
            "finite": bool(torch.isfinite(o).all() and torch.isfinite(S).all())}


def median_ms(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def time_interleaved(candidates, rounds=2):
    """{name: ms}: each candidate timed ``rounds`` times, in alternating order, mean of the medians."""
    times = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            times[name].append(median_ms(fn))
    return {name: sum(ms) / len(ms) for name, ms in times.items()}


def provenance(commit):
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    try:
        fla_version = importlib.metadata.version("fla-core")
    except importlib.metadata.PackageNotFoundError:
        fla_version = None
    return {"gpu": torch.cuda.get_device_name(), "driver": driver, "torch": torch.__version__,
            "triton": triton.__version__, "fla": fla_version, "commit": commit,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", *sys.argv])}


def forward_tiles():
    """The forward's tile tables and intermediates' type setting, as the package ships them now."""
    return {name: getattr(chunk_kernels, name) for name in
            ("INTRA_TILES", "WY_TILES", "SCAN_TILES", "OUTPUT_TILES", "LOW_PRECISION_INTERMEDIATES")}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--commit", default="unknown", help="git commit of the code being measured")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds after which no new step starts")
    parser.add_argument("--parts", default="checks,forward,decode",
                        help="comma-separated subset of checks,forward,decode")
    parser.add_argument("--no-fla", action="store_true", help="time ours only (skips FLA's compile)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    parts = set(args.parts.split(","))
    try:
        if args.no_fla:
            raise ImportError("--no-fla")
        from fla.ops.gdn2 import chunk_gdn2 as fla_chunk, fused_recurrent_gdn2 as fla_recurrent
    except ImportError:
        fla_chunk = fla_recurrent = None
    result = {"provenance": provenance(args.commit), "tiles": forward_tiles(), "checks": [], "forward": [],
              "decode": [], "skipped": []}

    def out_of_time(step):
        if time.monotonic() - start > args.budget:
            result["skipped"].append(step)
            return True
        return False

    def save():
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    for B, T, H in CHECK_SHAPES if "checks" in parts else []:
        for dtype in (torch.bfloat16, torch.float32):
            if not out_of_time(f"check {B},{T},{H} {dtype}"):
                result["checks"].append(check(B, T, H, dtype))
                print("check", result["checks"][-1], flush=True)
                save()
    for B, T, H in FORWARD_SHAPES if "forward" in parts else []:
        if out_of_time(f"forward {B},{T},{H}"):
            continue
        q, k, v, g, b, w = baseline_inputs(B, T, H, K, V)
        candidates = {"gdn2edu": lambda: gdn2edu.chunk_gdn2(q, k, v, g, b, w)}
        if fla_chunk is not None:
            candidates["fla"] = lambda: fla_chunk(q, k, v, g, b, w)
        ms = time_interleaved(candidates)
        row = {"B": B, "T": T, "H": H, "K": K, "V": V, "ms": ms}
        if "fla" in ms:
            row["fla_over_ours"] = ms["fla"] / ms["gdn2edu"]
        result["forward"].append(row)
        print("forward", row, flush=True)
        save()
    for batch in DECODE_BATCHES if "decode" in parts else []:
        if out_of_time(f"decode {batch}"):
            continue
        q, k, v, g, b, w = baseline_inputs(batch, 1, 16, K, V, seed=2)
        state = torch.randn(batch, 16, K, V, device="cuda") * 0.1
        candidates = {
            "gdn2edu": lambda: gdn2edu.fused_recurrent_gdn2(q, k, v, g, b, w, initial_state=state,
                                                            output_final_state=True),
            "torch_step": lambda: gdn2edu.recurrent_gdn2_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], b[:, 0],
                                                              w[:, 0], state=state),
        }
        if fla_recurrent is not None:
            candidates["fla"] = lambda: fla_recurrent(q, k, v, g, b, w, initial_state=state,
                                                      output_final_state=True)
        row = {"B": batch, "T": 1, "H": 16, "K": K, "V": V, "ms": time_interleaved(candidates)}
        result["decode"].append(row)
        print("decode", row, flush=True)
        save()
    save()
    print(f"wrote {args.out} in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
