"""The benchmark CLI (python -m gdn2edu.bench), its checks, the per-kernel FLOP and byte counts, and Amdahl's law."""

import json
import os
import statistics
import subprocess
import sys
import time

import pytest
import torch

from gdn2edu import bench, chunk_kernels
from gdn2edu.bench import (CHECK_THRESHOLDS, IMPLEMENTATIONS, amdahl_speedup, forward_kernel_costs, main, parse_shapes,
                           roofline_time_ms, run_benchmark, summarize_processes)
from gdn2edu.kernel_history import FLOAT32_ONLY, changed_in_files


def run_cli(root, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "gdn2edu.bench", *args], cwd=root, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(root)})


def test_help(root):
    result = run_cli(root, "--help")
    assert result.returncode == 0, result.stderr
    for option in ("--shapes", "--budget", "--out", "--warmup", "--rep", "--impls", "--commit", "--processes",
                   "--warmup-process", "--process-timeout", "--fp32-dot", "--fp32-intermediates"):
        assert option in result.stdout
    unwrapped = "".join(result.stdout.split())                       # argparse breaks lines inside words
    assert "backward_breakdown" in unwrapped and "CPUallbutchecks" in unwrapped       # the CPU's default parts


def test_cpu_run_writes_valid_json(root, tmp_path):
    out = tmp_path / "bench.json"
    start = time.monotonic()
    result = run_cli(root, "--device", "cpu", "--shapes", "1x128x2", "--K", "32", "--budget", "10",
                     "--warmup", "5", "--rep", "20", "--impls", "gdn2edu,fla,torch", "--out", str(out))
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-3000:]
    assert elapsed < 60, f"a tiny CPU run took {elapsed:.0f} s"
    data = json.loads(out.read_text())
    prov = data["provenance"]
    for key in ("device", "driver", "torch", "triton", "fla", "date", "commit", "command"):
        assert key in prov
    assert prov["device_type"] == "cpu" and "--shapes 1x128x2" in prov["command"]
    rows = {r["impl"]: r for r in data["forward"]}
    assert rows["gdn2edu"]["status"].startswith("needs a GPU")
    torch_row = rows["torch"]
    assert torch_row["status"] == "ok" and torch_row["backward"] == "ok"       # autograd through PyTorch
    assert all(torch_row[key] > 0 for key in ("fwd_ms", "bwd_ms", "fwdbwd_ms"))
    assert data["ceilings"]["copy_bytes_per_s"] > 0 and data["ceilings"]["matmul_dtype"] == "float32"
    assert any(r["impl"] == "torch" and r["status"] == "ok" and r["ms"] > 0 for r in data["decode"])
    assert "torch" in result.stdout and "fwd ms" in result.stdout                # the table


