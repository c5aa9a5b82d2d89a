"""Hardware counters of the chunked forward's kernels on a GPU, read by NVIDIA Nsight Compute (``ncu``): occupancy
and what limits it, registers and shared memory per block, how often a scheduler finds a warp ready to issue,
throughput against the device's peaks, and why warps were not issued (the stall reasons); JSON with provenance.

    python tools/gpu_kernel_counters.py --out results/h200_forward_counters.json [--commit SHA]
        [--shape B,T,H]   (default 1,8192,16; bf16, K = V = 128, chunk_kernels.baseline_inputs)
        [--variant NAME]  (a variant of tools/gpu_intra_ablation.py instead of the shipped kernels: one of
                           COUNTED_VARIANTS, each a forward of the same launches)

The tool runs itself again under ``ncu`` (``--target``): that process calls ``chunk_gdn2_fwd`` three times and
``ncu`` records the launches of the third, the first two being warm-up (compilation, caches). The default
path launches the intra kernel once (mode 1, which redoes the flagged chunks itself; records before that
change hold a second launch, mode 2), then WY and the scan, in launch order. The scan writes the output
(chunk_kernels.FUSE_OUTPUT): three launches a forward, four when the output kernel runs after the scan.
"""

import argparse
import csv
import importlib.util
import io
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

# the sections read and, of their metrics, the ones kept (names as Nsight Compute prints them)
SECTIONS = ("LaunchStats", "Occupancy", "SchedulerStats", "WarpStateStats", "SpeedOfLight")
METRICS = ("Duration", "Registers Per Thread", "Block Size", "Grid Size", "Dynamic Shared Memory Per Block",
           "Waves Per SM", "Theoretical Occupancy", "Achieved Occupancy", "Block Limit Registers",
           "Block Limit Shared Mem", "Block Limit Warps", "Issued Warp Per Scheduler", "No Eligible",
           "Eligible Warps Per Scheduler", "Warp Cycles Per Issued Instruction", "Compute (SM) Throughput",
           "Memory Throughput", "DRAM Throughput")
# why warps wait: per stall reason, the average number of warps held by it per issued instruction (they add up to
# the cycles per issued instruction, "selected" being the issuing warp's own cycle), requested by name pattern
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
STALL_METRICS = rf"regex:^{STALL_PREFIX}.*{STALL_SUFFIX.replace('.', '[.]')}$"
KERNEL_PREFIX = "chunk_gdn2_fwd_"          # the forward's kernels: intra, wy, scan (and output)
FORWARDS = 3                               # the last one is recorded
# the ablation variants whose counters can be read: the whole-forward candidates and the two cuts of the intra
# kernel's check, which keep the forward's launches (a cut's values are wrong only where a chunk is flagged)
COUNTED_VARIANTS = ("plain_launches", "redo_inlined", "one_exponent_max", "no_redo", "no_check")


