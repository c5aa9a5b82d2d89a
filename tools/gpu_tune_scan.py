"""Try tile settings of chunk_gdn2's scan kernel on a GPU: check each against float64, then time it.

    python tools/gpu_tune_scan.py --budget 400
Prints one line per (setting, shape): relative L2 error of o and the median forward time in ms.
"""

import argparse
import itertools
import sys
import time

import triton.testing

import gdn2edu
from gdn2edu import chunk_kernels

from gdn2edu.bench import kernel_times
from gdn2edu.chunk_kernels import baseline_inputs

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gpu_forward_bench import rel_l2  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=400.0)
    parser.add_argument("--bv", default="32,64")
    parser.add_argument("--warps", default="4,8")
    parser.add_argument("--stages", default="2,3")
    parser.add_argument("--lowp", default="1", help="LOW_PRECISION_INTERMEDIATES values to try (1, 0)")
    shipped = {"wy": (chunk_kernels.WY_TILES, ("BK", "BV", "num_warps")),
               "output": (chunk_kernels.OUTPUT_TILES, ("BV", "num_warps")),
               "intra": (chunk_kernels.INTRA_TILES, ("BK", "num_warps", "num_stages"))}
    for option, (table, keys) in shipped.items():     # by default, each kernel's shipped setting only
        parser.add_argument(f"--{option}", default=":".join(str(table[key]) for key in keys),
                            help=f"{option} kernel settings {':'.join(keys)} to try, comma-separated")
    args = parser.parse_args(argv)
    start = time.monotonic()
    shapes = [(1, 8192, 16), (4, 2048, 16)]
    cases = {}
    for B, T, H in shapes:
        inputs = baseline_inputs(B, T, H, seed=1)
        ref, _ = gdn2edu.recurrent_gdn2(*(x.double() for x in inputs))
        cases[(B, T, H)] = (inputs, ref)
    default = dict(chunk_kernels.SCAN_TILES)
    default_lowp = chunk_kernels.LOW_PRECISION_INTERMEDIATES
    default_intra = dict(chunk_kernels.INTRA_TILES)
    default_wy, default_out = dict(chunk_kernels.WY_TILES), dict(chunk_kernels.OUTPUT_TILES)

    def settings(text):
        return [tuple(map(int, item.split(":"))) for item in text.split(",")]

    grid = itertools.product(*(map(int, s.split(",")) for s in (args.lowp, args.bv, args.warps, args.stages)),
                             settings(args.intra), settings(args.wy), settings(args.output))
    for lowp, bv, warps, stages, (ibk, iwarps, istages), wy, out in grid:
        if time.monotonic() - start > args.budget:
            print("budget spent, stopping")
            break
        chunk_kernels.SCAN_TILES.update(BV=bv, num_warps=warps, num_stages=stages)
        chunk_kernels.LOW_PRECISION_INTERMEDIATES = bool(lowp)
        chunk_kernels.INTRA_TILES.update(BK=ibk, num_warps=iwarps, num_stages=istages)
        chunk_kernels.WY_TILES.update(BK=wy[0], BV=wy[1], num_warps=wy[2])
        chunk_kernels.OUTPUT_TILES.update(BV=out[0], num_warps=out[1])
        label = f"lowp={lowp} BV={bv:3d} warps={warps} stages={stages} intra={ibk}:{iwarps}:{istages} wy={wy} out={out}"
        for shape, (inputs, ref) in cases.items():
            try:
                o, _ = gdn2edu.chunk_gdn2(*inputs)
                ms = triton.testing.do_bench(lambda: gdn2edu.chunk_gdn2(*inputs), warmup=25, rep=100,
                                             return_mode="median")
                print(f"{label} {shape}: err {rel_l2(o, ref):.2e} time {ms:.3f} ms", flush=True)
            except Exception as err:          # out of resources: report and go on
                print(f"{label} {shape}: {type(err).__name__}: {err}", flush=True)
    chunk_kernels.SCAN_TILES.update(default)
    chunk_kernels.LOW_PRECISION_INTERMEDIATES = default_lowp
    chunk_kernels.INTRA_TILES.update(default_intra)
    chunk_kernels.WY_TILES.update(default_wy)
    chunk_kernels.OUTPUT_TILES.update(default_out)
    for shape, (inputs, _) in cases.items():
        print(f"per-kernel time at {shape}, default tiles {default}:")
        for name, ms in kernel_times(lambda: gdn2edu.chunk_gdn2(*inputs)).items():
            print(f"  {name:40s} {ms:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
