"""How much of the scan could run beside the intra and WY launches if nothing waited on the host? The shipped
launches timed alone, one after another, and with the scan on a second stream at the same time; on a GPU, JSON
with provenance.

    python tools/gpu_scan_concurrency.py --out results/h200_scan_concurrency.json [--commit SHA]
        [--shapes 1x8192x16,2x8192x16] [--rounds 5] [--scan-stages 3,2,1]

tools/gpu_scan_overlap.py cut the forward into segments launched from Python and found the host in the way; it
could not say whether an overlap would pay without it. This tool measures the ceiling of any overlap of the scan
with the launches before it. The scan reads the intermediates of a forward made once (its AE, AZ, KG, QG, Aqk and
gamma_n), so it depends on nothing launched in the round, and runs on a high-priority side stream while the main
stream runs the intra launch, the WY launch or both into buffers of their own. Such a run computes
nothing a forward needs in that order: it times how the launches share the multiprocessors, the most that a
scan which waits on the WY kernel's chunks one by one (flags in memory, one launch each) could save. Each round
times, in turn: each launch alone; the three of them one after another on one stream (the shipped forward's
kernels); chunk_gdn2_fwd itself; and the scan beside the WY launch, the intra launches and both. The shipped scan
asks for most of a multiprocessor's shared memory for its pipeline (three stages of five tiles), which leaves no
room for a WY block beside it; so the runs with a scan are timed again for each of ``--scan-stages``, the
pipeline stages of the scan (FUSED_SCAN_STAGES, shipped: 3). Before timing it asserts that the scan writes the
shipped forward's output bit for bit, at every stage count and beside the others, and that the WY launch beside
the scan writes what it writes alone. bf16, K = V = 128, chunk_kernels.baseline_inputs.
"""

import argparse
import json
import statistics
from pathlib import Path

import torch

from gdn2edu import chunk_kernels as ck
from gdn2edu.bench import _int_list, gpu_record, measure_ms, parse_shapes
from gpu_scan_overlap import side_stream

# run name -> (launches on the main stream, in order; whether the scan runs beside them on a side stream)
RUNS = {"intra": (("intra",), False), "wy": (("wy",), False), "scan": (("scan",), False),
        "one_stream": (("intra", "wy", "scan"), False), "wy|scan": (("wy",), True),
        "intra|scan": (("intra",), True), "intra,wy|scan": (("intra", "wy"), True)}


class Launches:
    """The forward's launches on one input, each a function of no arguments: ``intra`` (new A and
    Aqk), ``wy`` (on a forward's A, new outputs) and ``scan`` (on that forward's intermediates, into ``o``).
    Built from a forward made once, the default path without an initial state; ``shipped`` is its output.
    ``scan_stages``: the scan's pipeline stages (None: the shipped FUSED_SCAN_STAGES)."""

    def __init__(self, q, k, v, g, b, w):
        self.p = ck._plan(q, k, v, g, b, w, None, None, None)
        self.x = tuple(t.contiguous() for t in (q, k, v, g, b, w))
        with torch.no_grad(), ck._on_device(q):
            self.f = ck._forward_states(*self.x, None, False, self.p, o=torch.empty_like(v), store_states=False)
        self.shipped = self.f["o"]
        self.o = torch.empty_like(v)
        self.scan_stages = None

    def intra(self):
        q, k, _, g, b, _ = self.x
        return ck._intra_states(q, k, g, b, self.p)

    def wy(self):
        return ck._wy_states(*self.x, self.f["A"], self.p)

    def scan(self):
        shipped = ck.FUSED_SCAN_STAGES
        ck.FUSED_SCAN_STAGES = shipped if self.scan_stages is None else self.scan_stages
        try:
            return ck._scan_states(self.f, None, False, self.p, o=self.o, store_states=False)
        finally:
            ck.FUSED_SCAN_STAGES = shipped

    @torch.no_grad()
    def run(self, name):
        """One call of the run ``name`` (RUNS); returns the dict of the last main-stream launch's results. On a
        GPU the side stream starts with the main one and the main one waits for it at the end; on the CPU (the
        interpreter) the scan runs after the main stream's launches."""
        if name not in RUNS:
            raise ValueError(f"name must be one of {tuple(RUNS)}, got {name!r}")
        on_main, beside = RUNS[name]
        side = side_stream(0, self.shipped.device) if beside and self.shipped.is_cuda else None
        main = torch.cuda.current_stream(self.shipped.device) if side is not None else None
        if side is not None:
            side.wait_stream(main)
            with torch.cuda.stream(side):
                self.scan()
        out = [getattr(self, launch)() for launch in on_main]
        if side is not None:
            main.wait_stream(side)
        elif beside:
            self.scan()
        return out[-1]