def test_budget_stops_new_measurements(root, tmp_path):
    out = tmp_path / "bench.json"
    result = run_cli(root, "--device", "cpu", "--shapes", "1x64x1", "--K", "16", "--budget", "0",
                     "--parts", "forward,decode", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(out.read_text())
    cpu_impls = [x for x in IMPLEMENTATIONS if x != "torch_compile"]           # the CPU default, and 3 decoders
    assert data["forward"] == [] and data["decode"] == [] and len(data["skipped"]) == len(cpu_impls) + 3


TINY_CPU_RUN = ("--device", "cpu", "--shapes", "1x128x2", "--K", "32", "--warmup", "2", "--rep", "5",
                "--parts", "forward", "--impls", "torch,gdn2edu")


def test_processes_write_one_combined_file(root, tmp_path):
    out = tmp_path / "bench.json"
    result = run_cli(root, *TINY_CPU_RUN, "--processes", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["settings"]["processes"] == 2 and data["warmup_process"] is None
    assert [p["status"] for p in data["processes"]] == ["ok", "ok"]
    assert all(p["result"]["provenance"]["commit"] == data["provenance"]["commit"] for p in data["processes"])
    assert len([line for line in result.stderr.splitlines() if line.startswith("process ")]) == 2
    times = {(r["impl"], r["part"]): r for r in data["summary"]["times"]}
    assert sorted(times) == [("torch", "bwd_ms"), ("torch", "fwd_ms"), ("torch", "fwdbwd_ms")]   # ours: GPU only
    for r in times.values():
        assert r["count"] == 2 and r["min"] <= r["median"] <= r["max"] and r["median"] == statistics.median(r["values"])
    assert data["summary"]["ratios"] == []          # no pair of LIKE_PAIRS runs on a CPU
    assert "torch" in result.stdout and "median ms" in result.stdout


def test_processes_past_their_time_are_recorded(root, tmp_path):
    out = tmp_path / "bench.json"
    result = run_cli(root, *TINY_CPU_RUN, "--processes", "2", "--warmup-process", "--process-timeout", "0.2",
                     "--out", str(out))
    assert result.returncode == 1, result.stderr[-3000:]          # no measured process finished
    data = json.loads(out.read_text())
    entries = [data["warmup_process"], *data["processes"]]
    assert [e["role"] for e in entries] == ["warm-up", "measured", "measured"]
    assert all(e["status"] == "failed: did not finish in its time limit of 0.2 s" for e in entries)
    assert data["summary"] == {"ratios": [], "times": []}


def test_processes_must_be_positive():
    with pytest.raises(ValueError, match="--processes must be at least 1, got 0"):
        run_benchmark(["--device", "cpu", "--processes", "0"])
    with pytest.raises(ValueError, match="^results must be a list"):
        summarize_processes({"processes": []})


def test_summary_of_the_recorded_gate_path_runs(root):
    """The earlier like-for-like session (three old-layout runs at af1363c), which Chapters 9 and 10 set beside
    the harness record: every median is the median of the per-process ratios read straight from the rows, and
    they say what the chapters state of that session."""
    runs = [json.loads(f.read_text()) for f in sorted((root / "results").glob("h200_gate_paths_run*.json"))]
    assert len(runs) == 3
    summary = summarize_processes(runs)
    assert len(summary["ratios"]) == 3 * 2 * 4             # fwd, bwd, memory x two pairs x four shapes
    medians = {}
    for r in summary["ratios"]:
        rows = [{x["impl"]: x for x in run["forward"] if (x["B"], x["T"], x["H"]) == (r["B"], r["T"], r["H"])}
                for run in runs]
        num, den = (r["ours"], r["fla"]) if r["part"] == "peak_mib" else (r["fla"], r["ours"])
        by_hand = [x[num][r["part"]] / x[den][r["part"]] for x in rows]
        assert r["count"] == 3 and r["values"] == by_hand
        assert r["median"] == statistics.median(r["values"]) and (r["min"], r["max"]) == (min(by_hand), max(by_hand))
        medians[(r["part"], r["pair"], r["B"], r["T"], r["H"])] = r["median"]
    default_fwd = {key[2:]: m for key, m in medians.items() if key[:2] == ("fwd_ms", "default")}
    assert len(default_fwd) == 4 and [s for s, m in default_fwd.items() if m < 1] == [(2, 8192, 16)]   # Chapter 9
    assert 1.0 <= default_fwd[(1, 8192, 16)] < 1.1
    assert min(m for key, m in medians.items() if key[:2] == ("bwd_ms", "default")) >= 1.5             # Chapter 10
    assert max(m for key, m in medians.items() if key[0] == "peak_mib") <= 1.0
    times = {(r["impl"], r["part"], r["B"], r["T"], r["H"]): r for r in summary["times"]}
    assert times[("gdn2edu", "fwd_ms", 2, 8192, 16)]["count"] == 3 and len(times) == 4 * 4 * 3


def test_summary_of_the_harness_record(root):
    """results/h200_bench_harness.json, the like-for-like record Chapters 8-12 read: an H200 run of today's kernels
    (where the git history is at hand), three measured processes after a warm-up, its stored summary is what
    summarize_processes gives on them, every FLA/ours median is the median of the per-process ratios read from the
    rows, and it covers every part of RATIO_PARTS for both gate paths at the four shapes."""
    record = json.loads((root / "results" / "h200_bench_harness.json").read_text())
    assert record["provenance"]["device"] == "NVIDIA H200" and record["settings"]["dtype"] == "bf16"
    assert changed_in_files(record["provenance"]["commit"], "HEAD", ignoring=FLOAT32_ONLY) in (None, set())
    assert record["warmup_process"]["role"] == "warm-up"
    processes = record["processes"]
    assert len(processes) == 3 and all(p["status"] == "ok" and p["role"] == "measured" for p in processes)
    assert summarize_processes(processes) == record["summary"]
    ratios = record["summary"]["ratios"]
    assert {(r["pair"], r["part"]) for r in ratios} == {(pair, part) for pair in ("default", "safe_gate")
                                                      for part, _ in bench.RATIO_PARTS}
    assert len({(r["B"], r["T"], r["H"]) for r in ratios}) == 4 and len(ratios) == 2 * len(bench.RATIO_PARTS) * 4
    for r in ratios:
        rows = [{x["impl"]: x for x in p["result"]["forward"] if (x["B"], x["T"], x["H"]) == (r["B"], r["T"], r["H"])}
                for p in processes]
        num, den = (r["ours"], r["fla"]) if r["part"] == "peak_mib" else (r["fla"], r["ours"])
        by_hand = [x[num][r["part"]] / x[den][r["part"]] for x in rows]
        assert r["count"] == 3 and r["median"] == statistics.median(by_hand)


def test_summary_of_the_gpu_time_record(root):
    """results/h200_bench_harness_gpu_time.json, which Chapter 11's "The host out of the way" reads: three measured
    processes after a warm-up, every queue held, its stored summary is what summarize_processes gives on them, and
    it holds FLA/ours of the GPU times (forward and backward) for both pairs at the four shapes, each the median of
    the per-process ratios read from the rows."""
    record = json.loads((root / "results" / "h200_bench_harness_gpu_time.json").read_text())
    processes = record["processes"]
    assert record["warmup_process"]["role"] == "warm-up" and len(processes) == 3
    assert all(p["status"] == "ok" and p["role"] == "measured" for p in processes)
    assert summarize_processes(processes) == record["summary"]
    rows = [r for p in processes for r in p["result"]["forward"]]
    assert len(rows) == 3 * 4 * 4 and all(r["queue_held"] is True for r in rows)
    gpu = [r for r in record["summary"]["ratios"] if r["part"] in ("fwd_gpu_ms", "bwd_gpu_ms")]
    assert {(r["pair"], r["part"]) for r in gpu} == {(pair, part) for pair in ("default", "safe_gate")
                                                    for part in ("fwd_gpu_ms", "bwd_gpu_ms")} and len(gpu) == 16
    for r in gpu:
        by_hand = [{x["impl"]: x for x in p["result"]["forward"] if (x["B"], x["T"]) == (r["B"], r["T"])}
                   for p in processes]
        assert r["count"] == 3 and r["median"] == statistics.median(x[r["fla"]][r["part"]] / x[r["ours"]][r["part"]]
                                                                     for x in by_hand)


def test_forward_rows_picks_one_pair_or_implementation_of_the_forward(root):
    """bench.forward_rows on the harness record: the default pair's FLA/ours and our own fwd_ms medians at the four
    shapes, each the stored summary's record; a part and key that do not go together are refused by name."""
    summary = json.loads((root / "results" / "h200_bench_harness.json").read_text())["summary"]
    pair, ours = bench.forward_rows(summary, "ratios", "pair", "default"), bench.forward_rows(summary, "times",
                                                                                             "impl", "gdn2edu")
    assert set(pair) == set(ours) and len(ours) == 4
    for (B, T, H), r in pair.items():
        assert (r["part"], r["pair"], r["B"], r["T"], r["H"]) == ("fwd_ms", "default", B, T, H) and r in summary["ratios"]
        assert ours[(B, T, H)]["impl"] == "gdn2edu" and ours[(B, T, H)]["part"] == "fwd_ms"
    with pytest.raises(ValueError, match="part and key must be"):
        bench.forward_rows(summary, "ratios", "impl", "gdn2edu")


TINY_CHECK = ("--device", "cpu", "--parts", "checks", "--shapes", "1x64x1", "--K", "16", "--dtype", "fp32")


def test_checks_pass_near_float32_rounding():
    """Our kernels in the interpreter, fp32, against float64: every error is within 1e-5, about 170 units of
    float32 rounding (2^-24 = 6e-8; sums over a 64-token chunk and K = 16 give a few units times their
    square roots, 2e-7 to 7e-7 here), and 50 times below fp16's (4.9e-4): a stray 16-bit cast or a wrong
    term would fail it. The summary of processes reads no check row."""
    run = run_benchmark(TINY_CHECK)
    (row,) = run["checks"]
    assert row["status"] == "ok" and row["passed"] is True and row["finite"] is True
    assert sorted(row["rel_l2"]) == sorted(CHECK_THRESHOLDS) and row["thresholds"] == CHECK_THRESHOLDS
    assert max(row["rel_l2"].values()) < 1e-5, row["rel_l2"]
    assert summarize_processes([run, run]) == {"ratios": [], "times": []}


def test_fp32_dot_and_intermediates_are_set_for_the_run_recorded_and_restored(monkeypatch):
    """--fp32-dot and --fp32-intermediates set chunk_kernels.FLOAT32_DOT and LOW_PRECISION_INTERMEDIATES while the
    steps run (seen from inside the check), record them in the settings, and put the values from before the run
    back afterwards; without them the run records those values. (The shipped values themselves are pinned, with
    their reasons, in test_chunk_kernels.test_shipped_kernel_settings.)"""
    before = (chunk_kernels.FLOAT32_DOT, chunk_kernels.LOW_PRECISION_INTERMEDIATES)
    assert before != ("tf32x3", False)                     # else "set for the run" and "put back" look alike
    seen, check = [], bench.check_chunk

    def watched(*args, **kwargs):
        seen.append((chunk_kernels.FLOAT32_DOT, chunk_kernels.LOW_PRECISION_INTERMEDIATES))
        return check(*args, **kwargs)

    monkeypatch.setattr(bench, "check_chunk", watched)
    run = run_benchmark([*TINY_CHECK, "--fp32-dot", "tf32x3", "--fp32-intermediates"])
    assert seen == [("tf32x3", False)] and run["checks"][0]["passed"] is True
    assert run["settings"]["fp32_dot"] == "tf32x3" and run["settings"]["low_precision_intermediates"] is False
    assert (chunk_kernels.FLOAT32_DOT, chunk_kernels.LOW_PRECISION_INTERMEDIATES) == before
    plain = run_benchmark(["--device", "cpu", "--parts", "ceilings", "--budget", "1"])["settings"]
    assert (plain["fp32_dot"], plain["low_precision_intermediates"]) == before


def test_bad_fp32_dot_is_refused(root):
    result = run_cli(root, "--device", "cpu", "--fp32-dot", "fast", "--budget", "1")
    assert result.returncode == 2 and "--fp32-dot" in result.stderr


def test_a_failed_check_exits_nonzero(monkeypatch, capsys):
    monkeypatch.setitem(CHECK_THRESHOLDS, "dg", 1e-12)             # below any float32 error
    assert main(TINY_CHECK) == 1
    out, err = capsys.readouterr()
    assert "False" in out and "check failed: 1x64x1 fp32" in err and "'dg': 1e-12" in err


def test_an_interrupted_check_fails_and_the_summary_counts_only_passes():
    """A check cut by its time limit keeps passed None and the "interrupted" status: it is a failure for the
    exit status; the summary line counts passes as True only (a needs-a-GPU row is None, not a failure)."""
    interrupted = {"B": 1, "T": 64, "H": 1, "passed": None, "status": "interrupted: did not finish in its time limit"}
    gpu_only = {**interrupted, "status": "needs a GPU (the Triton interpreter's bf16 products are wrong)"}
    passed = {**interrupted, "passed": True, "status": "ok"}
    assert bench.failed_checks({"checks": [interrupted, gpu_only, passed]}) == [interrupted]
    entry = {"role": "measured", "status": "ok", "elapsed_s": 1.0,
             "result": {"forward": [], "checks": [interrupted, gpu_only, passed]}}
    combined = {"provenance": run_benchmark(["--device", "cpu", "--parts", "layer", "--impls", "fla"])["provenance"],
                "warmup_process": None, "processes": [entry], "summary": {"ratios": [], "times": []}}
    assert "checks passed 1 of 3" in bench.format_summary(combined)


def test_cpu_checks_and_backward_breakdown_say_what_they_need():
    """bf16 is the GPU's to check (the interpreter's bf16 products are wrong): a status row, neither passed nor
    failed, exit status 0; the backward's per-kernel times need a GPU; the backward's tiles are recorded."""
    argv = ["--device", "cpu", "--parts", "checks,backward_breakdown", "--shapes", "1x64x1", "--K", "16"]
    run = run_benchmark(argv)
    (check,) = run["checks"]
    assert check["passed"] is None and check["status"].startswith("needs a GPU")
    (row,) = run["backward_breakdown"]
    assert row["status"] == "needs a GPU (per-kernel times of the Triton backward)"
    assert {"BWD_SCAN_TILES", "BWD_LOCAL_TILES", "BWD_INPUTS_TILES", "SCAN_TILES"} <= set(run["settings"]["tiles"])
    assert main(argv) == 0 and bench.failed_checks(run) == []


SIX = chunk_kernels.baseline_inputs(1, 64, 1, 16, 16, dtype=torch.float32, device="cpu")


@pytest.mark.parametrize("kernels, message", [
    ({}, "kernels must be a non-empty"),
    (["chunk_gdn2_fwd_wy_kernel"], "kernels must be a non-empty"),
    ({"wy": 3}, "kernels must be a non-empty"),
    ({"wy": ""}, "kernels must be a non-empty"),                          # "" is inside every name
    ({"other": "chunk_gdn2_fwd_wy_kernel"}, 'without the short name "other"'),
    ({"scan": "scan", "fwd_scan": "chunk_gdn2_fwd_scan_kernel"}, "none inside another"),
    ({"a": "chunk_gdn2_fwd_wy_kernel", "b": "chunk_gdn2_fwd_wy_kernel"}, "distinct"),
])
def test_kernel_split_refuses_tables_that_would_miscount(kernels, message):
    """Checked before anything runs (so on the CPU too): a table that would count a kernel twice, or make the
    row's "other" ambiguous, is refused by name."""
    calls = []
    with pytest.raises(ValueError, match=message):
        bench.kernel_split(lambda: calls.append(1), kernels)
    assert calls == []


@pytest.mark.parametrize("fn, repeats, message", [(None, 20, "fn must be a function"),
                                                  (lambda: None, 0, "repeats must be a positive int, got 0"),
                                                  (lambda: None, 2.0, "repeats must be a positive int, got 2.0")])
def test_kernel_times_names_fn_and_repeats(fn, repeats, message):
    with pytest.raises(ValueError, match=message):
        bench.kernel_split(fn, bench.FORWARD_KERNELS, repeats)


def test_backward_call_names_its_arguments():
    """validate_inputs' errors, before the leaves are made (an integer tensor cannot require a gradient)."""
    with pytest.raises(ValueError, match="^g must be a floating-point tensor"):
        bench.backward_call(*SIX[:3], SIX[3].long(), *SIX[4:])
    with pytest.raises(ValueError, match="^w must have the shape of v"):
        bench.backward_call(*SIX[:5], SIX[5][:, :32])


@pytest.mark.parametrize("inputs, seed, message", [
    ((*SIX, torch.zeros(1, 1, 16, 16)), 1, r"^inputs must be the six tensors .* got 7 items"),  # not the state
    (SIX[:5], 1, r"^inputs must be the six tensors .* got 5 items"),
    (dict(zip("qkvgbw", SIX)), 1, r"^inputs must be the six tensors .* got dict"),
    ((SIX[0][..., :8], *SIX[1:]), 1, "^k must have the shape of q"),
    (SIX, 1.5, "^seed must be an int, got 1.5"),
])
def test_check_chunk_names_bad_inputs(inputs, seed, message):
    with pytest.raises(ValueError, match=message):
        bench.check_chunk(inputs, seed)


@pytest.mark.parametrize("shapes", ["1x8192", "0x64x2", "1x64xH", "axbxc", ""])
def test_bad_shapes_are_refused(root, shapes):
    with pytest.raises(ValueError, match="BxTxH"):
        parse_shapes(shapes)
    result = run_cli(root, "--device", "cpu", "--shapes", shapes, "--budget", "1")
    assert result.returncode == 2 and "BxTxH" in result.stderr


def test_bad_implementation_name_is_refused(root):
    result = run_cli(root, "--device", "cpu", "--impls", "torch,cudnn", "--budget", "1")
    assert result.returncode == 2 and "--impls" in result.stderr


def test_roofline_counts_equal_hand_counts():
    """B = 1, T = 128, H = 2, K = 32, V = 16, bf16: two chunks per head, four (chunk, head) pairs.
    Each product is listed as it appears in the kernels of Chapter 9, [m, k] x [k, p] -> 2 m k p FLOPs."""
    n, c, K, V, s, units, rows = 64, 16, 32, 16, 2, 4, 256
    # 10 block pairs x 2 scores; the 4 diagonal blocks' merges, 4-row sub-blocks to 8 rows, then to 16, two
    # products each; 16 blocks below the diagonal
    intra = 20 * [(c, K, c)] + 4 * 2 * 2 * [(c, c, c)] + 16 * [(c, c, c)]
    substitution = 4 * 3 * 2 * c * c                       # 4 diagonal blocks, 3 row steps, masked tile FMA
    assert chunk_kernels.SUBSTITUTION_WIDTH == 4           # the width these counts are for
    wy, scan, output = [(n, n, K), (n, n, V)], [(n, K, V), (K, n, V)], [(n, K, V), (n, n, V)]
    flops = {name: units * sum(2 * m * k * p for m, k, p in prods)
             for name, prods in dict(intra=intra, wy=wy, scan=scan, output=output).items()}
    flops["intra"] += units * substitution
    nbytes = {
        # q k b (bf16) and g (fp32) once; the 10 lower 16x16 blocks of A (fp32) and all 16 of Aqk (bf16) stored
        "intra": rows * K * (3 * s + 4) + units * (10 * 256 * 4 + 16 * 256 * s),
        # A's full 64x64 fp32 tile; q k b g; v w; AE kg Q_g AZ stored; gamma_n fp32
        "wy": units * 64 * 64 * 4 + rows * K * (3 * s + 4) + rows * V * 2 * s + rows * (3 * K + V) * s
        + units * K * 4,
        # AE kg AZ read, gamma_n read, R stored, h (K x V per chunk) stored
        "scan": rows * (2 * K + V) * s + units * K * 4 + rows * V * s + units * K * V * s,
        # Q_g, h, R, the Aqk bf16 tile read; o stored
        "output": rows * K * s + units * K * V * s + rows * V * s + units * 64 * 64 * s + rows * V * s,
    }
    costs = forward_kernel_costs(1, 128, 2, K, V)
    assert {name: cost["flops"] for name, cost in costs.items()} == flops
    assert {name: cost["bytes"] for name, cost in costs.items()} == nbytes
    with pytest.raises(ValueError, match="multiple of chunk"):
        forward_kernel_costs(1, 100, 2, K, V)
    with pytest.raises(ValueError, match="H must be"):
        forward_kernel_costs(1, 128, 0, K, V)
    # the scan that writes the output: both kernels' products, listed as it runs them; it reads AE kg AZ
    # gamma_n, Q_g and the Aqk bf16 tile, and stores o, but neither stores nor reads h and R
    fused = forward_kernel_costs(1, 128, 2, K, V, fuse_output=True)
    assert list(fused) == ["intra", "wy", "scan"] and fused["intra"] == costs["intra"] and fused["wy"] == costs["wy"]
    assert fused["scan"]["flops"] == units * sum(2 * m * k * p for m, k, p in scan + output)
    assert fused["scan"]["bytes"] == (rows * (2 * K + V) * s + units * K * 4 + rows * K * s + units * 64 * 64 * s
                                      + rows * V * s)
    with pytest.raises(ValueError, match="fuse_output must be a bool"):
        forward_kernel_costs(1, 128, 2, K, V, fuse_output=1)


def test_roofline_bound():
    assert roofline_time_ms(1e12, 1e6, 1e15, 1e12) == pytest.approx(1.0)     # compute-bound: 1 ms
    assert roofline_time_ms(1e6, 1e9, 1e15, 1e12) == pytest.approx(1.0)      # memory-bound: 1 ms


def test_amdahl():
    assert amdahl_speedup(0.0, 10.0) == 1.0
    assert amdahl_speedup(1.0, 10.0) == pytest.approx(10.0)
    assert amdahl_speedup(0.5, 2.0) == pytest.approx(4 / 3)
    assert amdahl_speedup(0.5, 1e12) == pytest.approx(2.0)                    # the limit 1 / (1 - f)
    with pytest.raises(ValueError, match="f must be"):
        amdahl_speedup(1.5, 2.0)
    with pytest.raises(ValueError, match="s must be"):
        amdahl_speedup(0.5, 0.0)


def test_roofline_rejects_bad_rates():
    with pytest.raises(ValueError, match="^flops_per_s "):
        roofline_time_ms(1e9, 1e6, -1.0, 1e12)
    with pytest.raises(ValueError, match="^nbytes "):
        roofline_time_ms(1e9, -1, 1e12, 1e12)


def test_layer_part_is_registered_and_summarised():
    """Chapter 12 adds the part "layer" to the harness of Chapter 11: its rows (our layer on the CPU, FLA's
    status) land under result["layer"] and the summary keys them as "layer" rows, apart from the operator's."""
    from gdn2edu.bench_parts import EXTENSION_PARTS
    assert "layer" in EXTENSION_PARTS
    run = run_benchmark(["--device", "cpu", "--dtype", "fp32", "--parts", "layer", "--warmup", "1", "--rep", "3"])
    rows = {r["impl"]: r for r in run["layer"]}
    assert sorted(rows) == ["fla", "gdn2edu"] and rows["gdn2edu"]["status"] == "ok"
    assert rows["fla"]["status"] != "ok" and run["forward"] == []
    assert all(rows["gdn2edu"][part] is None for part in ("fwd_gpu_ms", "bwd_gpu_ms", "fwd_host_ms", "bwd_host_ms",
                                                          "queue_held"))      # the host-free times need a GPU
    summary = summarize_processes([run, run])
    assert {(r["rows"], r["impl"], r["part"]) for r in summary["times"]} == {
        ("layer", "gdn2edu", part) for part in ("fwd_ms", "bwd_ms", "fwdbwd_ms")}
    assert all(r["count"] == 2 for r in summary["times"])
    with pytest.raises(ValueError, match="--parts"):
        run_benchmark(["--device", "cpu", "--parts", "layers"])


def test_time_host_and_gpu_fills_one_part_and_ands_the_queues(monkeypatch):
    """time_host_and_gpu: nothing without a flush (the CPU); with one, the part's host and GPU times from
    host_and_gpu_ms, and queue_held true only while every queue so far held."""
    from gdn2edu import bench
    row = {"queue_held": None}
    bench.time_host_and_gpu(row, "fwd", lambda: None, None)
    assert row == {"queue_held": None}
    answers = iter([(1.0, 2.0, True), (3.0, 4.0, False), (5.0, 6.0, True)])
    monkeypatch.setattr(bench, "host_and_gpu_ms", lambda fn, flush: next(answers))
    bench.time_host_and_gpu(row, "fwd", lambda: None, object())
    assert row == {"queue_held": True, "fwd_host_ms": 1.0, "fwd_gpu_ms": 2.0}
    bench.time_host_and_gpu(row, "bwd", lambda: None, object())
    assert row["queue_held"] is False and (row["bwd_host_ms"], row["bwd_gpu_ms"]) == (3.0, 4.0)
    bench.time_host_and_gpu(row, "bwd", lambda: None, object())
    assert row["queue_held"] is False                             # a queue that did not hold stays on record


def test_time_layer_names_its_arguments():
    from gdn2edu.layer_bench import time_layer
    with pytest.raises(ValueError, match="layer must be a torch.nn.Module"):
        time_layer(lambda x: x, torch.randn(1, 4, 8))
    with pytest.raises(ValueError, match=r"x must be a float tensor \[B, T, hidden\]"):
        time_layer(torch.nn.Identity(), torch.randn(4, 8))


def test_kernel_medians_takes_the_median_per_kernel_and_refuses_gaps():
    """kernel_medians: per shape and kernel, the median over the processes; a process without an "ok" row at a
    shape, or an unknown part, is a ValueError."""
    from gdn2edu.bench import kernel_medians

    def process(ms, status="ok"):
        row = {"B": 1, "T": 64, "H": 2, "kernels_ms": {"intra": ms, "wy": 2 * ms}, "status": status}
        return {"result": {"breakdown": [row]}}

    assert kernel_medians([process(1.0), process(3.0), process(2.0)], "breakdown") == {(1, 64, 2): {"intra": 2.0,
                                                                                                    "wy": 4.0}}
    with pytest.raises(ValueError, match="process 1 has no 'ok'"):
        kernel_medians([process(1.0), process(3.0, "failed")], "breakdown")
    with pytest.raises(ValueError, match="process 1 has no 'ok'"):
        kernel_medians([process(1.0), {"result": None}], "breakdown")
    with pytest.raises(ValueError, match="part must be"):
        kernel_medians([process(1.0)], "forward")
    with pytest.raises(ValueError, match="no 'backward_breakdown' rows"):
        kernel_medians([process(1.0)], "backward_breakdown")


def test_launch_medians_takes_each_kernels_median_and_refuses_a_kernel_some_process_missed():
    def process(ms, extra=None, status="ok"):
        kernels = {"a_kernel": ms, "b_kernel": 3 * ms, **(extra or {})}
        return {"result": {"launches": [{"impl": "fla", "B": 1, "T": 64, "H": 2, "kernels_ms": kernels,
                                         "status": status}]}}

    medians = bench.launch_medians([process(1.0), process(3.0), process(2.0)])
    assert medians == {("fla", 1, 64, 2): {"b_kernel": 6.0, "a_kernel": 2.0}}
    assert list(medians[("fla", 1, 64, 2)]) == ["b_kernel", "a_kernel"]          # the slowest first
    with pytest.raises(ValueError, match=r"not seen by every process: \['c_kernel'\]"):
        bench.launch_medians([process(1.0), process(1.0, {"c_kernel": 0.5})])
    with pytest.raises(ValueError, match=r"process 1 has no 'ok' 'launches' row for \('fla', 1, 64, 2\)"):
        bench.launch_medians([process(1.0), process(9.0, status="failed")])
    with pytest.raises(ValueError, match="process 1 has no 'ok'"):
        bench.launch_medians([process(1.0), {"result": None}])
    with pytest.raises(ValueError, match="no 'launches' rows"):
        bench.launch_medians([{"result": None}])


def test_the_launches_part_on_the_cpu_says_it_needs_a_gpu_and_prints():
    run = run_benchmark(["--device", "cpu", "--parts", "launches", "--impls", "torch", "--shapes", "1x64x1"])
    assert [(r["impl"], r["status"]) for r in run["launches"]] == [("torch", "needs a GPU (the profiler's kernel "
                                                                              "times)")]
    assert "launches 1x64x1 torch: needs a GPU" in bench.format_tables(run)


def test_warmup_outcome_reads_each_way_a_warm_up_ends():
    finished = {"role": "warm-up", "status": "ok", "result": {"skipped": []}}
    assert bench.warmup_outcome(finished) == {"finished": True, "stopped_during": None, "skipped": [],
                                              "text": "finished"}
    budget = {"role": "warm-up", "status": "ok",
              "result": {"skipped": ["forward 1x8192x16 fla (interrupted)", "decode B=1 gdn2edu"]}}
    outcome = bench.warmup_outcome(budget)
    assert outcome["finished"] and outcome["stopped_during"] == "forward 1x8192x16 fla"
    assert outcome["text"] == ("finished, but forward 1x8192x16 fla ran past its time limit and was cut short, and "
                               "it skipped 2 of its measurements")
    limit = {"role": "warm-up", "status": "failed: did not finish in its time limit of 250 s", "result": None,
             "stderr_tail": "compiling\n[  12 s]  forward 1x8192x16 fla\n"}
    outcome = bench.warmup_outcome(limit)
    assert not outcome["finished"] and outcome["stopped_during"] == "forward 1x8192x16 fla"
    assert outcome["text"] == "ran out of its time limit (its progress stopped at forward 1x8192x16 fla)"
    assert bench.warmup_outcome(dict(limit, stderr_tail=None))["text"] == "ran out of its time limit"
    with pytest.raises(ValueError, match="not a warm-up"):
        bench.warmup_outcome(dict(finished, role="measured"))
    between = bench.warmup_outcome({"role": "warm-up", "status": "ok",            # out of budget between steps
                                    "result": {"skipped": ["decode B=1 fla", "decode B=64 fla"]}})
    assert between["finished"] and between["stopped_during"] is None
    assert between["text"] == "finished, but its time budget ran out before decode B=1 fla and it skipped 2 of its " \
                              "measurements"
    with pytest.raises(ValueError, match="interrupted one after the first"):
        bench.warmup_outcome({"role": "warm-up", "status": "ok",
                              "result": {"skipped": ["decode B=1 fla", "decode B=64 fla (interrupted)"]}})
    with pytest.raises(ValueError, match="unexpected warm-up status"):
        bench.warmup_outcome(dict(finished, status="crashed"))


def test_warmup_outcome_names_its_argument_on_an_entry_that_is_not_a_dict():
    with pytest.raises(ValueError, match="warmup is not a warm-up process entry.*'NoneType'"):
        bench.warmup_outcome(None)


def test_package_commit_marks_code_that_is_no_commit(tmp_path, monkeypatch):
    """provenance's default commit: git HEAD of the package's checkout; "+modified" where the package's files
    differ from it (a record of such a run names no commit that kernel_history could compare); "unknown" without
    git. A fake package in a fresh repository stands in for gdn2edu's."""
    git = dict(cwd=tmp_path, check=True, capture_output=True)
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("X = 1\n")
    monkeypatch.setattr(bench.gdn2edu, "__file__", str(package / "__init__.py"))
    assert bench.package_commit() == "unknown"                                   # no repository yet
    subprocess.run(["git", "init", "-q"], **git)
    subprocess.run(["git", "add", "."], **git)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one"], **git)
    head = subprocess.run(["git", "rev-parse", "HEAD"], text=True, **git).stdout.strip()
    assert bench.package_commit() == head
    (tmp_path / "beside.txt").write_text("not the package\n")                     # untracked, outside: still clean
    assert bench.package_commit() == head
    (package / "new.py").write_text("Y = 1\n")                                   # a new file in the package
    assert bench.package_commit() == head + "+modified"
    (package / "new.py").unlink()
    (package / "__init__.py").write_text("X = 2\n")
    assert bench.package_commit() == head + "+modified"
    assert bench.provenance("cpu")["commit"] == head + "+modified"
    assert bench.provenance("cpu", commit="abc")["commit"] == "abc"              # the caller's word wins


def test_host_ms_refuses_a_count_that_is_not_a_positive_int():
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="calls must be a positive int"):
            bench.host_ms(lambda: None, bad)
    with pytest.raises(ValueError, match="fn must be a function of no arguments, got NoneType"):
        bench.host_ms(None)


@pytest.mark.parametrize("fn, calls, flush, message", [
    (None, 20, None, "fn must be a function of no arguments, got NoneType"),
    (lambda: None, 0, None, "calls must be a positive int"),
    (lambda: None, 2.0, None, "calls must be a positive int"),
    (lambda: None, True, None, "calls must be a positive int"),
    (lambda: None, 20, "flush", "flush must be None or a function of no arguments, got str")])
def test_queued_gpu_ms_refuses_bad_arguments_by_name(fn, calls, flush, message):
    for timer in (bench.queued_gpu_ms, bench.host_and_gpu_ms):       # the second passes its arguments on
        with pytest.raises(ValueError, match=message):
            timer(fn, calls=calls, flush=flush)


def test_the_ceilings_are_measured_after_every_timing():
    """Their bf16 matmuls at full power slowed whatever was timed next (Chapter 11, "Ceilings last"): however the
    parts are listed, the ceilings step comes last."""
    args = bench.build_parser().parse_args(["--device", "cpu", "--parts", "ceilings,forward,decode,checks",
                                            "--shapes", "1x64x1", "--K", "16", "--impls", "gdn2edu,torch_compile"])
    labels = [label for label, _, _ in bench.plan_benchmark(args, {})]
    assert labels[-1] == "ceilings" and labels.count("ceilings") == 1
    assert "forward 1x64x1 torch_compile" in labels and any(label.startswith("decode") for label in labels)
    args = bench.build_parser().parse_args(["--device", "cpu", "--parts", "forward", "--shapes", "1x64x1"])
    assert "ceilings" not in [label for label, _, _ in bench.plan_benchmark(args, {})]


def test_the_ceilings_run_even_past_the_budget():
    """Last in the order, the ceilings would be the first step a short budget drops, and the roofline needs them:
    with no budget at all every other step is skipped and they are measured."""
    run = run_benchmark(["--device", "cpu", "--parts", "forward,ceilings", "--shapes", "1x64x1", "--K", "16",
                         "--impls", "torch", "--budget", "0", "--warmup", "1", "--rep", "5"])
    assert run["skipped"] == ["forward 1x64x1 torch"] and run["forward"] == []
    assert run["ceilings"]["copy_bytes_per_s"] > 0 and run["ceilings"]["matmul_flops_per_s"] > 0
