# Generated from chapters/11_profiling.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""Profiling gdn2edu's kernels: FLOP and byte counts, ceilings, timings, a command-line benchmark."""

import argparse
import datetime
import functools
import importlib.metadata
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before triton is imported (by gdn2edu below)

import gdn2edu
from gdn2edu import chunk_kernels
from gdn2edu.bench_parts import EXTENSION_PARTS
from gdn2edu.chunk_backward_kernels import BACKWARD_TILE_TABLES
from gdn2edu.chunk_kernels import baseline_inputs
from gdn2edu.inputs import check_positive_ints, validate_inputs

# the forward's tile tables, recorded with every run beside the backward's BACKWARD_TILE_TABLES (a bound that
# depends on them reads them from the run)
FORWARD_TILE_TABLES = ("INTRA_TILES", "WY_TILES", "SCAN_TILES", "OUTPUT_TILES")


def _dot(m, n, k):
    """FLOPs of an [m, k] x [k, n] product: one multiply and one add per term."""
    return 2 * m * n * k


def forward_kernel_costs(B, T, H, K, V, chunk=64, dtype_bytes=2, fuse_output=False):
    """FLOPs and HBM bytes of chunk_gdn2's four forward kernels, counted from their code (Chapter 9); with
    fuse_output, of its three when the scan also writes the output (FUSE_OUTPUT) in a forward that no backward
    follows: the scan then does the output's products too, and neither stores h and R nor reads them back.

    Counts the tile products (``tl.dot``) and the forward substitution as written (dense tiles), not the
    elementwise work; bytes are the tensors each kernel loads and stores, each element once (dtype_bytes for
    q, k, v, b, w, o and the stored intermediates, Aqk among them; float32 for g, A, gamma_n). The scan's programs of one
    head (one per value block) all read the same AE and kg tiles (with fuse_output, Q_g and Aqk too): counted
    once, as L2 serves the repeats.
    T must be a multiple of ``chunk``. Returns {kernel: {"flops": int, "bytes": int}}.
    """
    check_positive_ints(B=B, T=T, H=H, K=K, V=V, chunk=chunk, dtype_bytes=dtype_bytes)
    if not isinstance(fuse_output, bool):
        raise ValueError(f"fuse_output must be a bool, got {fuse_output!r}")
    if chunk % 4 or T % chunk:
        raise ValueError(f"T must be a multiple of chunk and chunk of 4, got T = {T}, chunk = {chunk}")
    n, c, d, f32 = chunk, chunk // 4, dtype_bytes, 4
    units = B * H * (T // n)                                    # (chunk, head) pairs
    rows = n * units                                            # (token, head) pairs
    w = chunk_kernels.SUBSTITUTION_WIDTH                        # the diagonal blocks' sub-blocks
    intra_flops = (20 * _dot(c, c, K)                           # 10 block pairs x (E Y^T, Q Y^T)
                   + 4 * (w - 1) * 2 * c * c                    # 4 diagonal blocks: the substitution's row steps
                   + 4 * 2 * _dot(c, c, c) * ((c // w).bit_length() - 1)   # and two products per merge
                   + 16 * _dot(c, c, c))                        # the six blocks below the diagonal
    costs = {
        "intra": {"flops": units * intra_flops,
                  "bytes": rows * K * (3 * d + f32) + units * (10 * c * c * f32 + n * n * d)},  # A, Aqk
        "wy": {"flops": units * (_dot(n, K, n) + _dot(n, V, n)),
               "bytes": units * n * n * f32 + rows * K * (3 * d + f32) + rows * V * 2 * d     # A, q k b g, v w
               + rows * (3 * K + V) * d + units * K * f32},                                 # AE kg Q_g AZ, gamma_n
        "scan": {"flops": units * (_dot(n, V, K) + _dot(K, V, n)),
                 "bytes": rows * (2 * K + V) * d + units * K * f32                         # AE kg AZ, gamma_n
                 + rows * V * d + units * K * V * d},                                      # R, h
        "output": {"flops": units * (_dot(n, V, K) + _dot(n, V, n)),
                   "bytes": rows * K * d + units * K * V * d + rows * V * d + units * n * n * d  # Q_g h R Aqk
                   + rows * V * d},                                                       # o
    }
    if fuse_output:
        scan, output = costs.pop("scan"), costs.pop("output")
        kept = rows * V * d + units * K * V * d                # R and h: stored by the scan, read by the output
        costs["scan"] = {"flops": scan["flops"] + output["flops"], "bytes": scan["bytes"] + output["bytes"] - 2 * kept}
    return costs


def roofline_time_ms(flops, nbytes, flops_per_s, bytes_per_s):
    """The roofline's lower bound on a kernel's time: max(FLOPs / peak rate, bytes / peak bandwidth), in ms."""
    for name, value in (("flops", flops), ("nbytes", nbytes)):
        if not value >= 0:
            raise ValueError(f"{name} must be a non-negative count, got {value!r}")
    for name, value in (("flops_per_s", flops_per_s), ("bytes_per_s", bytes_per_s)):
        if not value > 0:
            raise ValueError(f"{name} must be a positive rate, got {value!r}")
    return 1e3 * max(flops / flops_per_s, nbytes / bytes_per_s)


def amdahl_speedup(f, s):
    """Whole-program speedup 1 / (1 - f + f / s) when a fraction f of the time is made s times faster."""
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"f must be a fraction in [0, 1], got {f!r}")
    if not s > 0:
        raise ValueError(f"s must be a positive speedup, got {s!r}")
    return 1.0 / (1.0 - f + f / s)


def measure_ms(fn, warmup=25, rep=100):
    """Median time of fn() in ms: ``triton.testing.do_bench`` on a GPU; on the CPU, the median of as many
    calls as fit in ``rep`` ms (at least 3) after ``warmup`` ms of calls."""
    if torch.cuda.is_available():
        import triton.testing
        return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
    times, deadline = [], time.perf_counter() + warmup / 1e3
    fn()
    while time.perf_counter() < deadline:
        fn()
    deadline = time.perf_counter() + rep / 1e3
    while len(times) < 3 or time.perf_counter() < deadline:
        start = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - start))
    return sorted(times)[len(times) // 2]


def host_ms(fn, calls=50):
    """The host's time per call of fn in ms (CUDA only): ``calls`` calls launched without waiting for the GPU,
    then one wait. Where it exceeds the GPU's time per call, the host, not the GPU, sets the pace."""
    if not callable(fn):
        raise ValueError(f"fn must be a function of no arguments, got {type(fn).__name__}")
    check_positive_ints(calls=calls)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return 1e3 * elapsed / calls


SLEEP_CYCLES_PER_MS = 2_000_000          # torch.cuda._sleep spins this many clock cycles per ms at about 2 GHz


def l2_flush():
    """do_bench's cache flush as a function of no arguments (CUDA only): it zeroes a buffer larger than the L2."""
    import triton
    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    return lambda: driver.clear_cache(cache)


def queued_gpu_ms(fn, calls=20, flush=None):
    """The GPU's time (ms) of each of ``calls`` calls of fn with the host out of the way (CUDA only): the calls
    are queued behind a sleep kernel twice as long as the host takes to launch them (host_ms, measured first), so
    that the GPU runs them back to back, each between its own two events, after ``flush()`` if given (outside the
    events). Returns (the list of times, queue held: whether the sleep outlasted the launches; if not, some of
    the host's gaps count in)."""
    if not callable(fn):
        raise ValueError(f"fn must be a function of no arguments, got {type(fn).__name__}")
    if flush is not None and not callable(flush):
        raise ValueError(f"flush must be None or a function of no arguments, got {type(flush).__name__}")
    check_positive_ints(calls=calls)

    def call():
        if flush is not None:
            flush()
        fn()
    launch_ms = host_ms(call, calls)
    new_event = functools.partial(torch.cuda.Event, enable_timing=True)
    slept, woke = new_event(), new_event()
    events = [(new_event(), new_event()) for _ in range(calls)]
    torch.cuda.synchronize()
    slept.record()
    torch.cuda._sleep(int(2 * calls * launch_ms * SLEEP_CYCLES_PER_MS))
    woke.record()
    launched = time.perf_counter()
    for start, end in events:
        if flush is not None:
            flush()
        start.record()
        fn()
        end.record()
    launched = 1e3 * (time.perf_counter() - launched)
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events], slept.elapsed_time(woke) > launched


