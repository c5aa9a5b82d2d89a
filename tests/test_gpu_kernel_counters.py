"""tools/gpu_kernel_counters.py: the parsing of Nsight Compute's CSV details page, its --shape and --variant
options, and its refusal to run without a GPU (the counters themselves need one: Chapter 11 reads the H200
record)."""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_kernel_counters as counters  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(launch, kernel, section, name, unit, value):
    return (f'"{launch}","1","python3","127.0.0.1","{kernel}","1","7","(32, 1, 1)","(128, 16, 1)","0","9.0",'
            f'"{section}","{name}","{unit}","{value}"')


def test_details_are_grouped_per_launch_in_order_with_numbers_parsed():
    text = "\n".join([
        "==PROF== Connected to process 1 (python3)",
        HEADER,
        row(1, "chunk_gdn2_fwd_wy_kernel", "Occupancy", "Theoretical Occupancy", "%", "12.50"),
        row(0, "chunk_gdn2_fwd_intra_kernel", "Launch Statistics", "Grid Size", "", "2,048"),
        row(0, "chunk_gdn2_fwd_intra_kernel", "Launch Statistics", "Registers Per Thread", "register/thread", "255"),
        row(0, "chunk_gdn2_fwd_intra_kernel", "Launch Statistics", "Shared Memory Configuration Size", "Kbyte",
            "16.38"),                                                  # not in METRICS: dropped
        row(1, "chunk_gdn2_fwd_wy_kernel", "Occupancy", "Block Limit Registers", "block", "n/a"),
        row(0, "chunk_gdn2_fwd_intra_kernel", "Command line profiler metrics",
            "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "", "3.25"),
        row(0, "chunk_gdn2_fwd_intra_kernel", "Command line profiler metrics",
            "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "", "1,204.5"),
        row(0, "chunk_gdn2_fwd_intra_kernel", "Command line profiler metrics",
            "smsp__average_warps_issue_stalled_wait_per_warp_active.pct", "%", "9"),   # another metric: dropped
    ])
    launches = counters.parse_details(text)
    assert [x["kernel"] for x in launches] == ["chunk_gdn2_fwd_intra_kernel", "chunk_gdn2_fwd_wy_kernel"]
    assert [x["id"] for x in launches] == [0, 1]
    intra, wy = (x["metrics"] for x in launches)
    assert intra == {"Grid Size": {"unit": "", "value": 2048.0},
                     "Registers Per Thread": {"unit": "register/thread", "value": 255.0}}
    assert wy["Theoretical Occupancy"] == {"unit": "%", "value": 12.5}
    assert wy["Block Limit Registers"]["value"] == "n/a"                 # not a number: kept as printed
    assert launches[0]["stalls"] == {"long_scoreboard": 3.25, "wait": 1204.5} and launches[1]["stalls"] == {}


def test_the_stall_pattern_matches_the_stall_metrics_and_no_other():
    pattern = re.compile(counters.STALL_METRICS.removeprefix("regex:"))
    assert pattern.match("smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio")
    assert not pattern.match("smsp__average_warps_issue_stalled_short_scoreboard_per_issue_activeXratio")
    assert not pattern.match("smsp__average_warps_issue_stalled_wait_per_warp_active.pct")


def test_output_without_a_csv_header_is_an_error():
    with pytest.raises(ValueError, match="no CSV header"):
        counters.parse_details("==PROF== Disconnected from process 1\n")


@pytest.mark.parametrize("text", ["1,8192", "1,8192,0", "a,b,c", "1,2,3,4"])
def test_shape_must_be_three_positive_ints(text):
    with pytest.raises(argparse.ArgumentTypeError, match="three positive ints"):
        counters.shape_arg(text)
    assert counters.shape_arg("2,1024,8") == (2, 1024, 8)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is what a machine without a GPU sees")
def test_without_a_gpu_it_stops_with_a_message(tmp_path):
    result = subprocess.run([sys.executable, "tools/gpu_kernel_counters.py", "--out", str(tmp_path / "x.json")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "needs a CUDA GPU" in result.stderr
    assert not (tmp_path / "x.json").exists()


def test_the_inputs_line_of_the_profiled_process_is_found_or_missed_loudly():
    out = 'compiling\n{"inputs": {"K": 128, "V": 64, "dtype": "bfloat16"}}\n'
    assert counters.target_inputs(out) == {"K": 128, "V": 64, "dtype": "bfloat16"}
    with pytest.raises(ValueError, match="no inputs line"):
        counters.target_inputs("compiling\n")


def test_variants_are_checked_names_of_the_ablation_tool():
    import gpu_intra_ablation as ablation

    for name in counters.COUNTED_VARIANTS:
        assert counters.variant_arg(name) == name
        assert name in ablation.FORWARD_VARIANTS or name in ablation.VARIANTS, name
    with pytest.raises(argparse.ArgumentTypeError, match="expected one of"):
        counters.variant_arg("fused_wy")                 # it drops the WY launch: not the forward's launches
    result = subprocess.run([sys.executable, "tools/gpu_kernel_counters.py", "--variant", "fastest"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "--variant" in result.stderr and "'fastest'" in result.stderr


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_profiled_forward_is_the_variants_and_keeps_the_kernel_names(tmp_path):
    """The target runs the shipped module without --variant, else the variant's own module, whose kernels keep
    their names (ncu picks them by KERNEL_PREFIX); no_check's forward is the shipped one where no chunk is
    flagged (the baseline's gates), bit for bit in the interpreter."""
    from gdn2edu import chunk_kernels

    assert counters.forward_module(None, tmp_path) is chunk_kernels
    module = counters.forward_module("no_check", tmp_path)
    assert module is not chunk_kernels and module.__name__ == "chunk_kernels_no_check"
    assert module.chunk_gdn2_fwd_intra_kernel.fn.__name__.startswith(counters.KERNEL_PREFIX)
    x = chunk_kernels.baseline_inputs(1, 100, 2, K=32, V=32, dtype=torch.float32, device="cpu")
    assert torch.equal(module.chunk_gdn2_fwd(*x)[0], chunk_kernels.chunk_gdn2_fwd(*x)[0])
