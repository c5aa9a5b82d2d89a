"""Does a training step on chunk_gdn2 capture in a CUDA graph, and what does the capture save? On a GPU, JSON
with provenance (no H200 record of it yet; Chapter 11's "The host out of the way" found the host time it would
save).

    python tools/gpu_graph_capture.py --out results/h200_graph_capture.json [--commit SHA]
        [--shapes 1x8192x16,4x2048x16,8x1024x16,2x8192x16] [--rounds 5]

A step is chunk_gdn2's forward and the gradients onto its six inputs for a fixed cotangent of o (bf16, K = V =
128, chunk_kernels.baseline_inputs). At each shape the tool runs the step eagerly, captures it in a
torch.cuda.CUDAGraph (after warm-up calls on a side stream, as PyTorch asks), replays the graph, and asserts that
the replay's output and gradients equal the eager step's bit for bit. Then each round times, eager and replayed in
turn: the host's time per call and the GPU's with the host out of the way, after do_bench's flush
(gdn2edu.bench.host_and_gpu_ms, as the harness times a row), and do_bench's median (gdn2edu.bench.measure_ms).
"""

import argparse
import json
from pathlib import Path

import torch

import gdn2edu
from gdn2edu.bench import gpu_record, host_and_gpu_ms, l2_flush, measure_ms, parse_shapes
from gdn2edu.chunk_kernels import baseline_inputs
from gdn2edu.inputs import check_positive_ints


def training_step(inputs, do):
    """The step as a function of no arguments: chunk_gdn2's output o and its gradients onto the six inputs (leaves
    that require grad) for the cotangent do; returns [o, dq, dk, dv, dg, db, dw]."""
    def step():
        o = gdn2edu.chunk_gdn2(*inputs)[0]
        return [o.detach(), *torch.autograd.grad(o, inputs, do)]
    return step


def captured(step, warmup=3):
    """(graph, its outputs): ``step`` captured in a CUDA graph after ``warmup`` calls on a side stream; replaying
    the graph rewrites the outputs in place."""
    check_positive_ints(warmup=warmup)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step()
    return graph, outputs


def timings(fn, flush):
    """{host_ms, gpu_ms, queue_held, do_bench_ms} of fn, as Chapter 11's harness times a row."""
    host, gpu, held = host_and_gpu_ms(fn, flush)
    return dict(host_ms=host, gpu_ms=gpu, queue_held=held, do_bench_ms=measure_ms(fn))


def shape_row(B, T, H, rounds, flush):
    """One shape: whether the replay equals the eager step bit for bit, and each round's timings of both."""
    x = [t.detach().requires_grad_() for t in baseline_inputs(B, T, H)]
    do = torch.randn(B, T, H, x[2].shape[-1], device="cuda", dtype=x[2].dtype,
                     generator=torch.Generator(device="cuda").manual_seed(3))
    step = training_step(x, do)
    eager = step()
    graph, outputs = captured(step)
    graph.replay()
    torch.cuda.synchronize()
    names = ("o", "dq", "dk", "dv", "dg", "db", "dw")
    equal = {n: bool(torch.equal(a, b)) for n, a, b in zip(names, eager, outputs)}
    assert all(equal.values()), f"{B}x{T}x{H}: the replay differs from the eager step in {equal}"
    row = {"B": B, "T": T, "H": H, "replay_equals_eager": equal, "rounds": []}
    for _ in range(rounds):
        row["rounds"].append({"eager": timings(step, flush), "graph": timings(graph.replay, flush)})
        print(f"{B}x{T}x{H} " + "  ".join(f"{k} " + " ".join(f"{q} {v:.3f}" for q, v in r.items()
                                                           if q != "queue_held")
                                          for k, r in row["rounds"][-1].items()), flush=True)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--commit", default=None)
    p.add_argument("--shapes", type=parse_shapes, default=parse_shapes("1x8192x16,4x2048x16,8x1024x16,2x8192x16"))
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    result = gpu_record("gpu_graph_capture.py", args.commit, argv, dtype="bf16", K=128, V=128, rounds=args.rounds)
    flush = l2_flush()
    result["rows"] = [shape_row(B, T, H, args.rounds, flush) for B, T, H in args.shapes]
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
