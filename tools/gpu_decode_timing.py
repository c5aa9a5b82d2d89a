"""Where a decode step's time goes: the host's time per call against the GPU's, beside what the benchmark's timer
reports. GPU only; JSON with provenance (Chapter 11 reads three runs, each its own process).

    python tools/gpu_decode_timing.py --out FILE [--batches 1,64,256] [--calls 200] [--commit SHA]

For our decode step, as the benchmark's decode part calls it (gdn2edu.bench.decode_implementation("gdn2edu"): one
token against a cached state, bf16 inputs, H = 16, K = V = 128), at each batch size:
- host_ms: the host's time per call, ``calls`` calls launched without waiting (gdn2edu.bench.host_ms);
- gpu_ms: the GPU's time per call with no gaps between calls: the calls are queued behind a sleep kernel long
  enough to hold them all, and timed between two events ("queue_held" says whether the sleep outlasted the host's
  launches; if not, gaps count in and the row says so);
- flush_ms: the same for the L2 flush that triton.testing.do_bench runs on the GPU before every timed call;
- do_bench_ms: gdn2edu.bench.measure_ms, the benchmark's time (do_bench's median).
"""

import argparse
import json
import time
from pathlib import Path

import torch
import triton

from gdn2edu.bench import _int_list, decode_implementation, gpu_record, host_ms, measure_ms
from gdn2edu.chunk_kernels import baseline_inputs
from gdn2edu.inputs import check_positive_ints


SLEEP_CYCLES_PER_MS = 2_000_000          # torch.cuda._sleep spins this many clock cycles per ms at about 2 GHz


def queued_gpu_ms(fn, calls, host_ms_per_call):
    """(GPU ms per call, queue held) of ``calls`` calls of fn queued behind a sleep kernel twice as long as their
    launches take the host (host_ms_per_call each), so that the GPU runs them back to back; queue held: whether
    the sleep outlasted the launches, read from the events (else the host's gaps count in)."""
    check_positive_ints(calls=calls)
    if not host_ms_per_call > 0:
        raise ValueError(f"host_ms_per_call must be a positive time in ms, got {host_ms_per_call!r}")
    slept, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    torch.cuda.synchronize()
    slept.record()
    torch.cuda._sleep(int(2 * calls * host_ms_per_call * SLEEP_CYCLES_PER_MS))
    start.record()
    launched = time.perf_counter()
    for _ in range(calls):
        fn()
    launched = 1e3 * (time.perf_counter() - launched)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls, slept.elapsed_time(start) > launched


def decode_rows(batches, calls):
    """One row per batch size: B, host_ms, gpu_ms, queue_held, flush_ms, flush_queue_held, do_bench_ms."""
    step = decode_implementation("gdn2edu", "cuda")
    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    flush = lambda: driver.clear_cache(cache)                              # noqa: E731
    rows = []
    for batch in batches:
        x = baseline_inputs(batch, 1, seed=2)
        state = 0.1 * torch.randn(batch, 16, 128, 128, device="cuda")
        call = lambda: step(*x, state)                                     # noqa: E731
        for _ in range(20):                                                # compiled and warm
            call()
        host = host_ms(call, calls)
        gpu, held = queued_gpu_ms(call, calls, host)
        flush_gpu, flush_held = queued_gpu_ms(flush, calls, host_ms(flush, calls))
        rows.append(dict(B=batch, host_ms=host, gpu_ms=gpu, queue_held=held, flush_ms=flush_gpu,
                         flush_queue_held=flush_held, do_bench_ms=measure_ms(call)))
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