def kernel_times(fn, repeats=20):
    """{kernel name: mean device time in ms per call of fn}, from the torch profiler (CUDA only)."""
    if not callable(fn):
        raise ValueError(f"fn must be a function of no arguments, got {type(fn).__name__}")
    check_positive_ints(repeats=repeats)
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    totals = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] = totals.get(event.name, 0.0) + event.device_time / 1e3 / repeats
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


FORWARD_KERNELS = {"intra": "chunk_gdn2_fwd_intra_kernel", "wy": "chunk_gdn2_fwd_wy_kernel",
                   "scan": "chunk_gdn2_fwd_scan_kernel", "output": "chunk_gdn2_fwd_output_kernel"}


def kernel_split(fn, kernels, repeats=20):
    """Per-kernel device time (ms) of one call of fn: for each short name of ``kernels`` ({short: kernel name}),
    the time of the kernels whose name contains it, and "other" (all else the profiler saw, e.g. copies).
    CUDA only. No kernel name may lie inside another (its kernels would count twice)."""
    if (not isinstance(kernels, dict) or not kernels or "other" in kernels
            or not all(isinstance(x, str) and x for item in kernels.items() for x in item)):
        raise ValueError(f'kernels must be a non-empty {{short name: kernel name}} of non-empty strings without the '
                         f'short name "other", got {kernels!r}')
    names = list(kernels.values())
    if any(i != j and a in b for i, a in enumerate(names) for j, b in enumerate(names)):
        raise ValueError(f"kernels' names must be distinct and none inside another, got {kernels!r}")
    times = kernel_times(fn, repeats)
    row = {short: sum(ms for name, ms in times.items() if full in name) for short, full in kernels.items()}
    row["other"] = sum(times.values()) - sum(row.values())
    return row


def measure_ceilings(device, warmup=25, rep=100):
    """The device's own ceilings: copy bandwidth (bytes read + written per s) of a 1 GiB (GPU) or 64 MiB (CPU)
    tensor, and the matmul rate (FLOP/s) of bf16 8192^3 on a GPU or float32 1024^3 on the CPU."""
    gpu = torch.device(device).type == "cuda"
    numel = (1 << 30 if gpu else 1 << 26) // 4
    src = torch.randn(numel, device=device)
    dst = torch.empty_like(src)
    copy_ms = measure_ms(lambda: dst.copy_(src), warmup, rep)
    n, dtype = (8192, torch.bfloat16) if gpu else (1024, torch.float32)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    matmul_ms = measure_ms(lambda: a @ b, warmup, rep)
    return {"copy_bytes_per_s": 2 * numel * 4 / (copy_ms / 1e3), "copy_mib": numel * 4 / 2**20,
            "matmul_flops_per_s": 2 * n**3 / (matmul_ms / 1e3), "matmul_size": n,
            "matmul_dtype": str(dtype).replace("torch.", "")}


# short names of the backward's kernels: the forward kernels a recomputation may re-run, then its own three
BACKWARD_KERNELS = {"intra": "chunk_gdn2_fwd_intra_kernel", "wy": "chunk_gdn2_fwd_wy_kernel",
                    "fwd_scan": "chunk_gdn2_fwd_scan_kernel", "bwd_scan": "chunk_gdn2_bwd_scan_kernel",
                    "local": "chunk_gdn2_bwd_local_kernel", "inputs": "chunk_gdn2_bwd_inputs_kernel"}


def backward_call(q, k, v, g, b, w):
    """chunk_gdn2's backward alone, as a function of no arguments: the gradients onto q, k, g, b [B, T, H, K]
    and v, w [B, T, H, V] for one random cotangent of o, on the graph of one forward kept between calls."""
    validate_inputs(q, k, v, g, b, w)                   # before detach(): the errors name the argument
    leaves = [x.detach().requires_grad_() for x in (q, k, v, g, b, w)]
    o = gdn2edu.chunk_gdn2(*leaves)[0]
    do = torch.randn_like(o)
    return lambda: torch.autograd.grad(o, leaves, do, retain_graph=True)


def _fla_ops():
    """FLA's {"chunk": chunk_gdn2, "decode": fused_recurrent_gdn2}, or a string saying why they are absent."""
    try:
        from fla.ops.gdn2 import chunk_gdn2, fused_recurrent_gdn2
    except ImportError:
        return "not installed (fla.ops.gdn2)"
    except Exception as err:             # an install that fails to import: say how
        return f"failed to import fla.ops.gdn2: {type(err).__name__}: {err}"
    return {"chunk": chunk_gdn2, "decode": fused_recurrent_gdn2}


# "_safe": the same kernels with safe_gate=True (the midpoint anchor unchecked; FLA's M=16 intra path)
IMPLEMENTATIONS = ("gdn2edu", "fla", "gdn2edu_safe", "fla_safe", "torch", "torch_compile")


def chunk_implementation(name, device):
    """The chunked forward called ``name`` (one of IMPLEMENTATIONS) as a function (q, k, v, g, b, w) -> (o, state),
    or a string saying why it cannot run here."""
    gpu = torch.device(device).type == "cuda"
    if name in ("gdn2edu", "gdn2edu_safe"):
        if not gpu:
            return "needs a GPU (Triton kernels)"
        return gdn2edu.chunk_gdn2 if name == "gdn2edu" else functools.partial(gdn2edu.chunk_gdn2, safe_gate=True)
    if name in ("fla", "fla_safe"):
        fla = _fla_ops()
        if isinstance(fla, str):
            return fla
        if not gpu:
            return "needs a GPU (Triton kernels)"
        return fla["chunk"] if name == "fla" else functools.partial(fla["chunk"], safe_gate=True)
    if name == "torch":
        return gdn2edu.chunk_gdn2_torch
    if name == "torch_compile":
        return torch.compile(gdn2edu.chunk_gdn2_torch, dynamic=False)
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {name!r}")


def _peak_mib(fn, device):
    """Extra memory (MiB) allocated at the peak of one call of fn on a GPU; None on the CPU."""
    if torch.device(device).type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def host_and_gpu_ms(fn, flush=None, calls=10):
    """(host_ms of fn, the median of queued_gpu_ms's ``calls`` times after ``flush()``, whether its queue held).
    Ten calls by default: a backward of FLA's launches dozens of kernels, and the host waits once its queue of
    launches fills."""
    times, held = queued_gpu_ms(fn, calls, flush)       # first: it checks the arguments before any work
    return host_ms(fn), statistics.median(times), held


