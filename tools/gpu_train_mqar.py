"""Chapter 12's experiment: the delta-rule family as gate choices of one GatedDeltaNet2 layer, trained on
multi-query associative recall (MQAR) and on MQAR with overwrites, at equal state size, on a GPU with the
Triton kernels; curves and held-out accuracies written as JSON with provenance.

Every member (deltanet, gated_deltanet, kda, gdn2) uses the same GDN2LM (same width, heads, head dims, so
the same d_k x d_v state per value head); only ``member`` differs. Each (task, member, seed) run trains from
its own seed on fresh batches and is evaluated on a held-out batch from a separate seed. The file records
what ran, not who wins; Chapter 12 plots it.

    python tools/gpu_train_mqar.py --out results/h200_mqar.json [--seeds 0 1 2] [--steps 2000]
        [--budget 360] [--commit SHA] [--dtype bf16]

--budget caps the wall time in seconds: runs that would start after it are skipped and listed as such.
Not run yet: no result file exists in results/ (see Chapter 12).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from gdn2edu.bench import provenance
from gdn2edu.lm import GDN2LM
from gdn2edu.mqar import train_mqar

MEMBERS = ("deltanet", "gated_deltanet", "kda", "gdn2")
TASKS = {
    "mqar": dict(num_pairs=32, num_queries=32, num_keys=256, num_values=256, overwrites=0),
    "mqar_overwrite": dict(num_pairs=32, num_queries=32, num_keys=256, num_values=256, overwrites=16),
}
MODEL = dict(hidden_size=128, num_layers=2, head_dim=32, num_heads=4, mlp_ratio=2)


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="JSON file to write (results/h200_mqar.json)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--budget", type=float, default=360.0, help="seconds of wall time for all runs")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16", help="autocast dtype of the model")
    p.add_argument("--commit", default=None)
    p.add_argument("--tasks", nargs="+", choices=tuple(TASKS), default=list(TASKS))
    p.add_argument("--members", nargs="+", choices=MEMBERS, default=list(MEMBERS))
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("gpu_train_mqar.py trains on the Triton kernels: it needs a CUDA GPU")
    device = torch.device("cuda")
    autocast = torch.bfloat16 if args.dtype == "bf16" else None
    vocab = {name: t["num_keys"] + t["num_values"] for name, t in TASKS.items()}
    result = {"provenance": provenance(device, args.commit, argv, "python tools/gpu_train_mqar.py"),
              "model": MODEL, "task_settings": {t: TASKS[t] for t in args.tasks},
              "training": {"steps": args.steps, "batch_size": args.batch_size, "lr": args.lr, "dtype": args.dtype},
              "tasks": {t: {m: [] for m in args.members} for t in args.tasks}, "skipped": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for seed in args.seeds:                         # seeds outermost: a cut budget still covers every member
        for task in args.tasks:
            for member in args.members:
                if time.perf_counter() - start > args.budget:
                    result["skipped"].append({"task": task, "member": member, "seed": seed})
                    continue
                torch.manual_seed(seed)
                model = GDN2LM(vocab_size=vocab[task], member=member, **MODEL).to(device)
                with torch.autocast("cuda", dtype=autocast, enabled=autocast is not None):
                    run = train_mqar(model, TASKS[task], steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                                     seed=seed)
                state = model.blocks[0].attn.state_size()
                result["tasks"][task][member].append({"seed": seed, "accuracy": run["accuracy"],
                                                      "loss": run["loss"], "seconds": run["seconds"],
                                                      "state_size_per_layer": state})
                print(f"{task:15s} {member:15s} seed {seed}: accuracy {run['accuracy']:.3f} "
                      f"({run['seconds']:.0f} s)", flush=True)
                args.out.write_text(json.dumps(result, indent=1))
    result["seconds"] = time.perf_counter() - start
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
