"""Where a decode step's time goes: the host's time per call against the GPU's, beside what the benchmark's timer
reports. GPU only; JSON with provenance (Chapter 11 reads three runs, each its own process).

    python tools/gpu_decode_timing.py --out FILE [--batches 1,64,256] [--calls 200] [--commit SHA]

For our decode step, as the benchmark's decode part calls it (gdn2edu.bench.decode_implementation("gdn2edu"): one
token against a cached state, bf16 inputs, H = 16, K = V = 128), at each batch size:
- host_ms: the host's time per call, ``calls`` calls launched without waiting (gdn2edu.bench.host_ms);
- gpu_ms: the GPU's time per call with no gaps between calls, the mean of gdn2edu.bench.queued_gpu_ms: the calls
  are queued behind a sleep kernel long enough to hold them all, each timed between its own two events
  ("queue_held" says whether the sleep outlasted the host's launches; if not, gaps count in and the row says so);
- flush_ms: the same for the L2 flush that triton.testing.do_bench runs on the GPU before every timed call;
- do_bench_ms: gdn2edu.bench.measure_ms, the benchmark's time (do_bench's median).
"""

import argparse
import json
import statistics
from pathlib import Path

import torch

from gdn2edu.bench import _int_list, decode_implementation, gpu_record, host_ms, l2_flush, measure_ms, queued_gpu_ms
from gdn2edu.chunk_kernels import baseline_inputs


def decode_rows(batches, calls):
    """One row per batch size: B, host_ms, gpu_ms, queue_held, flush_ms, flush_queue_held, do_bench_ms."""
    step = decode_implementation("gdn2edu", "cuda")
    flush = l2_flush()
    rows = []
    for batch in batches:
        x = baseline_inputs(batch, 1, seed=2)
        state = 0.1 * torch.randn(batch, 16, 128, 128, device="cuda")
        call = lambda: step(*x, state)                                     # noqa: E731
        for _ in range(20):                                                # compiled and warm
            call()
        gpu, held = queued_gpu_ms(call, calls)
        flush_gpu, flush_held = queued_gpu_ms(flush, calls)
        rows.append(dict(B=batch, host_ms=host_ms(call, calls), gpu_ms=statistics.mean(gpu), queue_held=held,
                         flush_ms=statistics.mean(flush_gpu), flush_queue_held=flush_held,
                         do_bench_ms=measure_ms(call)))
        print(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in rows[-1].items()),
              flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--commit", default=None)
    p.add_argument("--batches", type=_int_list, default=[1, 64, 256], help="comma-separated batch sizes")
    p.add_argument("--calls", type=int, default=200, help="calls per host and GPU timing")
    args = p.parse_args(argv)
    if args.calls < 1:
        p.error(f"--calls must be at least 1, got {args.calls}")
    result = gpu_record("gpu_decode_timing.py", args.commit, argv, dtype="bf16", H=16, K=128, V=128, calls=args.calls)
    result["rows"] = decode_rows(args.batches, args.calls)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