# the fields a GPU row gains from time_host_and_gpu, None on the CPU
HOST_AND_GPU_FIELDS = ("fwd_gpu_ms", "bwd_gpu_ms", "fwd_host_ms", "bwd_host_ms", "queue_held")


def time_host_and_gpu(row, part, fn, flush):
    """On a GPU (``flush`` not None), row[part + "_host_ms"] and row[part + "_gpu_ms"] of host_and_gpu_ms(fn,
    flush), and row["queue_held"] and-ed with its queue's (None before: True); on the CPU, nothing."""
    if flush is not None:
        row[f"{part}_host_ms"], row[f"{part}_gpu_ms"], held = host_and_gpu_ms(fn, flush)
        row["queue_held"] = held and row.get("queue_held") is not False


def time_forward_backward(fn, inputs, warmup=25, rep=100):
    """Forward, backward and forward+backward median times (ms) of a chunk function, and the peak memory of
    one forward+backward (MiB, GPU only). On a GPU also, for the forward and the backward, the host's time per
    call and the GPU's with the host out of the way (fwd_host_ms, fwd_gpu_ms, bwd_*; queue_held: every queue
    of queued_gpu_ms held). The backward is the gradient onto all six inputs for a random cotangent of o; it
    is detected, not assumed: if o carries no autograd graph, the backward fields are None and "backward" says
    why. Returns a dict."""
    flush = l2_flush() if inputs[0].is_cuda else None
    row = {"fwd_ms": measure_ms(lambda: fn(*inputs), warmup, rep), "bwd_ms": None, "fwdbwd_ms": None,
           "peak_mib": None, "backward": "ok", **dict.fromkeys(HOST_AND_GPU_FIELDS)}
    time_host_and_gpu(row, "fwd", lambda: fn(*inputs), flush)
    leaves = [x.detach().requires_grad_() for x in inputs]
    o = fn(*leaves)[0]
    if not o.requires_grad:
        row["backward"] = "not available: the output carries no autograd graph"
        row["peak_mib"] = _peak_mib(lambda: fn(*inputs), inputs[0].device)
        return row
    do = torch.randn_like(o)

    def backward():
        return torch.autograd.grad(o, leaves, do, retain_graph=True, allow_unused=True)
    row["bwd_ms"] = measure_ms(backward, warmup, rep)
    time_host_and_gpu(row, "bwd", backward, flush)
    o = None                          # free the graph before timing whole steps

    def step():
        return torch.autograd.grad(fn(*leaves)[0], leaves, do, allow_unused=True)
    row["fwdbwd_ms"] = measure_ms(step, warmup, rep)
    row["peak_mib"] = _peak_mib(step, inputs[0].device)
    return row


def decode_implementation(name, device):
    """One decode step (T = 1, with a state) called ``name`` in ("gdn2edu", "fla", "torch"), as a function
    (q, k, v, g, b, w, state) of [B, 1, H, *] inputs and a [B, H, K, V] state, or why it cannot run here."""
    gpu = torch.device(device).type == "cuda"
    if name == "gdn2edu":
        if not gpu:
            return "needs a GPU (Triton kernel)"
        return lambda q, k, v, g, b, w, S: gdn2edu.fused_recurrent_gdn2(q, k, v, g, b, w, initial_state=S,
                                                                          output_final_state=True)
    if name == "fla":
        fla = _fla_ops()
        if isinstance(fla, str):
            return fla
        if not gpu:
            return "needs a GPU (Triton kernel)"
        return lambda q, k, v, g, b, w, S: fla["decode"](q, k, v, g, b, w, initial_state=S, output_final_state=True)
    if name == "torch":
        return lambda q, k, v, g, b, w, S: gdn2edu.recurrent_gdn2_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0],
                                                                       b[:, 0], w[:, 0], state=S)
    raise ValueError(f"decode implementation must be gdn2edu, fla or torch, got {name!r}")


# ReWY's thresholds on the relative L2 error against float64: 0.8% ordinary, 2% for the gate gradients; in the
# order check_chunk compares them (its outputs and gradients)
CHECK_THRESHOLDS = {"o": 8e-3, "ht": 8e-3, "dq": 8e-3, "dk": 8e-3, "dv": 8e-3, "dg": 2e-2, "db": 2e-2,
                    "dw": 2e-2, "dh0": 8e-3}


def check_chunk(inputs, seed=1):
    """chunk_gdn2 on inputs (q, k, v, g, b, w as baseline_inputs gives them: q, k, g, b [B, T, H, K], v, w
    [B, T, H, V]) with a random initial state [B, H, K, V], against float64 autograd through chunk_gdn2_explicit(..., backward="rewy")
    on the same rounded inputs: o, the final state ht and the gradients of <o, do> + <ht, dht> onto the inputs and
    the initial state (dq ... dw, dh0). Returns {"rel_l2": {name: error}, "thresholds", "finite", "passed"}."""
    if not isinstance(inputs, (tuple, list)) or len(inputs) != 6:     # a seventh would replace the initial state
        got = f"{len(inputs)} items" if isinstance(inputs, (tuple, list)) else type(inputs).__name__
        raise ValueError(f"inputs must be the six tensors (q, k, v, g, b, w) that baseline_inputs returns, got {got}")
    validate_inputs(*inputs)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    q, v = inputs[0], inputs[2]
    (B, T, H, K), V = q.shape, v.shape[-1]
    gen = torch.Generator(device=q.device).manual_seed(seed)
    S0 = 0.1 * torch.randn(B, H, K, V, device=q.device, generator=gen)
    do = torch.randn(B, T, H, V, device=q.device, generator=gen).to(q.dtype)
    dht = torch.randn(B, H, K, V, device=q.device, generator=gen)

    def outputs_and_grads(fn, tensors):
        leaves = [x.detach().clone().requires_grad_() for x in tensors]
        o, ht = fn(*leaves[:6], initial_state=leaves[6], output_final_state=True)
        return (o, ht, *torch.autograd.grad([o, ht], leaves, [do.to(o.dtype), dht.to(ht.dtype)]))

    ours = outputs_and_grads(gdn2edu.chunk_gdn2, (*inputs, S0))
    ref = outputs_and_grads(functools.partial(gdn2edu.chunk_gdn2_explicit, backward="rewy"),
                            [x.double() for x in (*inputs, S0)])
    rel_l2 = {name: ((x.double() - r).norm() / r.norm()).item() for name, x, r in zip(CHECK_THRESHOLDS, ours, ref)}
    finite = all(bool(torch.isfinite(x).all()) for x in ours)
    return {"rel_l2": rel_l2, "thresholds": dict(CHECK_THRESHOLDS), "finite": finite,
            "passed": finite and all(rel_l2[name] < limit for name, limit in CHECK_THRESHOLDS.items())}


STANDARD_SHAPES = ((1, 8192, 16), (4, 2048, 16), (8, 1024, 16), (2, 8192, 16))   # (B, T, H), K = V = 128
CPU_SHAPES = ((1, 256, 2),)                                                        # with K = V = 64
CHECK_SHAPES = STANDARD_SHAPES[:2]                                                 # the GPU's checks