def with_scan(name):
    """Whether the run ``name`` launches the scan (and is timed for each stage count)."""
    on_main, beside = RUNS[name]
    return beside or "scan" in on_main


def check_runs(launches):
    """Assert that every run's scan writes the shipped output and its WY launch what the forward's wrote."""
    for name, (on_main, beside) in RUNS.items():
        launches.o.zero_()
        last = launches.run(name)
        if with_scan(name):
            assert torch.equal(launches.o, launches.shipped), f"{name}: the scan's output differs"
        if on_main[-1] == "wy":
            for key in ("AE", "AZ", "KG", "QG", "GN"):
                assert torch.equal(last[key], launches.f[key]), f"{name}: the WY launch's {key} differs"


def row_names(scan_stages):
    """The record's rows: each run without the scan, chunk_gdn2_fwd, and each run with it as "<run> stages <n>" for
    every n in scan_stages."""
    return [name for name in RUNS if not with_scan(name)] + ["chunk_gdn2_fwd"] + [
        f"{name} stages {n}" for n in scan_stages for name in RUNS if with_scan(name)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--commit", default=None)
    p.add_argument("--shapes", type=parse_shapes, default=((1, 8192, 16), (2, 8192, 16)))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--scan-stages", type=_int_list, default=[ck.FUSED_SCAN_STAGES, 2, 1],
                   help="comma-separated pipeline stages of the scan for the runs with a scan")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    if not args.scan_stages or min(args.scan_stages) < 1:
        p.error(f"--scan-stages must be positive ints, got {args.scan_stages}")
    result = gpu_record("gpu_scan_concurrency.py", args.commit, argv, dtype="bf16", K=128, V=128,
                        rounds=args.rounds, complete=False, scan_stages=args.scan_stages,
                        runs={k: list(v[0]) + ["scan"] * v[1] for k, v in RUNS.items()}, shapes={})
    inputs = {"x".join(map(str, s)): ck.baseline_inputs(*s) for s in args.shapes}
    prepared = {}
    for key, x in inputs.items():
        prepared[key] = launches = Launches(*x)
        for stages in args.scan_stages:
            launches.scan_stages = stages
            check_runs(launches)
        result["shapes"][key] = {name: {"ms": []} for name in row_names(args.scan_stages)}
    for round_ in range(args.rounds):
        for key, launches in prepared.items():
            rows = result["shapes"][key]
            for name in rows:
                run, _, stages = name.partition(" stages ")
                launches.scan_stages = int(stages) if stages else None
                if run == "chunk_gdn2_fwd":
                    rows[name]["ms"].append(measure_ms(lambda: ck.chunk_gdn2_fwd(*inputs[key])))
                else:
                    rows[name]["ms"].append(measure_ms(lambda: launches.run(run)))
                rows[name]["median_ms"] = statistics.median(rows[name]["ms"])
                print(f"round {round_ + 1} {key} {name:26s} {rows[name]['ms'][-1]:.4f} ms", flush=True)
        args.out.write_text(json.dumps(result, indent=1))     # rewritten after every round
    result["complete"] = True
    args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
