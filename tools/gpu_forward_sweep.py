"""Sweep the forward kernels' tile tables one kernel at a time on a GPU and record each kernel's device time.

    python tools/gpu_forward_sweep.py --commit SHA --out results/h200_forward_sweep.json --budget 400

For each shape and each setting of one table (the others shipped), it checks that the output equals the shipped
setting's up to rounding, then records that kernel's profiled time and the whole forward's median time, on the
default path and, once per shape, on ``safe_gate=True``. (Records before the intra kernel's single launch also
timed its second launch alone, "second_launch": MODE 2 on chunks with no flag set.)
"""

import argparse
import json
import time

import gdn2edu
from gdn2edu import chunk_kernels
from gdn2edu.bench import FORWARD_KERNELS, gpu_record, kernel_times, measure_ms
from gdn2edu.chunk_kernels import baseline_inputs

# candidate settings per table; the shipped one is tried first
CANDIDATES = {
    "INTRA_TILES": [dict(BK=16, num_warps=1, num_stages=2), dict(BK=16, num_warps=1, num_stages=1),
                    dict(BK=32, num_warps=1, num_stages=2),
                    dict(BK=16, num_warps=2, num_stages=2), dict(BK=32, num_warps=2, num_stages=2),
                    dict(BK=32, num_warps=4, num_stages=2), dict(BK=64, num_warps=4, num_stages=2),
                    dict(BK=32, num_warps=1, num_stages=3), dict(BK=64, num_warps=1, num_stages=2),
                    # more stages at 16-wide blocks, which no sweep before the ninth tried (the intra ablation,
                    # results/h200_intra_ablation.json, timed them 6-8% faster)
                    dict(BK=16, num_warps=1, num_stages=3), dict(BK=16, num_warps=1, num_stages=4),
                    dict(BK=64, num_warps=2, num_stages=2),
                    # registers capped: the kernel takes all 255 uncapped (results/h200_forward_counters.json),
                    # 8 one-warp programs per SM; at these caps 12, 16, 20 fit (a cap adds warps only where it
                    # crosses a step of the register allocation: Chapter 11), spilling what
                    # results/compile_intra_rows_maxnreg*.json record; on the shipped three stages (the sixth and
                    # ninth sweeps capped the two then shipped)
                    *(dict(BK=16, num_warps=1, num_stages=3, maxnreg=cap) for cap in (168, 128, 96))],
    # the WY kernel's stages (2 until the eighth sweep, fixed at the launch) and, at the winner, its blocks and warps
    "WY_TILES": [dict(BK=32, BV=64, num_warps=2, num_stages=s) for s in (1, 2, 3, 4)]
                + [dict(BK=32, BV=64, num_warps=4, num_stages=3), dict(BK=32, BV=32, num_warps=2, num_stages=3),
                   dict(BK=64, BV=64, num_warps=4, num_stages=3)],
    "SCAN_TILES": [dict(BV=32, num_warps=4, num_stages=4), dict(BV="auto", num_warps=4, num_stages=3),
                   # fewer stages (less shared memory: more than one block per SM where the grid has more
                   # programs than SMs) or more warps per block (at batch 1 the grid is one wave)
                   dict(BV="auto", num_warps=4, num_stages=2), dict(BV="auto", num_warps=8, num_stages=4),
                   dict(BV="auto", num_warps=8, num_stages=2)],
    "OUTPUT_TILES": [dict(BV=64, num_warps=4), dict(BV=128, num_warps=8)],
}
KERNEL_OF_TABLE = {"INTRA_TILES": "intra", "WY_TILES": "wy", "SCAN_TILES": "scan", "OUTPUT_TILES": "output"}


def per_kernel(fn):
    """{"intra", "wy", "scan", "output"}: each forward kernel's profiled device time per call, in ms."""
    times = kernel_times(fn)
    return {short: sum(ms for name, ms in times.items() if full in name) for short, full in FORWARD_KERNELS.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=400.0, help="seconds; no new setting starts after it")
    parser.add_argument("--shapes", default="1x8192x16,4x2048x16,8x1024x16,2x8192x16")
    # while the scan writes the output (chunk_kernels.FUSE_OUTPUT) the output kernel does not run: its table is
    # swept only on request; the forward's scan then takes FUSED_SCAN_STAGES, and SCAN_TILES' stages set only
    # the scan that the backward runs again
    parser.add_argument("--tables", default=",".join(t for t in CANDIDATES
                                                     if t != "OUTPUT_TILES" or not chunk_kernels.FUSE_OUTPUT))
    parser.add_argument("--commit", default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    start = time.monotonic()
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
    result = gpu_record("gpu_forward_sweep.py", args.commit, argv,
                        shipped={name: dict(getattr(chunk_kernels, name)) for name in CANDIDATES}, rows=[],
                        safe_gate=[])

    def save():
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    for B, T, H in shapes:
        inputs = baseline_inputs(B, T, H, seed=1)
        reference, _ = gdn2edu.chunk_gdn2(*inputs)
        safe = lambda: gdn2edu.chunk_gdn2(*inputs, safe_gate=True)          # noqa: E731
        result["safe_gate"].append({"shape": [B, T, H], "fwd_ms": measure_ms(safe), "kernels": per_kernel(safe)})
        for table in args.tables.split(","):
            shipped = dict(getattr(chunk_kernels, table))
            for setting in [shipped] + [c for c in CANDIDATES[table] if c != shipped]:
                if time.monotonic() - start > args.budget:
                    result["stopped"] = "budget"
                    save()
                    return
                row = {"shape": [B, T, H], "table": table, "setting": setting, "shipped": setting == shipped}
                with chunk_kernels.tile_table(getattr(chunk_kernels, table), setting):   # the launches read it
                    try:
                        o, _ = gdn2edu.chunk_gdn2(*inputs)
                        row["max_diff_vs_shipped"] = (o.float() - reference.float()).abs().max().item()
                        fn = lambda: gdn2edu.chunk_gdn2(*inputs)                 # noqa: E731
                        row["fwd_ms"] = measure_ms(fn)
                        row["kernel_ms"] = per_kernel(fn)[KERNEL_OF_TABLE[table]]
                    except Exception as err:                # out of resources: record it and go on
                        row["error"] = f"{type(err).__name__}: {err}"[:300]
                result["rows"].append(row)
                print(json.dumps(row), flush=True)
                save()
    result["elapsed_s"] = time.monotonic() - start
    save()


if __name__ == "__main__":
    main()
