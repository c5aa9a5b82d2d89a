"""Which stored intermediate carries the rounding error of o at g = 0: the test matrix's case 18 (bfloat16, no decay)
fails o by a factor of 1.7, and keeping every intermediate in float32 passes it (Chapter 10, "Which rounding?").

The interpreter cannot take bfloat16 products (../shared/GPU.md), so this runs the same case in float16, whose
rounding errors are 2^3 = 8 times smaller, as Chapter 10 does. For each group of intermediates that the kernels
read together it records the relative RMS error of o against float64 with that group stored in float32 and the
others in float16, and with only that group in float16. The groups: Aqk; AE and kg (the scan's two products);
AZ; Q_g and h (the output's inter-chunk product); R. Each forward runs every launch in both storage types and
takes each intermediate from the run the configuration names; a launch's arithmetic is in float32 either way.

    python tools/intermediate_rounding.py --out results/cpu_intermediate_rounding.json [--commit SHA]
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")           # before triton is imported: the CPU runs the kernels

import torch  # noqa: E402

from gdn2edu import chunk_kernels as ck  # noqa: E402
from gdn2edu import recurrent_gdn2  # noqa: E402
from gdn2edu.bench import provenance  # noqa: E402

GROUPS = {"Aqk": ("Aqk",), "AE+kg": ("AE", "KG"), "AZ": ("AZ",), "Q_g+h": ("QG", "h"), "R": ("R",)}
WIDE = tuple(name for names in GROUPS.values() for name in names)


def zero_gate_case(T=300, K=128, seed=0):
    """float16 q, k, v, g = 0, b, w [1, T, 1, K] (q, k L2-normalised, the others uniform) and a float32 initial
    state [1, 1, K, K]: Chapter 10's zero_gate_error case."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.nn.functional.normalize(torch.rand(1, T, 1, K, generator=gen), dim=-1) for _ in range(2))
    v, b, w = (torch.rand(1, T, 1, K, generator=gen) for _ in range(3))
    g, h0 = torch.zeros(1, T, 1, K), torch.randn(1, 1, K, K, generator=gen)
    return [t.half() for t in (q, k, v, g, b, w)], h0


def forward_with_float32(names, x, h0):
    """o of chunk_gdn2's forward on float16 inputs x with the intermediates ``names`` stored in float32."""
    q, k, v, g, b, w = x
    p16 = ck._plan(*x, None, h0, None, False, None)
    p32 = p16._replace(store=torch.float32)
    f = {}

    def stage(launch):
        """Run one launch with both storage types; keep the float16 run's results but those named."""
        runs = [launch(p) for p in (p16, p32)]
        f.update(runs[0])
        f.update({name: runs[1][name] for name in runs[1] if name in names})

    stage(lambda p: ck._intra_states(q, k, g, b, p))
    stage(lambda p: ck._wy_states(q, k, v, g, b, w, f["A"], p))
    stage(lambda p: ck._scan_states(f, h0, False, p))
    return ck._forward_output(v, f, p16)


def relative_rms(got, want):
    return ((got.double() - want).square().mean().sqrt() / want.square().mean().sqrt()).item()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--commit", default=None)
    args = parser.parse_args(argv)
    x, h0 = zero_gate_case()
    want = recurrent_gdn2(*(t.double() for t in x), initial_state=h0.double())[0]
    rows = {"all float16": relative_rms(forward_with_float32((), x, h0), want),
            "all float32": relative_rms(forward_with_float32(WIDE, x, h0), want)}
    for group, names in GROUPS.items():
        rows[f"{group} float32"] = relative_rms(forward_with_float32(names, x, h0), want)
        rows[f"only {group} float16"] = relative_rms(forward_with_float32(set(WIDE) - set(names), x, h0), want)
        print(f"{group:6s} float32: {rows[f'{group} float32']:.2e}   only it float16: "
              f"{rows[f'only {group} float16']:.2e}", flush=True)
    record = {"provenance": provenance("cpu", args.commit, argv or sys.argv[1:],
                                       "python tools/intermediate_rounding.py"),
              "case": {"T": 300, "H": 1, "K": 128, "V": 128, "gate": "zero", "dtype": "fp16", "seed": 0},
              "groups": {group: list(names) for group, names in GROUPS.items()}, "o_relative_rms": rows}
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
