"""Collect the backward's design history from the H200 records in git: one row per recorded version of the inputs
kernel, with the time of its kernels and of the whole backward, read from results/h200_backward.json as each
commit below recorded it.

    python tools/backward_design_log.py --out results/h200_backward_design_log.json

The structure and register notes of each version are the ones its commit messages state; the times come from
the recorded files only.
"""

import argparse
import datetime
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPE = (1, 8192, 16)                          # the (B, T, H) whose per-kernel times the table shows
# (commit that recorded results/h200_backward.json, structure of the inputs side, registers per its commits)
VERSIONS = [
    ("5b9fa2d", "one kernel over whole 64-row chunks, pairwise sums as masked 64 x 64 products",
     "spilled at every tile setting"),
    ("cfbf804", "two kernels, the rows' side and the keys' side, float32 partial results through HBM",
     "fitted in registers at 8 warps"),
    ("66e4d59", "one kernel, pairwise products one 16-row sub-chunk at a time on midpoint anchors",
     "spills some registers at the shipped tiles"),
]
INPUTS_SIDE = ("inputs", "rows", "keys")       # kernel names of the inputs side in the versions above


def recorded(commit):
    """results/h200_backward.json as ``commit`` has it."""
    text = subprocess.run(["git", "show", f"{commit}:results/h200_backward.json"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    return json.loads(text)


def row(commit, structure, registers):
    run = recorded(commit)
    timing = {(t["B"], t["T"], t["H"]): t for t in run["timing"]}
    at = timing[SHAPE]
    kernels = at["our_backward_kernels_ms"]
    ratios = [t["impls"]["fla"]["bwd_ms"] / t["impls"]["gdn2edu"]["bwd_ms"] for t in run["timing"]]
    return {"recorded_in": commit, "measured_commit": run["provenance"]["commit"], "date": run["provenance"]["date"],
            "structure": structure, "registers": registers,
            "inputs_side_ms": sum(ms for name, ms in kernels.items() if any(part in name for part in INPUTS_SIDE)),
            "backward_ms": at["impls"]["gdn2edu"]["bwd_ms"], "fla_over_ours_min": min(ratios),
            "fla_over_ours_max": max(ratios)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    result = {"provenance": {"command": "python tools/backward_design_log.py --out " + str(args.out),
                             "commit": head, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                                 timespec="seconds"),
                             "source": "results/h200_backward.json at each recorded_in commit"},
              "shape": list(SHAPE), "versions": [row(*version) for version in VERSIONS]}
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