def shape_arg(text):
    """--shape "B,T,H" -> (B, T, H), three positive ints, or an argparse error."""
    try:
        values = tuple(int(n) for n in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected three positive ints B,T,H, got {text!r}")
    return values


def parse_details(text):
    """Nsight Compute's ``--csv --page details`` output -> [{"kernel", "id", "metrics": {name: {"unit", "value"}}}]
    per launch, in launch order, with the metrics of METRICS; values as floats where they are numbers (thousands
    separators dropped), else as printed. The stall metrics go to "stalls": {reason: warps per issued instruction}.
    Lines before the CSV header (the tool's own messages) are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no CSV header (a line starting with \"ID\") in the Nsight Compute output")
    launches = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        name = row.get("Metric Name") or ""
        stall = name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX)
        if name not in METRICS and not stall:
            continue
        launch = launches.setdefault(int(row["ID"]), {"kernel": row["Kernel Name"].split("(")[0].strip(),
                                                      "id": int(row["ID"]), "metrics": {}, "stalls": {}})
        value = row["Metric Value"].replace(",", "")
        try:
            value = float(value)
        except ValueError:
            value = row["Metric Value"]
        if stall:
            launch["stalls"][name.removeprefix(STALL_PREFIX).removesuffix(STALL_SUFFIX)] = value
        else:
            launch["metrics"][name] = {"unit": row["Metric Unit"], "value": value}
    return [launches[i] for i in sorted(launches)]


def variant_arg(text):
    """--variant NAME -> NAME, one of COUNTED_VARIANTS, or an argparse error."""
    if text not in COUNTED_VARIANTS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(COUNTED_VARIANTS)}, got {text!r}")
    return text


def forward_module(variant, folder):
    """chunk_kernels, or with ``variant`` (a name of COUNTED_VARIANTS) its source as tools/gpu_intra_ablation.py
    edits it, loaded as a module of its own from ``folder``: what the profiled process runs."""
    from gdn2edu import chunk_kernels

    if variant is None:
        return chunk_kernels
    # the ablation tool is a script beside this one, not a module of the package: loaded by its path, so that an
    # import of this file from anywhere finds it without a change to sys.path
    spec = importlib.util.spec_from_file_location("gpu_intra_ablation", Path(__file__).resolve().parent
                                                  / "gpu_intra_ablation.py")
    ablation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ablation)
    variants = ablation.FORWARD_VARIANTS if variant in ablation.FORWARD_VARIANTS else ablation.VARIANTS
    return ablation.load_variant(variant, folder, variants)


def run_target(shape, variant=None):
    """The profiled process: FORWARDS calls of the forward (of ``variant``, else the shipped one) at ``shape`` on
    the baseline's inputs; prints one JSON line with the inputs' K, V and dtype, which the record states."""
    with tempfile.TemporaryDirectory() as folder:
        module = forward_module(variant, folder)
        q, k, v, g, b, w = module.baseline_inputs(*shape)
        for _ in range(FORWARDS):
            module.chunk_gdn2_fwd(q, k, v, g, b, w)
        torch.cuda.synchronize()
    print(json.dumps({"inputs": {"K": q.shape[-1], "V": v.shape[-1], "dtype": str(q.dtype).removeprefix("torch.")}}))


def target_inputs(stdout):
    """The target's {"K", "V", "dtype"} from its JSON line in ``stdout``; a ValueError where it printed none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith('{"inputs"'):
            return json.loads(line)["inputs"]
    raise ValueError("the profiled process printed no inputs line")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--commit", default=None)
    p.add_argument("--shape", type=shape_arg, default=(1, 8192, 16))
    p.add_argument("--variant", type=variant_arg, default=None,
                   help=f"profile a variant of tools/gpu_intra_ablation.py: {', '.join(COUNTED_VARIANTS)}")
    p.add_argument("--target", action="store_true", help=argparse.SUPPRESS)   # the process ncu profiles
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("gpu_kernel_counters.py reads a GPU's counters: it needs a CUDA GPU")
    if args.target:
        return run_target(args.shape, args.variant)
    if args.out is None:
        p.error("--out is required")
    ncu = shutil.which("ncu")
    if ncu is None:
        raise SystemExit("gpu_kernel_counters.py needs NVIDIA Nsight Compute's ncu on the PATH")
    from gdn2edu import chunk_kernels
    from gdn2edu.bench import provenance

    # intra, wy, the scan, and the output kernel unless the scan writes the output
    launches_per_forward = 3 + (not chunk_kernels.FUSE_OUTPUT)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "details.csv"
        command = [ncu, "--clock-control", "none", "--csv", "--page", "details", "--log-file", str(log),
                   "-k", f"regex:{KERNEL_PREFIX}", "-s", str((FORWARDS - 1) * launches_per_forward),
                   "-c", str(launches_per_forward), *(a for s in SECTIONS for a in ("--section", s)),
                   "--metrics", STALL_METRICS,
                   sys.executable, str(Path(__file__).resolve()), "--target", "--shape",
                   ",".join(map(str, args.shape)), *(["--variant", args.variant] if args.variant else [])]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"ncu failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        text = log.read_text() if log.exists() else ""
        launches = parse_details(text if '"ID"' in text else done.stdout)     # the log, or where ncu printed it
    if len(launches) != launches_per_forward or not all(x["kernel"].startswith(KERNEL_PREFIX) for x in launches):
        raise SystemExit(f"expected the {launches_per_forward} launches of one forward, got "
                         f"{[x['kernel'] for x in launches]}")
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    inputs = target_inputs(done.stdout)
    dtype = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(inputs["dtype"], inputs["dtype"])
    record = {"provenance": provenance("cuda", args.commit, argv, program="python tools/gpu_kernel_counters.py"),
              "ncu": version, "ncu_command": ["<log file>" if a == str(log) else a for a in command[1:]],
              "shape": list(args.shape), "variant": args.variant, "K": inputs["K"], "V": inputs["V"], "dtype": dtype,
              "sections": list(SECTIONS), "stall_metrics": STALL_METRICS, "launches": launches}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for x in launches:
        m = x["metrics"]
        print(f"{x['kernel']:32s} " + "  ".join(f"{name} {m[name]['value']}" for name in
                                                  ("Duration", "Registers Per Thread", "Theoretical Occupancy",
                                                   "No Eligible") if name in m)
              + "  stalls: " + ", ".join(f"{r} {v:.2f}" for r, v in sorted(
                  ((r, v) for r, v in x["stalls"].items() if isinstance(v, float)), key=lambda i: -i[1])[:4]))


if __name__ == "__main__":
    main()
