"""A CPU pilot for Chapter 12's recall experiment: small grids of task, model and training settings around
tools/gpu_train_mqar.py's (TASKS, MODEL, TRAINING, its train_one), to choose settings that learn before GPU time
is spent. Every run is appended to one JSON file with its settings, loss curve, held-out accuracy and seconds.

    python tools/mqar_pilot.py --out results/cpu_mqar_pilot.json --stage NAME [--workers 2]
        [--set KEY=VALUE ...] [--vary KEY=V1,V2 ...] [--tasks ...] [--members ...] [--seeds 0]

A KEY is a task setting (num_pairs, num_queries, num_keys, num_values: every task; overwrites: the tasks that
have overwrites), a MODEL setting or a TRAINING setting; --set overrides the tool's defaults, --vary runs the
product of its values. Runs use the PyTorch operator, one thread each, ``--workers`` processes at once.

--cpu-chunk caps the chunk of the layer's PyTorch operator (the layer picks min(64, T rounded up to a power of
two)): the chunked form is exact for every chunk size, so this changes rounding, not the function, and a chunk
of 16 makes a step at T = 64 about 6x faster on the CPU. The GPU's Triton kernels keep their own chunk of 64.
"""

import argparse
import itertools
import json
import sys
from multiprocessing import get_context
from pathlib import Path

import torch

import gdn2edu.layers
from gdn2edu.bench import provenance

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_train_mqar import MEMBERS, MODEL, TASKS, TRAINING, train_one  # noqa: E402

CURVE_EVERY = 25                    # the loss curve is stored every CURVE_EVERY steps (means over each stretch)
TASK_KEYS = ("num_pairs", "num_queries", "num_keys", "num_values", "overwrites")


def parse_value(text):
    """'64' -> 64, '3e-3' -> 0.003, 'true'/'false' -> bool."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    raise ValueError(f"settings are ints, floats or true/false, got {text!r}")


def parse_pairs(items, many):
    """['k=v', ...] -> {k: v} (many: {k: [v1, v2, ...]} from 'k=v1,v2'); every k a known setting."""
    known = (*TASK_KEYS, *MODEL, *TRAINING)
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in known:
            raise ValueError(f"expected KEY=VALUE with KEY one of {known}, got {item!r}")
        out[key] = [parse_value(t) for t in text.split(",")] if many else parse_value(text)
    return out


def configurations(fixed, varied, tasks):
    """Every (task name, task, model, training) of the product of ``varied`` over the defaults plus ``fixed``."""
    keys = list(varied)
    for values in itertools.product(*(varied[k] for k in keys)):
        chosen = {**fixed, **dict(zip(keys, values))}
        for name in tasks:
            task = {k: chosen.get(k, v) for k, v in TASKS[name].items()}
            if TASKS[name]["overwrites"] == 0:
                task["overwrites"] = 0
            model = {k: chosen.get(k, v) for k, v in MODEL.items()}
            training = {k: chosen.get(k, v) for k, v in TRAINING.items()}
            yield name, task, model, training


def capped_chunk(limit):
    """Wrap the layer's PyTorch chunked operator so that its chunks hold at most ``limit`` tokens."""
    original = gdn2edu.layers.chunk_gdn2_torch

    def chunk_gdn2_torch(*args, chunk_size=64, **kwargs):
        return original(*args, chunk_size=min(chunk_size, limit), **kwargs)
    return chunk_gdn2_torch


def run(job):
    """One pilot run in a worker process: one thread, the PyTorch operator with capped chunks."""
    name, task, model, training, member, seed, cpu_chunk = job
    torch.set_num_threads(1)
    gdn2edu.layers.chunk_gdn2_torch = capped_chunk(cpu_chunk)
    out = train_one(task, model, member, seed, training, torch.device("cpu"))
    loss = out.pop("loss")
    tail = max(1, len(loss) // 20)
    curve = [sum(loss[i:i + CURVE_EVERY]) / len(loss[i:i + CURVE_EVERY]) for i in range(0, len(loss), CURVE_EVERY)]
    return {"task_name": name, "task": task, "model": model, "training": training, "member": member, "seed": seed,
            "cpu_chunk": cpu_chunk, "accuracy": out["accuracy"], "final_loss": sum(loss[-tail:]) / tail,
            "first_loss": loss[0], "loss_curve": curve, "seconds": out["seconds"],
            "state_size_per_layer": out["state_size_per_layer"]}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="JSON file to append to")
    p.add_argument("--stage", required=True, help="a name for this invocation's grid, recorded with its runs")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--vary", nargs="*", default=[], metavar="KEY=V1,V2")
    p.add_argument("--tasks", nargs="+", choices=tuple(TASKS), default=list(TASKS))
    p.add_argument("--members", nargs="+", choices=MEMBERS, default=list(MEMBERS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cpu-chunk", type=int, default=16)
    p.add_argument("--commit", default=None)
    args = p.parse_args(argv)
    try:
        fixed, varied = parse_pairs(args.set, many=False), parse_pairs(args.vary, many=True)
    except ValueError as err:
        p.error(str(err))
    jobs = [(name, task, model, training, member, seed, args.cpu_chunk)
            for seed in args.seeds for name, task, model, training in configurations(fixed, varied, args.tasks)
            for member in args.members]
    record = json.loads(args.out.read_text()) if args.out.exists() else {"stages": [], "runs": []}
    record["stages"].append({"stage": args.stage, "provenance": provenance(torch.device("cpu"), args.commit, argv,
                                                                           "python tools/mqar_pilot.py")})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with get_context("spawn").Pool(args.workers) as pool:
        for result in pool.imap(run, jobs):
            record["runs"].append({"stage": args.stage, **result})
            args.out.write_text(json.dumps(record, indent=1))
            print(f"{result['task_name']:15s} {result['member']:15s} {json.dumps(result['task'])} "
                  f"{json.dumps(result['model'])} {json.dumps(result['training'])}: accuracy "
                  f"{result['accuracy']:.3f}, loss {result['final_loss']:.2f} ({result['seconds']:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