def parse_shapes(text):
    """'1x8192x16,4x2048x16' -> ((1, 8192, 16), (4, 2048, 16)): comma-separated BxTxH with positive ints."""
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"shapes must be comma-separated BxTxH of positive ints, e.g. 1x8192x16; got {item!r}")
        shapes.append(tuple(int(p) for p in parts))
    return tuple(shapes)


def _int_list(text):
    values = [int(x) for x in text.split(",") if x.strip()]
    if not values or min(values) <= 0:
        raise ValueError(f"expected comma-separated positive ints, got {text!r}")
    return values


def package_commit():
    """The git commit of the checkout gdn2edu is imported from, with "+modified" appended where the package's
    files differ from it (uncommitted edits or new files, or a newer tree copied beside an older .git, as on a
    machine the tree was sent to): such a record's code is no commit's, and kernel_history refuses to compare it.
    "unknown" where there is no git (an installed package). Reads git without taking its locks."""
    where = dict(capture_output=True, text=True, timeout=30, cwd=Path(gdn2edu.__file__).resolve().parent, check=True,
                 env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], **where).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--", "."], **where).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + "+modified" if changed.strip() else head


def provenance(device, commit=None, argv=(), program="python -m gdn2edu.bench"):
    """Where and with what a result was measured: device name, driver, torch, triton, FLA, date, commit (None:
    package_commit(); pass the commit of the code under test where the checkout's git cannot tell it), and the
    command (``program`` and its arguments argv)."""
    import triton
    gpu = torch.device(device).type == "cuda"
    driver = None
    if gpu:
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            driver = None
    if commit is None:
        commit = package_commit()
    try:
        fla = importlib.metadata.version("fla-core")
    except importlib.metadata.PackageNotFoundError:
        fla = None
    return {"device": torch.cuda.get_device_name(device) if gpu else (platform.processor() or platform.machine()),
            "device_type": "cuda" if gpu else "cpu", "driver": driver, "torch": torch.__version__,
            "triton": triton.__version__, "fla": fla, "commit": commit,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([program, *argv])}


def gpu_record(tool, commit, argv, **fields):
    """The start of a GPU tool's JSON record: its provenance (the program "python tools/<tool>" with argv, None:
    sys.argv's) and ``fields``; a SystemExit naming the tool, before any work, where no GPU is here."""
    if not torch.cuda.is_available():
        raise SystemExit(f"{tool} times kernels on a GPU; none is here")
    return {"provenance": provenance("cuda", commit, sys.argv[1:] if argv is None else argv,
                                     program=f"python tools/{tool}"), **fields}


class _OutOfTime(BaseException):          # not caught by libraries' "except Exception"
    pass


def _alarm(signum, frame):
    raise _OutOfTime()


def _run_step(step, seconds):
    """Run step(), interrupted after ``seconds`` (SIGALRM, where the platform and thread allow it)."""
    armed = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if armed:
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        step()
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
PARTS = ("checks", "ceilings", "forward", "decode", "breakdown", "backward_breakdown", "scaling", "launches")
CEILINGS_LIMIT_S = 60        # the ceilings' own time limit (a second or so on a GPU): they run past the budget


def build_parser():
    """The command line of ``python -m gdn2edu.bench``."""
    p = argparse.ArgumentParser(
        prog="python -m gdn2edu.bench",
        description="Check GDN2's chunked forward/backward against float64 and time it, the decode steps and the "
                    "per-kernel breakdowns on this device; write a table to stdout and, with --out, a JSON file "
                    "with the provenance. Exit status 1 when a check did not pass.")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shapes", help="comma-separated BxTxH (default: 1x8192x16,4x2048x16,8x1024x16,2x8192x16 "
                                    "on a GPU, the first two for the checks; 1x256x2 on the CPU)")
    p.add_argument("--K", type=int, help="key head dim (default 128 on a GPU, 64 on the CPU)")
    p.add_argument("--V", type=int, help="value head dim (default as K)")
    p.add_argument("--dtype", default="bf16", choices=sorted(_DTYPES))
    p.add_argument("--fp32-dot", choices=chunk_kernels.FLOAT32_DOTS,
                   help="input_precision of our kernels' products with float32 inputs, for this run (default: "
                        f"chunk_kernels.FLOAT32_DOT, {chunk_kernels.FLOAT32_DOT!r} as shipped)")
    p.add_argument("--fp32-intermediates", action="store_true",
                   help="keep our kernels' intermediates in float32 for bf16 and fp16 inputs too, for this run "
                        "(chunk_kernels.LOW_PRECISION_INTERMEDIATES off; shipped: on)")
    p.add_argument("--impls", help="chunked implementations to time, in this order, from "
                                   f"{','.join(IMPLEMENTATIONS)} (default: all on a GPU; no torch_compile on the CPU)")
    p.add_argument("--parts", help=f"what to measure, from {','.join(PARTS)} and "
                                   f"{','.join(EXTENSION_PARTS) or 'none'} (default: {','.join(PARTS)} on a GPU; "
                                   "on the CPU all but checks, which run our kernels in Triton's interpreter, "
                                   "seconds per shape, where no Triton kernel is timed)")
    p.add_argument("--decode-batches", default=None, help="batch sizes of the decode step (default 1,64,256; CPU 1)")
    p.add_argument("--decode-impls", default="gdn2edu,fla,torch", help="decode steps to time (default: %(default)s)")
    p.add_argument("--scaling-tokens", type=int, default=16384, help="B*T held fixed in the T sweep")
    p.add_argument("--scaling-T", default="256,1024,4096,16384", help="T values of the sweep at fixed B*T")
    p.add_argument("--scaling-bh-T", type=int, default=2048, help="T of the sweep over B*H")
    p.add_argument("--scaling-batches", default="1,2,4,8,16", help="B values of the sweep over B*H (H from the "
                                                                    "first shape)")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warmup, ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms")
    p.add_argument("--budget", type=float, default=420.0, help="seconds after which no new measurement starts")
    p.add_argument("--grace", type=float, default=60.0,
                   help="a measurement still running at budget + grace seconds is interrupted")
    p.add_argument("--compile-timeout", type=float, default=120.0,
                   help="seconds allowed for one torch.compile measurement (compile included)")
    p.add_argument("--out", type=Path, help="JSON file to write (rewritten after every measurement)")
    p.add_argument("--commit", help="git commit of the measured code (default: package_commit(), git's HEAD, "
                        "+modified if the package differs from it)")
    p.add_argument("--processes", type=int, default=1,
                   help="run the benchmark in this many separate processes, one after the other, each with the "
                        "whole --budget (not split), and write one JSON with each result and medians over them")
    p.add_argument("--warmup-process", action=argparse.BooleanOptionalAction, default=False,
                   help="run one more process first (FLA's compile cache fills); its rows are kept, marked as "
                        "the warm-up's, and left out of the summary")
    p.add_argument("--process-timeout", type=float,
                   help="seconds one process may take with --processes (default budget + grace + 120)")
    return p



def _choices(text, allowed, what):
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise ValueError(f"{what} must be comma-separated values from {allowed}, got {text!r}")
    return items


def _progress(done, total, elapsed, label):
    """One line of progress on stderr: a bar, the step count, the seconds spent and what runs now."""
    width = 20
    filled = width * done // max(total, 1)
    print(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {elapsed:5.0f} s  {label}",
          file=sys.stderr, flush=True)


