"""Does the forward's scan hide behind the intra and WY work of later segments? The shipped kernels, launched over
segments of each sequence's chunks, the scans on a high-priority side stream: timed against chunk_gdn2_fwd on a
GPU; JSON with provenance.

    python tools/gpu_scan_overlap.py --out results/h200_scan_overlap.json [--commit SHA]
        [--shapes 1x8192x16,2x8192x16] [--segments 2,4] [--rounds 3]

At B = 1 the scan runs 128 dependent chunk steps on 128 programs, one per multiprocessor, and leaves most of each
multiprocessor idle (Chapter 11's counters), while the intra and WY kernels are fully parallel. Host code only:
segment s of sequence n is the chunk range [a_s, b_s) of that sequence; its intra launch and its WY
launch take pointer offsets into the flags, gamma_n and the chunk map, so that they are the shipped kernels on
fewer programs, and its scan (the one that writes the output) starts from the state the previous segment's scan
left, as a sequence of its own. Two orders of the launches on the main stream: "interleaved" (intra and WY segment
by segment) and "intra_first" (the intra launches over every chunk, then WY segment by segment). Each scan waits
for its segment's WY launch on a side stream of high priority, one per sequence, so that the scan of segment s can
run while the intra and WY launches of later segments do. The output is bitwise the shipped forward's (asserted
before timing). Every round times the shipped forward and each (segments, order) in turn: the GPU time per call
(gdn2edu.bench.measure_ms) and the host time per call (50 calls launched without waiting, over 50), since each
extra launch costs host time. bf16, K = V = 128, chunk_kernels.baseline_inputs, sequences of equal length.
"""

import argparse
import json
import statistics
from pathlib import Path

import torch
import triton

from gdn2edu import chunk_kernels as ck
from gdn2edu.bench import _int_list, gpu_record, host_ms, measure_ms, parse_shapes
from gdn2edu.inputs import check_positive_ints

ORDERS = ("interleaved", "intra_first")


