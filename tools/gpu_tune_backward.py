"""Time tile settings of the backward's inputs kernel and of the forward's WY kernel as the backward re-runs it
(on the triangles the forward keeps, writing G and not AZ) on a GPU, and the reverse scan at each fixed value
block for the standard shapes; with ``--tables STATES_WY_TILES`` also the WY launch that writes both G and AZ
(``recompute_states=True``'s backward and ``disable_recompute=True``'s forward), which takes the forward's
WY_TILES today: no such table ships, so its best setting is a proposal for one; write
the timings with their provenance and the fastest setting of each table to a JSON file (Chapter 10 shows
it; a setting worth keeping goes into Chapter 10's tables, which ``python -m gdn2edu.bench`` then records
with every run).

    python tools/gpu_tune_backward.py --out tiles.json --budget 150

Each setting is timed alone (``triton.testing.do_bench``, median) on the (1, 8192, 16) baseline inputs,
K = V = 128, bf16; ``--scan-blocks`` adds the reverse scan at value blocks 16, 32 and 64 for every standard
shape, with the device's multiprocessor count (what the scan's "auto" block is chosen from). A setting
that fails to compile or launch is recorded with its error; an illegal memory access ends the run (the
CUDA context is lost), so run this in its own process.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import triton.testing

from gdn2edu import chunk_backward_kernels as cb
from gdn2edu.bench import STANDARD_SHAPES, gpu_record
from gdn2edu.chunk_backward_kernels import BACKWARD_TILE_TABLES
from gdn2edu.chunk_kernels import WY_TILES, _forward_states, _plan, _wy_states, baseline_inputs, tile_table

INPUTS = [dict(BK=128, BV=64, num_warps=8, num_stages=2), dict(BK=128, BV=32, num_warps=8, num_stages=2),
          dict(BK=64, BV=64, num_warps=8, num_stages=2), dict(BK=32, BV=64, num_warps=8, num_stages=2)]
WY = [dict(BK=32, BV=64, num_warps=4), dict(BK=32, BV=64, num_warps=2), dict(BK=32, BV=64, num_warps=8),
      dict(BK=16, BV=64, num_warps=4), dict(BK=64, BV=64, num_warps=4), dict(BK=64, BV=64, num_warps=8)]
SETTINGS = {"BWD_INPUTS_TILES": INPUTS, "BWD_WY_TILES": WY, "STATES_WY_TILES": WY}     # by table name
SCAN_BLOCKS = (16, 32, 64)


def recomputed(B, T, H):
    """Baseline inputs x (bf16, K = V = 128), their plan p, the recomputed intermediates f and a random do."""
    x = baseline_inputs(B, T, H)
    p = _plan(*x, None, None, None)
    return x, p, _forward_states(*x, None, True, p, store_G=True), torch.randn_like(x[2])


def time_scan_blocks():
    """The reverse scan's median ms at each value block of SCAN_BLOCKS, per standard shape (bf16 baseline
    inputs, K = V = 128): a list of {"B", "T", "H", "ms": {block: ms}}."""
    rows = []
    for B, T, H in STANDARD_SHAPES:
        _, p, f, do = recomputed(B, T, H)
        ms = {}
        for block in SCAN_BLOCKS:
            with tile_table(cb.BWD_SCAN_TILES, {**cb.BWD_SCAN_TILES, "BV": block}):
                ms[block] = triton.testing.do_bench(lambda: cb._reverse_scan(f, do, None, p, False), warmup=10,
                                                    rep=50, return_mode="median")
        rows.append({"B": B, "T": T, "H": H, "ms": ms})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=150.0, help="seconds after which no new setting starts")
    parser.add_argument("--tables", default="BWD_INPUTS_TILES,BWD_WY_TILES",
                        help=f"which tables to tune, from {', '.join(SETTINGS)}")
    parser.add_argument("--commit", help="git commit of the code being measured (default: git's HEAD, +modified if "
                                         "the package differs)")
    parser.add_argument("--scan-blocks", action="store_true", help="also time the reverse scan's value blocks")
    args = parser.parse_args(argv)
    names = args.tables.split(",")
    if any(name not in SETTINGS for name in names):
        parser.error(f"--tables must be comma-separated names from {tuple(SETTINGS)}, got {args.tables!r}")
    result = gpu_record("gpu_tune_backward.py", args.commit, argv, shape=[1, 8192, 16], timed=[], best={})
    start = time.monotonic()
    x, p, f, do = recomputed(1, 8192, 16)
    dR, dh, _ = cb._reverse_scan(f, do, None, p, False)
    _, _, dA, dAqk, P = cb._local_pullback(x[2], x[5], f, do, dR, p)

    def recompute():                                 # what the backward recomputes: WY without AZ
        return _wy_states(*x, f["A"], p, store_G=True, store_AZ=False, tiles=cb.BWD_WY_TILES)

    states_wy = dict(WY_TILES)                       # not shipped: the G and AZ launch takes WY_TILES today

    def recompute_states():                          # the WY launch that writes G and AZ
        return _wy_states(*x, f["A"], p, store_G=True, store_AZ=True, tiles=states_wy)

    timed_call = {"BWD_INPUTS_TILES": lambda: cb._input_grads(x[0], x[1], x[3], x[4], f, do, P, dh, dA, dAqk, p),
                  "BWD_WY_TILES": recompute, "STATES_WY_TILES": recompute_states}
    tables = {**BACKWARD_TILE_TABLES, "STATES_WY_TILES": states_wy}
    if args.scan_blocks:
        result["multiprocessors"] = torch.cuda.get_device_properties(0).multi_processor_count
        result["scan_blocks"] = time_scan_blocks()
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name in names:
        fn, table = timed_call[name], tables[name]
        for setting in SETTINGS[name]:
            if time.monotonic() - start > args.budget:
                break
            row = {"table": name, **setting}
            with tile_table(table, {**table, **setting}):   # the shipped entries, those of the setting over them
                try:
                    fn()
                    torch.cuda.synchronize()
                    row["ms"] = triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")
                except Exception as err:                     # compile or launch failure: record it, go on
                    row["error"] = f"{type(err).__name__}: {str(err)[:200]}"
            print(json.dumps(row), flush=True)
            result["timed"].append(row)
            timed = [r for r in result["timed"] if r["table"] == name and "ms" in r]
            if timed:
                best = min(timed, key=lambda r: r["ms"])
                result["best"][name] = {k: v for k, v in best.items() if k not in ("table", "ms")}
            args.out.write_text(json.dumps(result, indent=1) + "\n")
            if "error" in row and "illegal memory access" in row["error"]:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