def _status(err):
    return f"failed: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"


def plan_benchmark(args, result):
    """The measurements as a list of (label, step, time limit or None); each step adds its rows to result."""
    device, dtype = args.device, _DTYPES[args.dtype]
    gpu = torch.device(device).type == "cuda"
    K = args.K or (128 if gpu else 64)
    V = args.V or K
    shapes = parse_shapes(args.shapes) if args.shapes is not None else (STANDARD_SHAPES if gpu else CPU_SHAPES)
    impls = _choices(args.impls or ",".join(x for x in IMPLEMENTATIONS if gpu or x != "torch_compile"),
                     IMPLEMENTATIONS, "--impls")
    parts = _choices(args.parts or ",".join(x for x in PARTS if gpu or x != "checks"), PARTS + tuple(EXTENSION_PARTS),
                     "--parts")
    batches = _int_list(args.decode_batches or ("1,64,256" if gpu else "1"))
    decoders = _choices(args.decode_impls, ("gdn2edu", "fla", "torch"), "--decode-impls")
    scaling_T = _int_list(args.scaling_T)
    if any(args.scaling_tokens % T for T in scaling_T):
        raise ValueError(f"every --scaling-T must divide --scaling-tokens {args.scaling_tokens}, got {scaling_T}")
    result["settings"] = {"device": device, "dtype": args.dtype, "K": K, "V": V, "shapes": shapes, "impls": impls,
                          "parts": parts, "warmup_ms": args.warmup, "rep_ms": args.rep, "budget_s": args.budget,
                          "fp32_dot": args.fp32_dot or chunk_kernels.FLOAT32_DOT,
                          "low_precision_intermediates": (chunk_kernels.LOW_PRECISION_INTERMEDIATES
                                                          and not args.fp32_intermediates),
                          "fuse_output": chunk_kernels.FUSE_OUTPUT,
                          "fused_scan_stages": chunk_kernels.FUSED_SCAN_STAGES,
                          # whether the scans took their tiles by tensor descriptor at K, V in this dtype
                          "scan_by_descriptor": chunk_kernels._scan_by_descriptor(
                              chunk_kernels._plan(*baseline_inputs(1, 64, 1, K, V, dtype=dtype, device=device),
                                                  None, None, None), torch.device(device)),
                          "tiles": {**{name: dict(getattr(chunk_kernels, name)) for name in FORWARD_TILE_TABLES},
                                    **{name: dict(table) for name, table in BACKWARD_TILE_TABLES.items()}}}
    cache = {}

    def inputs(B, T, H):
        if (B, T, H) not in cache:
            cache.clear()                                  # one shape's inputs at a time
            cache[(B, T, H)] = baseline_inputs(B, T, H, K, V, dtype=dtype, device=device)
        return cache[(B, T, H)]

    steps, compile_steps = [], []          # torch.compile steps go last: their compiles may eat the budget
    for B, T, H in (shapes if args.shapes is not None or not gpu else CHECK_SHAPES) if "checks" in parts else ():
        def step(B=B, T=T, H=H):             # first: what follows times the code checked here
            row = {"B": B, "T": T, "H": H, "K": K, "V": V, "dtype": args.dtype, "passed": None,
                   "status": "interrupted: did not finish in its time limit"}      # until it finishes
            result["checks"].append(row)
            if not gpu and dtype == torch.bfloat16:
                row.update(passed=None, status="needs a GPU (the Triton interpreter's bf16 products are wrong; "
                                                "fp16 and fp32 check here)")
                return
            try:
                row.update(check_chunk(inputs(B, T, H)), status="ok")
            except Exception as err:          # out of memory, a kernel that fails: a check that did not pass
                row.update(passed=False, status=_status(err))
        steps.append((f"checks {B}x{T}x{H}", step, None))
    built = {}

    def implementation(name):
        """The chunked implementation called name, built once per run (a string where it cannot run here)."""
        if name not in built:
            built[name] = chunk_implementation(name, device)
        return built[name]

    def add_step(label, step, name):
        """Plan the step of implementation name: torch.compile's go last, each under --compile-timeout."""
        if name == "torch_compile":
            compile_steps.append((label, step, args.compile_timeout))
        else:
            steps.append((label, step, None))

    for B, T, H in shapes if "forward" in parts else ():
        for name in impls:
            def step(B=B, T=T, H=H, name=name):
                row = {"B": B, "T": T, "H": H, "K": K, "V": V, "impl": name}
                result["forward"].append(row)
                fn = implementation(name)
                if isinstance(fn, str):
                    row["status"] = fn
                    return
                try:
                    row.update(time_forward_backward(fn, inputs(B, T, H), args.warmup, args.rep), status="ok")
                except _OutOfTime:
                    row["status"] = "failed: did not finish in its time limit"
                    if name == "torch_compile":
                        built[name] = "skipped: torch.compile did not finish in time at an earlier shape"
                    raise
                except Exception as err:       # compile errors, out of memory: report and go on
                    row["status"] = _status(err)
            add_step(f"forward {B}x{T}x{H} {name}", step, name)
    for batch in batches if "decode" in parts else ():
        H = shapes[0][2]
        for name in decoders:
            def step(batch=batch, H=H, name=name):
                row = {"B": batch, "T": 1, "H": H, "K": K, "V": V, "impl": name}
                result["decode"].append(row)
                fn = decode_implementation(name, device)
                if isinstance(fn, str):
                    row["status"] = fn
                    return
                x = baseline_inputs(batch, 1, H, K, V, dtype=dtype, seed=2, device=device)
                state = 0.1 * torch.randn(batch, H, K, V, device=device)
                try:
                    row.update(ms=measure_ms(lambda: fn(*x, state), args.warmup, args.rep), status="ok")
                except Exception as err:
                    row["status"] = _status(err)
            steps.append((f"decode B={batch} {name}", step, None))
    kernel_rows = []
    for key in ("breakdown", "backward_breakdown"):
        kernel_rows += [(key, shape) for shape in shapes if key in parts]
    if "scaling" in parts:
        H = shapes[0][2]
        kernel_rows += [("scaling_T", (args.scaling_tokens // T, T, H)) for T in scaling_T]
        kernel_rows += [("scaling_BH", (B, args.scaling_bh_T, H)) for B in _int_list(args.scaling_batches)]
    for key, (B, T, H) in kernel_rows:
        def step(key=key, B=B, T=T, H=H):
            row = {"B": B, "T": T, "H": H, "K": K, "V": V}
            result[key].append(row)
            backward = key == "backward_breakdown"
            if not gpu:
                row["status"] = f"needs a GPU (per-kernel times of the Triton {'backward' if backward else 'forward'})"
                return
            try:
                x = inputs(B, T, H)
                call = backward_call(*x) if backward else lambda: gdn2edu.chunk_gdn2(*x)
                row["kernels_ms"] = kernel_split(call, BACKWARD_KERNELS if backward else FORWARD_KERNELS)
                row.update(ms=measure_ms(call, args.warmup, args.rep), status="ok")
            except Exception as err:
                row["status"] = _status(err)
        steps.append((f"{key} {B}x{T}x{H}", step, None))
    for B, T, H in shapes if "launches" in parts else ():
        for name in impls:                   # every kernel a forward launches, by name: ours and FLA's alike
            def step(B=B, T=T, H=H, name=name):
                row = {"B": B, "T": T, "H": H, "K": K, "V": V, "impl": name}
                result["launches"].append(row)
                fn = implementation(name)
                if isinstance(fn, str) or not gpu:
                    row["status"] = fn if isinstance(fn, str) else "needs a GPU (the profiler's kernel times)"
                    return
                try:
                    x = inputs(B, T, H)
                    row.update(kernels_ms=kernel_times(lambda: fn(*x)), status="ok")
                except _OutOfTime:
                    row["status"] = "failed: did not finish in its time limit"
                    raise
                except Exception as err:
                    row["status"] = _status(err)
            add_step(f"launches {B}x{T}x{H} {name}", step, name)
    for name in parts:
        if name in EXTENSION_PARTS:
            result[name] = []
            steps += EXTENSION_PARTS[name](args, result)
    # the ceilings after every timing: their matmul, the GPU at full power, slowed whatever was timed next (the
    # section "Ceilings last" reads the records); past the budget too (run_benchmark), as the roofline needs them
    ceilings = [("ceilings", lambda: result.update(ceilings=measure_ceilings(device, args.warmup, args.rep)),
                 CEILINGS_LIMIT_S)]
    return steps + compile_steps + (ceilings if "ceilings" in parts else [])


def run_benchmark(argv=None):
    """Parse the command line, measure within the budget, write --out after every step; return the result dict.
    With --processes N > 1 or --warmup-process, run_processes measures in child processes instead."""
    args = build_parser().parse_args(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    if args.processes < 1:
        raise ValueError(f"--processes must be at least 1, got {args.processes}")
    if args.process_timeout is not None and args.process_timeout <= 0:
        raise ValueError(f"--process-timeout must be positive seconds, got {args.process_timeout}")
    if args.processes > 1 or args.warmup_process:
        return run_processes(args, argv)
    start = time.monotonic()
    result = {"provenance": provenance(args.device, args.commit, argv), "checks": [], "ceilings": None,
              "forward": [], "decode": [], "breakdown": [], "backward_breakdown": [], "scaling_T": [],
              "scaling_BH": [], "launches": [], "skipped": []}
    steps = plan_benchmark(args, result)

    def save():
        result["elapsed_s"] = time.monotonic() - start
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")

    # this run's settings of Chapter 9's module while the steps run, the shipped ones after
    with chunk_kernels.kernel_settings(FLOAT32_DOT=result["settings"]["fp32_dot"],
                                       LOW_PRECISION_INTERMEDIATES=result["settings"]["low_precision_intermediates"]):
        for done, (label, step, limit) in enumerate(steps):
            elapsed = time.monotonic() - start
            late = elapsed > args.budget
            if late and label != "ceilings":                  # the ceilings run last, and even then
                result["skipped"].append(label)
                continue
            _progress(done, len(steps), elapsed, label)
            hard = args.budget + args.grace - elapsed
            try:
                _run_step(step, limit if late else hard if limit is None else min(limit, hard))
            except _OutOfTime:
                result["skipped"].append(f"{label} (interrupted)")
            save()
    _progress(len(steps), len(steps), time.monotonic() - start, "done")
    save()
    return result


# the like-for-like pairs (ours, FLA's) whose ratios the book states
LIKE_PAIRS = {"default": ("gdn2edu", "fla"), "safe_gate": ("gdn2edu_safe", "fla_safe")}
RATIO_PARTS = (("fwd_ms", "fla/ours"), ("bwd_ms", "fla/ours"), ("peak_mib", "ours/fla"), ("fwd_gpu_ms", "fla/ours"),
               ("bwd_gpu_ms", "fla/ours"))
TIME_PARTS = ("fwd_ms", "bwd_ms", "fwdbwd_ms", "fwd_gpu_ms", "bwd_gpu_ms", "fwd_host_ms", "bwd_host_ms")


def _spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "count": len(values),
            "values": values}


def summarize_processes(results):
    """Medians over processes. results: a list of bench results (one --out each) or of a combined file's
    "processes" entries (a failed child's finished rows count; one that wrote nothing is passed over).
    Returns {"ratios": [...], "times": [...]}: one record per (part, shape, pair of LIKE_PAIRS) — FLA/ours for
    the times, ours/FLA for peak_mib (RATIO_PARTS) — and per (impl, shape, part of TIME_PARTS), each with median,
    min, max, count and the values in order, and "rows": "forward" (the operator) or the EXTENSION_PARTS name."""
    if not isinstance(results, (list, tuple)):
        raise ValueError(f"results must be a list of bench results or of \"processes\" entries, "
                         f"got {type(results).__name__}")
    ratios, times = {}, {}
    for i, item in enumerate(results):
        run = item.get("result") if isinstance(item, dict) and "result" in item else item
        if run is None:
            continue
        if not isinstance(run, dict) or "forward" not in run:
            raise ValueError(f"results[{i}] must be a bench result (with \"forward\" rows) or a \"processes\" "
                             f"entry, got a {type(run).__name__} without \"forward\"")
        rows = {(r["impl"], key, r["B"], r["T"], r["H"], r["K"], r["V"]): r
                for key in ("forward", *EXTENSION_PARTS) for r in run.get(key, []) if r.get("status") == "ok"}
        for (impl, *shape), row in rows.items():
            for part in TIME_PARTS:
                if row.get(part) is not None:
                    times.setdefault((impl, *shape, part), []).append(row[part])
        for pair, (ours, fla) in LIKE_PAIRS.items():
            for (impl, *shape), a in rows.items():
                b = rows.get((fla, *shape))
                if impl != ours or b is None:
                    continue
                for part, ratio in RATIO_PARTS:
                    num, den = (b, a) if ratio == "fla/ours" else (a, b)
                    if num.get(part) is not None and den.get(part):
                        ratios.setdefault((part, *shape, pair), []).append(num[part] / den[part])
    fields = ("rows", *"BTHKV")
    return {"ratios": [{"part": part, **dict(zip(fields, shape)), "pair": pair, "ours": LIKE_PAIRS[pair][0],
                        "fla": LIKE_PAIRS[pair][1], "ratio": dict(RATIO_PARTS)[part], **_spread(v)}
                       for (part, *shape, pair), v in ratios.items()],
            "times": [{"impl": impl, **dict(zip(fields, shape)), "part": part, **_spread(v)}
                      for (impl, *shape, part), v in times.items()]}


def forward_rows(summary, part, key, name):
    """{(B, T, H): record} of a summary of summarize_processes: its operator's forward rows (fwd_ms) of one pair
    (part "ratios", key "pair") or one implementation (part "times", key "impl")."""
    if (part, key) not in (("ratios", "pair"), ("times", "impl")):
        raise ValueError(f"part and key must be ('ratios', 'pair') or ('times', 'impl'), got ({part!r}, {key!r})")
    return {(r["B"], r["T"], r["H"]): r for r in summary[part]
            if r["rows"] == "forward" and r["part"] == "fwd_ms" and r[key] == name}


def _medians_by(processes, part, key_of):
    """{key_of(row): {kernel: median ms over processes}} of the rows of ``part`` in a combined file's "processes"
    entries, kernels in the first process's order. Every process must hold an "ok" row for every key that any
    holds, with the same kernels: else a ValueError that names the process, the row or the kernels."""
    rows = [{key_of(r): r for r in (entry.get("result") or {}).get(part, [])} for entry in processes]
    keys = list(dict.fromkeys(key for run in rows for key in run))
    if not keys:
        raise ValueError(f"the processes hold no {part!r} rows")
    medians = {}
    for key in keys:
        for i, run in enumerate(rows):
            if run.get(key, {}).get("status") != "ok":
                raise ValueError(f"process {i} has no 'ok' {part!r} row for {key}")
        runs = [run[key]["kernels_ms"] for run in rows]
        partial = sorted(set().union(*runs) - set.intersection(*map(set, runs)))
        if partial:
            raise ValueError(f"{key}: kernels not seen by every process: {partial}")
        medians[key] = {name: statistics.median(k[name] for k in runs) for name in runs[0]}
    return medians


def launch_medians(processes):
    """Per implementation and shape, every kernel's median time over processes from the "launches" rows of a
    combined file's "processes" entries: {(impl, B, T, H): {kernel name: median ms}}, the slowest kernel first.
    Gaps are ValueErrors, as in _medians_by."""
    medians = _medians_by(processes, "launches", lambda r: (r["impl"], r["B"], r["T"], r["H"]))
    return {key: dict(sorted(times.items(), key=lambda item: -item[1])) for key, times in medians.items()}


def kernel_medians(processes, part):
    """Our kernels' medians over processes of one breakdown part ("breakdown" or "backward_breakdown") of a combined
    file's "processes" entries: {(B, T, H): {kernel: median ms}}. Gaps are ValueErrors, as in _medians_by."""
    if part not in ("breakdown", "backward_breakdown"):
        raise ValueError(f"part must be 'breakdown' or 'backward_breakdown', got {part!r}")
    return _medians_by(processes, part, lambda r: (r["B"], r["T"], r["H"]))


def warmup_outcome(warmup):
    """What a combined file's warm-up process ("warmup_process") did, for the chapters that quote it: a dict with
    "finished" (it exited on its own), "stopped_during" (the measurement its time budget or time limit cut short,
    or None: also where the budget ran out between two measurements), "skipped" (the measurements it left out;
    empty after a time limit, which leaves no list) and "text", a phrase that says so. An entry that is not a
    warm-up's is a ValueError."""
    if not isinstance(warmup, dict) or warmup.get("role") != "warm-up":
        role = warmup.get("role") if isinstance(warmup, dict) else type(warmup).__name__
        raise ValueError(f"warmup is not a warm-up process entry (a dict with role 'warm-up'), got {role!r}")
    if warmup["status"] == "ok":
        skipped = warmup["result"]["skipped"]          # an interrupted measurement can only be the first
        if any(x.endswith(" (interrupted)") for x in skipped[1:]):
            raise ValueError(f"warmup's skipped measurements have an interrupted one after the first: {skipped!r}")
        cut = bool(skipped) and skipped[0].endswith(" (interrupted)")
        stopped = skipped[0].removesuffix(" (interrupted)") if cut else None
        text = ("finished" if not skipped else
                f"finished, but {stopped} ran past its time limit and was cut short, and it skipped "
                f"{len(skipped)} of its measurements" if cut else
                f"finished, but its time budget ran out before {skipped[0]} and it skipped {len(skipped)} of its "
                f"measurements")
        return {"finished": True, "stopped_during": stopped, "skipped": skipped, "text": text}
    if warmup["status"].startswith("failed: did not finish"):
        tail = (warmup.get("stderr_tail") or "").strip().splitlines()
        stopped = tail[-1].split("  ")[-1].strip() if tail else None        # its last progress line
        text = "ran out of its time limit" + (f" (its progress stopped at {stopped})" if stopped else "")
        return {"finished": False, "stopped_during": stopped, "skipped": [], "text": text}
    raise ValueError(f"warmup has an unexpected warm-up status {warmup['status']!r}: expected 'ok' or "
                     "'failed: did not finish ...'")


def _run_child(command, out, limit, env):
    """Run one child benchmark; return its entry: status, exit code, seconds, stderr's tail, result (or None)."""
    start = time.monotonic()
    entry = {"status": "ok", "returncode": None, "elapsed_s": None, "stderr_tail": None, "result": None}
    try:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                                 start_new_session=hasattr(os, "killpg"))
    except OSError as err:
        entry["status"] = _status(err)
        return entry
    try:
        _, err_text = child.communicate(timeout=limit)
        if child.returncode != 0:
            entry["status"] = f"failed: exit status {child.returncode}"
    except subprocess.TimeoutExpired:
        if hasattr(os, "killpg"):
            os.killpg(child.pid, signal.SIGKILL)           # the child's own session: it and its workers
        else:
            child.kill()
        _, err_text = child.communicate()
        entry["status"] = f"failed: did not finish in its time limit of {limit:g} s"
    entry.update(returncode=child.returncode, elapsed_s=time.monotonic() - start)
    if entry["status"] != "ok":
        entry["stderr_tail"] = (err_text or "")[-2000:]
    if out.exists():                                       # a killed child keeps what it measured
        try:
            entry["result"] = json.loads(out.read_text())
        except ValueError as err:
            entry["status"] += f"; its output was not JSON ({err})"
    return entry


def package_env():
    """This process's environment with this package's root first on PYTHONPATH, for a child process that is to
    import the gdn2edu measured here."""
    package_root = str(Path(gdn2edu.__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(x for x in (package_root, os.environ.get("PYTHONPATH")) if x)}


def run_processes(args, argv):
    """The benchmark in args.processes child processes, one after the other (after a discarded warm-up child
    with --warmup-process), each with the whole --budget; write one JSON after every child with the provenance,
    the settings, every child's entry under "processes" and summarize_processes over them; return it."""
    limit = args.process_timeout or args.budget + args.grace + 120.0
    start = time.monotonic()
    combined = {"provenance": provenance(args.device, args.commit, argv), "settings": {}, "warmup_process": None,
                "processes": [], "summary": summarize_processes([])}
    plan_benchmark(args, combined)                         # validates the arguments and fills the settings
    combined["settings"].update(processes=args.processes, warmup_process=args.warmup_process,
                                process_timeout_s=limit, budget="per process")
    env = package_env()                                    # the children measure this package
    roles = ["warm-up"] * args.warmup_process + ["measured"] * args.processes
    with tempfile.TemporaryDirectory() as tmp:
        for n, role in enumerate(roles):
            out = Path(tmp) / f"process{n}.json"
            command = [sys.executable, "-m", "gdn2edu.bench", *argv, "--processes", "1", "--no-warmup-process",
                       "--commit", combined["provenance"]["commit"], "--out", str(out)]
            entry = {"role": role, **_run_child(command, out, limit, env)}
            print(f"process {n + 1}/{len(roles)} ({role}): {entry['status']} after {entry['elapsed_s'] or 0:.0f} s "
                  f"({time.monotonic() - start:.0f} s in all)", file=sys.stderr, flush=True)
            if role == "warm-up":
                combined["warmup_process"] = entry
            else:
                combined["processes"].append(entry)
                combined["summary"] = summarize_processes(combined["processes"])
            combined["elapsed_s"] = time.monotonic() - start
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(combined, indent=1) + "\n")
    return combined


def _fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def _provenance_line(prov):
    return (f"{prov['device']} ({prov['device_type']}), driver {prov['driver']}, torch {prov['torch']}, "
            f"triton {prov['triton']}, FLA {prov['fla']}, {prov['date']}, commit {prov['commit'][:12]}")


def format_tables(result):
    """The result of run_benchmark (or its JSON) as plain-text tables."""
    prov, lines = result["provenance"], []
    lines.append(_provenance_line(prov))
    if result.get("checks"):
        lines += ["", f"{'checks B x T x H':>22} {'dtype':>5} " + " ".join(f"{name:>7}" for name in CHECK_THRESHOLDS)
                  + "  passed"]
        for r in result["checks"]:
            errors = " ".join(f"{r['rel_l2'][name]:7.1e}" for name in CHECK_THRESHOLDS) if "rel_l2" in r else ""
            lines.append(f"{r['B']:>12}x{r['T']:>5}x{r['H']:<3} {r['dtype']:>5} {errors}  {r['passed']}"
                         + ("" if r["status"] == "ok" else f" ({r['status']})"))
    c = result.get("ceilings")
    if c:
        lines.append(f"ceilings: copy {c['copy_bytes_per_s'] / 1e12:.3f} TB/s (read + write), "
                     f"{c['matmul_dtype']} matmul {c['matmul_flops_per_s'] / 1e12:.1f} TFLOP/s")
    for key in ("forward", *EXTENSION_PARTS):
        if not result.get(key):
            continue
        lines += ["", f"{key + ' B x T x H':>22} {'impl':>14} {'fwd ms':>9} {'bwd ms':>9} {'fwd+bwd':>9} "
                      f"{'peak MiB':>9} {'fwd GPU':>9} {'bwd GPU':>9} {'fwd host':>9}  status"]
        for r in result[key]:
            status = r["status"] if r["status"] != "ok" else ("ok" if r["backward"] == "ok" else
                                                               "backward " + r["backward"])
            lines.append(f"{r['B']:>12}x{r['T']:>5}x{r['H']:<3} {r['impl']:>14} {_fmt(r.get('fwd_ms')):>9} "
                         f"{_fmt(r.get('bwd_ms')):>9} {_fmt(r.get('fwdbwd_ms')):>9} "
                         f"{_fmt(r.get('peak_mib'), '.0f'):>9} {_fmt(r.get('fwd_gpu_ms')):>9} "
                         f"{_fmt(r.get('bwd_gpu_ms')):>9} {_fmt(r.get('fwd_host_ms')):>9}  {status}")
    if result["decode"]:
        lines += ["", f"{'decode B':>14} {'impl':>14} {'ms':>9}  status"]
        for r in result["decode"]:
            lines.append(f"{r['B']:>14} {r['impl']:>14} {_fmt(r.get('ms'), '.4f'):>9}  {r['status']}")
    for key, kernels in (("breakdown", FORWARD_KERNELS), ("backward_breakdown", BACKWARD_KERNELS),
                         ("scaling_T", FORWARD_KERNELS), ("scaling_BH", FORWARD_KERNELS)):
        if result.get(key):                                # runs recorded before a part existed lack it
            lines += ["", f"{key + ' B x T x H':>28} " + " ".join(f"{k:>8}" for k in (*kernels, "other"))
                      + f" {'total ms':>9}"]
            for r in result[key]:
                shape = f"{r['B']:>6}x{r['T']:>6}x{r['H']:<3}"
                if r.get("status") != "ok":
                    lines.append(f"{shape:>28} {r.get('status')}")
                    continue
                lines.append(f"{shape:>28} " + " ".join(f"{ms:8.3f}" for ms in r["kernels_ms"].values())
                             + f" {r['ms']:9.3f}")
    for r in result.get("launches", []):
        lines += ["", f"launches {r['B']}x{r['T']}x{r['H']} {r['impl']}: {r['status']}"]
        lines += [f"{ms:10.4f} ms  {name}" for name, ms in r.get("kernels_ms", {}).items()]
    if result["skipped"]:
        lines += ["", "not measured, or interrupted (budget or time limit spent): " + "; ".join(result["skipped"])]
    return "\n".join(lines)


def format_summary(combined):
    """A combined result of run_processes as plain-text tables: each process's status, the ratios, the times."""
    lines = [_provenance_line(combined["provenance"])]
    warm = combined["warmup_process"]
    entries = ([("warm-up", warm)] if warm else []) + [(f"process {i + 1}", e)
                                                       for i, e in enumerate(combined["processes"])]
    for name, e in entries:
        checks = (e["result"] or {}).get("checks", [])
        lines.append(f"{name:>10}: {e['status']} ({_fmt(e['elapsed_s'], '.0f')} s)" + (
            f", checks passed {sum(r['passed'] is True for r in checks)} of {len(checks)}" if checks else ""))
    ratios, times = combined["summary"]["ratios"], combined["summary"]["times"]
    if ratios:
        lines += ["", f"{'rows':>8} {'part':>10} {'pair':>9} {'B x T x H':>14} {'ratio':>8} {'median':>7} {'min':>7} "
                      f"{'max':>7}  n"]
        lines += [f"{r['rows']:>8} {r['part']:>10} {r['pair']:>9} {r['B']:>4}x{r['T']:>5}x{r['H']:<3} {r['ratio']:>8} "
                  f"{r['median']:7.3f} {r['min']:7.3f} {r['max']:7.3f}  {r['count']}" for r in ratios]
    if times:
        lines += ["", f"{'rows':>8} {'impl':>14} {'B x T x H':>14} {'part':>11} {'median ms':>9} {'min':>9} "
                      f"{'max':>9}  n"]
        lines += [f"{r['rows']:>8} {r['impl']:>14} {r['B']:>4}x{r['T']:>5}x{r['H']:<3} {r['part']:>11} "
                  f"{r['median']:9.3f} {r['min']:9.3f} {r['max']:9.3f}  {r['count']}" for r in times]
    return "\n".join(lines)


def failed_checks(result):
    """The "checks" rows that did not pass, in a result of run_benchmark or in any child's of run_processes:
    failed or interrupted; a row that needs a GPU to run at all is neither passed nor failed."""
    if "processes" in result:
        runs = [e["result"] for e in (result["warmup_process"], *result["processes"]) if e and e["result"]]
    else:
        runs = [result]
    return [r for run in runs for r in run.get("checks", [])
            if r["passed"] is not True and not r["status"].startswith("needs a GPU")]


def main(argv=None):
    """``python -m gdn2edu.bench``: run the benchmark, print the tables (with --processes, the summary's);
    exit status 0; 1 when a "checks" row did not pass (here or in any child process, the warm-up's included)
    or when --processes ran and no measured child finished; 2 on bad arguments."""
    parser = build_parser()
    try:
        result = run_benchmark(argv)
    except ValueError as err:
        parser.error(str(err))
    print(format_summary(result) if "processes" in result else format_tables(result))
    failed = failed_checks(result)
    for r in failed:
        print(f"check failed: {r['B']}x{r['T']}x{r['H']} {r['dtype']}: {r['status']}, finite {r.get('finite')}, "
              f"relative L2 {r.get('rel_l2')} against {r.get('thresholds')}", file=sys.stderr)
    no_child = "processes" in result and not any(p["status"] == "ok" for p in result["processes"])
    return 1 if failed or no_child else 0


if __name__ == "__main__" and "ipykernel" not in sys.modules:   # a script, not this cell in a notebook
    sys.exit(main())