def segments(chunks, count):
    """``count`` ranges [a, b) of nearly equal length that cover 0 .. chunks (fewer if chunks < count)."""
    check_positive_ints(count=count)
    edges = [round(i * chunks / count) for i in range(count + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


_SIDE_STREAMS = {}
_SEGMENT_MAPS = {}


def side_stream(n, device):
    """The high-priority stream on which sequence n's scans run (made once per sequence number and device)."""
    if (n, device) not in _SIDE_STREAMS:
        _SIDE_STREAMS[(n, device)] = torch.cuda.Stream(device=device, priority=-1)
    return _SIDE_STREAMS[(n, device)]


def _segment_map(first_row, last_row, first_chunk, device):
    """cu_seqlens [2] and chunk_offsets [1] (int32, on device) that make rows first_row .. last_row a sequence of
    its own whose chunks start at global chunk first_chunk; made once (a copy to the GPU is host work)."""
    key = (first_row, last_row, first_chunk, device)
    if key not in _SEGMENT_MAPS:
        as_int32 = dict(dtype=torch.int32, device=device)
        _SEGMENT_MAPS[key] = (torch.tensor([first_row, last_row], **as_int32), torch.tensor([first_chunk], **as_int32))
    return _SEGMENT_MAPS[key]


@torch.no_grad()
def overlapped_forward(q, k, v, g, b, w, count=2, order="intra_first"):
    """chunk_gdn2_fwd's output o [B, T, H, V] (default path, no initial state) for q, k, g, b [B, T, H, K] and v, w
    [B, T, H, V] as chunk_gdn2_fwd takes them, from the shipped kernels launched over ``count`` segments of each
    sequence's chunks in ``order`` (ORDERS), the scans on side streams (on a GPU; on the CPU, in the
    interpreter, one after another). The launches are the package's own: _launch_intra and _launch_wy on a plan
    cut to the segment's chunks, _scan_states on a plan whose one sequence is the segment."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    p = ck._plan(q, k, v, g, b, w, None, None, None)
    q, k, v, g, b, w = (x.contiguous() for x in (q, k, v, g, b, w))
    B, T, H, V = p.B, p.T, p.H, p.V
    NT, device = triton.cdiv(T, 64), q.device
    parts = segments(NT, count)
    A, Aqk, flags = ck._intra_buffers(p, device)
    f = dict(ck._wy_buffers(p, device), Aqk=Aqk)
    o = torch.empty_like(v)
    # the value block for all the sequences' scans together, as they run at once (one launch per sequence here)
    BV = ck._scan_value_block(ck.SCAN_TILES["BV"], p.N, H, V, device)
    main = torch.cuda.current_stream(device) if q.is_cuda else None
    sides = [side_stream(n, device) for n in range(B)] if q.is_cuda else []
    for side in sides:
        side.wait_stream(main)
    states = [None] * B

    def intra(c0, c1):                # chunks c0 .. c1 of the plan's map (sequence-major: n * NT + c)
        ck._launch_intra(q, k, g, b, A, Aqk, flags[c0:], p._replace(chunks=p.chunks[c0:c1]), 1)

    def wy(c0, c1):
        ck._launch_wy(q, k, v, g, b, w, A, dict(f, GN=f["GN"][c0:]), p._replace(chunks=p.chunks[c0:c1]))

    def scan(n, a, z):
        cu, first = _segment_map(n * T + a * 64, n * T + min(z * 64, T), n * NT + a, device)
        segment = p._replace(cu=cu, chunk_offsets=first, N=1)
        states[n] = ck._scan_states(f, states[n], True, segment, o=o, store_states=False, value_block=BV)["ht"]

    if order == "intra_first":
        intra(0, B * NT)
    for a, z in parts:
        for n in range(B):
            if order == "interleaved":
                intra(n * NT + a, n * NT + z)
            wy(n * NT + a, n * NT + z)
            if not sides:
                scan(n, a, z)
                continue
            done = torch.cuda.Event()
            done.record(main)
            with torch.cuda.stream(sides[n]):
                sides[n].wait_event(done)
                scan(n, a, z)
    for side in sides:
        main.wait_stream(side)
    return o


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--commit", default=None)
    p.add_argument("--shapes", type=parse_shapes, default=((1, 8192, 16), (2, 8192, 16)))
    p.add_argument("--segments", type=_int_list, default=[2, 4], help="comma-separated segment counts")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    result = gpu_record("gpu_scan_overlap.py", args.commit, argv, dtype="bf16", K=128, V=128, rounds=args.rounds,
                        complete=False, shapes={})
    runs = {"shipped": lambda x: ck.chunk_gdn2_fwd(*x)[0]}
    for count in args.segments:
        for order in ORDERS:
            runs[f"{count}_{order}"] = lambda x, count=count, order=order: overlapped_forward(*x, count, order)
    inputs = {"x".join(map(str, s)): ck.baseline_inputs(*s) for s in args.shapes}
    for key, x in inputs.items():
        shipped = runs["shipped"](x)
        rows = result["shapes"][key] = {}
        for name, run in runs.items():
            rows[name] = {"bitwise": bool(torch.equal(run(x), shipped)), "gpu_ms": [], "host_ms": []}
            if not rows[name]["bitwise"]:
                raise SystemExit(f"{name} at {key} does not give the shipped output bit for bit")
    for round_ in range(args.rounds):
        for key, x in inputs.items():
            for name, run in runs.items():
                row = result["shapes"][key][name]
                row["gpu_ms"].append(measure_ms(lambda: run(x)))
                row["host_ms"].append(host_ms(lambda: run(x)))
                row["gpu_ms_median"] = statistics.median(row["gpu_ms"])
                row["host_ms_median"] = statistics.median(row["host_ms"])
                print(f"round {round_ + 1} {key} {name:18s} gpu {row['gpu_ms'][-1]:.4f} ms  host "
                      f"{row['host_ms'][-1]:.4f} ms", flush=True)
        args.out.write_text(json.dumps(result, indent=1))     # rewritten after every round
    result["complete"] = True
    args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
