"""The options of tools/hopper_compile_check.py that narrow what it compiles (--arch, --dim, --kernels) and
choose the float32 launches' product precision (--fp32-dot), and the record it writes (--out), on one small
kernel so that it takes seconds.

Chapter 11 runs the tool this way to show what IEEE float32 products compile to; a bad option must stop it
with an error that names the option, and a selection that compiles nothing must not pass."""

import json
import re
import subprocess
import sys

import pytest

TOOL = "tools/hopper_compile_check.py"
KERNEL = "chunk_gdn2_fwd_output_kernel"       # one float32 and one bf16 launch, each compiled in about a second


def run_tool(root, *args):
    return subprocess.run([sys.executable, TOOL, *args], cwd=root, capture_output=True, text=True, timeout=300)


def run_code(root, code, timeout=300):
    """Run Python ``code`` in a fresh process at the repository root (the tool sets TRITON_INTERPRET when it is
    imported); its stdout, after asserting that it exited cleanly."""
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_a_subset_compiles_only_what_was_asked(root):
    result = run_tool(root, "--registers", "--arch", "sm_90", "--dim", "128", "--kernels", KERNEL,
                      "--fp32-dot", "tf32")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines[0] == "sm_90, K = V = 128:" and len(lines) == 3, result.stdout
    assert lines[1].startswith(f"ok   {KERNEL} (float32, dot tf32, ") and "REG:" in lines[1], lines[1]
    assert lines[2].startswith(f"ok   {KERNEL} (bf16, dot tf32, ") and "STACK:" in lines[2], lines[2]


def test_launches_take_the_float32_precision(root):
    """launches() uses chunk_kernels.FLOAT32_DOT unless given another, which leaves the module's setting as it
    was; 16-bit launches keep tf32."""
    code = ("import sys; sys.path.insert(0, 'tools'); import hopper_compile_check as h; "
            "from gdn2edu import chunk_kernels as ck\n"
            "print(ck.FLOAT32_DOT)\n"
            "for dot in (None, 'ieee'):\n"
            "    got = {(bool(bf16), c['DOT']) for _, c, _, _, bf16 in h.launches(128, 128, dot) if 'DOT' in c}\n"
            "    print(sorted(got) == [(False, dot or ck.FLOAT32_DOT), (True, 'tf32')], ck.FLOAT32_DOT)")
    stdout = run_code(root, code)
    shipped, *rest = stdout.split()
    assert shipped != "ieee" and rest == ["True", shipped, "True", shipped], stdout


@pytest.mark.parametrize("option, value", [("--kernels", "chunk_gdn2_fwd_nothing_kernel"),
                                           ("--kernels", f"{KERNEL},nothing"), ("--fp32-dot", "tf16"),
                                           ("--arch", "sm_70"), ("--dim", "64"), ("--tile", "INTRA_TILES.BK"),
                                           ("--tile", "NO_TILES.BK=16"), ("--tile", "INTRA_TILES.width=16"),
                                           ("--tile", "MID_LIMIT.BK=16"), ("--tile", "WY_TILES.maxnreg=168"),
                                           ("--tile", "INTRA_TILES.maxnreg=0"), ("--tile", "INTRA_TILES.maxnreg=256")])
def test_unknown_values_are_refused_by_name(root, option, value):
    result = run_tool(root, option, value)
    assert result.returncode == 2 and f"argument {option}" in result.stderr, result.stderr[-3000:]
    assert "ok" not in result.stdout


def test_a_selection_that_compiles_nothing_fails(root):
    """The short convolution's tiles do not depend on the head dim, so it is compiled at K = 128 only: at 256
    there is nothing to compile."""
    result = run_tool(root, "--arch", "sm_89", "--dim", "256", "--kernels", "short_conv_fwd_kernel")
    assert result.returncode == 1 and "nothing compiled" in result.stdout, result.stdout + result.stderr[-3000:]


def test_aligned_pointers_change_what_is_compiled(root):
    """--aligned compiles with 16-byte-aligned pointers, as a launch on torch tensors specializes them: loads and
    stores may then be vectorized, so the binaries differ from the unaligned build's (here: in registers or
    stack), and both still compile."""
    usage = []
    for extra in ((), ("--aligned",)):
        result = run_tool(root, "--registers", "--arch", "sm_90", "--dim", "128", "--kernels", KERNEL, *extra)
        assert result.returncode == 0, result.stdout + result.stderr[-3000:]
        usage.append([line.split("REG:")[1] for line in result.stdout.splitlines() if "REG:" in line])
    assert len(usage[0]) == len(usage[1]) == 2 and usage[0] != usage[1], usage


def test_out_records_each_launch_with_provenance(root, tmp_path):
    """--out writes every compiled launch with its registers and stack, and the provenance of the record."""
    out = tmp_path / "record.json"
    result = run_tool(root, "--arch", "sm_90", "--dim", "128", "--kernels", KERNEL, "--aligned", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert {"commit", "triton", "torch", "date", "command"} <= set(record["provenance"]), record["provenance"]
    assert record["aligned"] and record["dims"] == [128] and list(record["targets"]) == ["sm_90"]
    launches = record["launches"]
    assert [x["inputs"] for x in launches] == ["float32", "bf16"], launches
    assert all(x["ok"] and x["kernel"] == KERNEL and x["arch"] == "sm_90" and x["K"] == 128 for x in launches)
    assert all(isinstance(x["registers"], int) and isinstance(x["stack"], int) for x in launches), launches


def test_the_float16_check_launches_are_labelled_as_such(root):
    """The intra kernel's third pair of launches compiles float16's operand check on bf16 pointers: its label
    says so, and the bf16 pair keeps "bf16"."""
    code = ("import sys; sys.path.insert(0, 'tools'); import hopper_compile_check as h\n"
            "print(sorted(h.inputs_label(c, bf16) for k, c, _, _, bf16 in h.launches(128, 128)\n"
            "             if k.fn.__name__ == 'chunk_gdn2_fwd_intra_kernel'))")
    stdout = run_code(root, code)
    assert stdout.strip() == str(sorted(["float32", "bf16", "float16 check on bf16 pointers"] * 2))


def test_a_tile_setting_is_compiled_and_recorded(root, tmp_path):
    """--tile TABLE.KEY=VALUE compiles with that entry changed and records the tables compiled; the launch's
    constexprs carry the value."""
    out = tmp_path / "record.json"
    result = run_tool(root, "--arch", "sm_90", "--dim", "128", "--kernels", KERNEL, "--tile", "OUTPUT_TILES.BV=32",
                      "--tile", "OUTPUT_TILES.num_warps=2", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["tiles"]["OUTPUT_TILES"] == {"BV": 32, "num_warps": 2}, record["tiles"]
    assert "BWD_WY_TILES" in record["tiles"] and "INTRA_TILES" in record["tiles"]
    assert all(x["constexprs"]["BV"] == 32 and x["num_warps"] == 2 for x in record["launches"]), record["launches"]


def test_the_16_bit_pointer_lists_follow_the_stored_types(root):
    """The package stores Aqk in the intermediates' type and A in float32 (an interpreter run with float16
    inputs says so): the 16-bit launches of Aqk's writer (intra) and its readers (the forward scan that
    writes the output, the output kernel, the reverse scan) take it as a 16-bit pointer, and none takes A."""
    stored = ("import os; os.environ['TRITON_INTERPRET'] = '1'\n"
              "import torch; from gdn2edu import chunk_kernels as ck\n"
              "x = [torch.rand(1, 64, 1, 16).half() for _ in range(6)]\n"
              "f = ck._intra_states(x[0], x[1], -x[3].float(), x[4], ck._plan(*x, None, None, None, False, None))\n"
              "print(f['Aqk'].dtype, f['A'].dtype)")
    pointers = ("import sys; sys.path.insert(0, 'tools'); import hopper_compile_check as h\n"
                "for k, c, _, _, bf16 in h.launches(128, 128):\n"
                "    if 'Aqk' in [p.name for p in k.params] and bf16:\n"
                "        print(k.fn.__name__, 'Aqk' in bf16, 'A' in bf16)")
    stored_out, pointers_out = (run_code(root, code) for code in (stored, pointers))
    assert stored_out.split() == ["torch.float16", "torch.float32"], stored_out
    lines = set(pointers_out.splitlines())
    readers = ("chunk_gdn2_fwd_scan_kernel", "chunk_gdn2_fwd_output_kernel", "chunk_gdn2_bwd_scan_kernel")
    assert lines == {f"{name} True False" for name in ("chunk_gdn2_fwd_intra_kernel", *readers)}, lines


def test_tile_settings_are_restored_after_main(root):
    """main, called in-process with --tile, compiles with the setting and puts the shipped table back after."""
    code = ("import sys; sys.path.insert(0, 'tools'); import hopper_compile_check as h\n"
            "from gdn2edu import chunk_kernels as ck\n"
            "shipped = dict(ck.OUTPUT_TILES)\n"
            f"status = h.main(['--arch', 'sm_90', '--dim', '128', '--kernels', '{KERNEL}', '--tile', 'OUTPUT_TILES.BV=32'])\n"
            "print(status, ck.OUTPUT_TILES == shipped, shipped['BV'] != 32)")
    stdout = run_code(root, code)
    assert stdout.splitlines()[-1] == "0 True True", stdout


def test_a_register_cap_on_the_intra_kernel_is_compiled_recorded_and_removed_after(root, tmp_path):
    """INTRA_TILES may carry "maxnreg", which the intra launch hands to Triton: --tile INTRA_TILES.maxnreg=N
    compiles every intra launch within N registers and records N (the last of two given), and main leaves the
    table without the key."""
    out = tmp_path / "capped.json"
    code = ("import sys; sys.path.insert(0, 'tools'); import hopper_compile_check as h\n"
            "from gdn2edu import chunk_kernels as ck\n"
            "status = h.main(['--arch', 'sm_90', '--dim', '128', '--kernels', 'chunk_gdn2_fwd_intra_kernel', "
            f"'--aligned', '--tile', 'INTRA_TILES.maxnreg=200', '--tile', 'INTRA_TILES.maxnreg=168', '--out', "
            f"'{out}'])\n"
            "print(status, 'maxnreg' in ck.INTRA_TILES)")
    stdout = run_code(root, code, timeout=600)
    assert stdout.splitlines()[-1] == "0 False", stdout
    record = json.loads(out.read_text())
    assert record["tiles"]["INTRA_TILES"]["maxnreg"] == 168
    assert len(record["launches"]) == 6 and all(x["maxnreg"] == 168 and 0 < x["registers"] <= 168
                                                for x in record["launches"]), record["launches"]


@pytest.mark.parametrize("K", [128, 256])
def test_the_forward_scan_is_compiled_as_chunk_gdn2_launches_it(root, K):
    """launches() must mirror the host code: the 16-bit forward scan's key block, warps and stages as _scan_states
    passes them (one stage past K = 128), in its three forms (states without the output, both, the output
    without states), on a GPU without tensor descriptors and on one with them, read from a fake kernel that
    records the launches."""
    code = ("import os; os.environ['TRITON_INTERPRET'] = '1'\n"
            "import sys; sys.path.insert(0, 'tools'); import torch\n"
            "import hopper_compile_check as h\n"
            "from gdn2edu import chunk_kernels as ck\n"
            "seen = []\n"
            "class Fake:\n"
            "    def __getitem__(self, grid):\n"
            "        return lambda *a, **kw: seen.append(kw)\n"
            "ck.chunk_gdn2_fwd_scan_kernel = Fake()\n"
            "os.environ['TRITON_INTERPRET'] = '1'      # the tool turns it off to compile; _plan asks for it\n"
            f"K = {K}\n"
            "x = [torch.rand(1, 64, 1, K).half() for _ in range(6)]\n"
            "p = ck._plan(*x, None, None, None, False, None)\n"
            "f = dict(AE=x[0], AZ=x[2], KG=x[1], GN=torch.rand(1, 1, K))\n"
            "ck._with_descriptor_scratch = lambda launch, device: launch()\n"
            "for descriptors in (False, True):    # a GPU without tensor descriptors, and one with\n"
            "    ck._has_descriptors = lambda device: descriptors\n"
            "    ck._scan_states(f, None, False, p)\n"
            "    ck._scan_states(dict(f, QG=x[0], Aqk=x[0]), None, False, p, o=x[2])\n"
            "    ck._scan_states(dict(f, QG=x[0], Aqk=x[0]), None, False, p, o=x[2], store_states=False)\n"
            "flags = lambda c: (c['STORE_STATES'], c['WRITE_OUTPUT'], c['BY_DESCRIPTOR'])\n"
            "launch = [(c['BK'], *flags(c), w, s) for d in (False, True) for k, c, w, s, bf16 in h.launches(K, K,\n"
            "          descriptors=d) if k is ck.chunk_gdn2_fwd_scan_kernel and bf16]\n"
            "host = [(kw['BK'], *flags(kw), kw['num_warps'], kw['num_stages']) for kw in seen]\n"
            "print(launch == host and len(host) == 6, launch, host)")
    stdout = run_code(root, code)
    assert stdout.split()[0] == "True", stdout


def test_loads_left_in_loops_follow_the_nesting(root, tmp_path):
    """The TTGIR reader counts a tt.load only inside a loop (an scf.for, either region of an scf.while), through
    nested regions and an else branch; it names the tile (also of a block pointer) or the scalar's type, and the
    source line of the outermost call; unbalanced braces are an error. In a fresh process: importing the tool
    turns the interpreter off."""
    ttgir = "\n".join([
        "tt.func public @k(%arg0: !tt.ptr<f32>) {",
        "  %0 = tt.load %arg0 : !tt.ptr<i32> loc(#loc1)",                          # before any loop: not counted
        "  %1 = scf.for %i = %c0 to %c4 step %c1 iter_args(%a = %z) -> (tensor<64xf32>) : i32 {",
        "    %2 = tt.load %p, %m, %o : tensor<128x!tt.ptr<f32>, #blocked> loc(#loc2)",
        "    %3 = scf.if %c -> (f32) {",
        "      %4 = tt.load %q : !tt.ptr<i32> loc(#loc3)",
        "    } else {",
        "      %5 = \"tt.reduce\"(%x) <{axis = 0 : i32}> ({",
        "      ^bb0(%u: f32, %v: f32):",
        "        tt.reduce.return %u : f32",
        "      }) : (tensor<16xf32>) -> f32",
        "    }",
        "    %6 = ttg.async_copy_global_to_local %r, %s : tensor<64x32x!tt.ptr<bf16>, #b> -> <64x32xbf16>",
        "    scf.yield %a : tensor<64xf32>",
        "  }",
        "  %7 = tt.load %w, %n : tensor<16x16x!tt.ptr<f32>, #blocked> loc(#loc4)",     # after the loop: not counted
        "  %8 = scf.while (%b = %c0) : (i32) -> i32 {",
        "    %9 = tt.load %bp : !tt.ptr<tensor<64x16xbf16, #blocked>> loc(#loc4)",
        "    scf.condition(%t) %b : i32",
        "  } do {",
        "  ^bb0(%e: i32):",
        "    %10 = tt.load %y : !tt.ptr<f32> loc(#loc5)",
        "    scf.yield %e : i32",
        "  }",
        "  tt.return",
        "}",
        '#loc1 = loc("/pkg/k.py":3:1)',
        '#loc2 = loc("b_x"(#loc6))',
        "#loc3 = loc(unknown)",
        "#loc4 = loc(callsite(#loc1 at #loc7))",
        '#loc5 = loc("/pkg/k.py":30:5)',
        '#loc6 = loc("/pkg/k.py":12:9)',
        '#loc7 = loc("/pkg/k.py":20:3)'])
    (tmp_path / "k.ttgir").write_text(ttgir)
    (tmp_path / "bad.ttgir").write_text("  }\n")
    code = ("import sys; sys.path.insert(0, 'tools')\n"
            "from hopper_compile_check import loads_left_in_loops\n"
            f"print(loads_left_in_loops(open({str(tmp_path / 'k.ttgir')!r}).read()))\n"
            "try:\n"
            f"    loads_left_in_loops(open({str(tmp_path / 'bad.ttgir')!r}).read())\n"
            "except ValueError as err:\n"
            "    print(err)\n")
    lines = run_code(root, code).splitlines()
    assert lines[0] == str([("128xf32", "k.py:12"), ("i32", None), ("64x16xbf16", "k.py:20"), ("f32", "k.py:30")])
    assert lines[1].startswith("TTGIR line 1 closes a region that was never opened"), lines


def test_the_forward_scan_leaves_its_gamma_vector_unpipelined(root):
    """--loop-loads on the 16-bit forward scan (as the backward runs it again, and as the forward runs it with
    the output, with the states and without), its pointers aligned as a launch has them, names the one load its loop does not pipeline and
    its source line: the next chunk's gamma_n vector, K = 128 float32, which the loop issues a step ahead (the
    tiles that feed its products are tensor-descriptor copies on sm_90, which take no alignment hints: without
    --aligned it is the same there. On sm_80, masked loads without --aligned leave every 16-bit tile unpipelined."""
    result = run_tool(root, "--loop-loads", "--aligned", "--arch", "sm_90", "--dim", "128", "--kernels",
                      "chunk_gdn2_fwd_scan_kernel")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    bf16 = [line for line in result.stdout.splitlines() if "(bf16," in line]
    assert len(bf16) == 3 and all("WRITE_OUTPUT" in line for line in bf16[1:]), result.stdout
    assert all("BY_DESCRIPTOR" in line for line in bf16), result.stdout
    for line in bf16:
        left = re.search(r"loads left in loops: 1 \(128xf32 at chunk_kernels\.py:(\d+)\)$", line)
        assert left, line
        source = (root / "gdn2edu" / "chunk_kernels.py").read_text().splitlines()[int(left.group(1)) - 1]
        assert "b_gn_next = tl.load(GN" in source, source
    unaligned = run_tool(root, "--loop-loads", "--arch", "sm_90,sm_80", "--dim", "128", "--kernels",
                         "chunk_gdn2_fwd_scan_kernel")
    assert unaligned.returncode == 0, unaligned.stdout + unaligned.stderr[-3000:]
    bf16 = [line for line in unaligned.stdout.splitlines() if "(bf16," in line]
    assert ["BY_DESCRIPTOR" in line for line in bf16] == [True] * 3 + [False] * 3, unaligned.stdout
    left = [line.split("loads left in loops: ")[1].split()[0] for line in bf16]
    assert left == ["1", "1", "1", "4", "6", "6"], unaligned.stdout


def test_the_forward_kernels_wait_for_the_launch_before_on_sm_90(root):
    """On a target with tensor descriptors (sm_90) launches() gives every launch of the forward's intra, WY and
    scan kernels PDL=True, as chunk_kernels._programmatic launches them there, and no other kernel's; each of the
    three compiles its wait, PTX's griddepcontrol.wait (its first bf16 launch at K = V = 128). Without
    descriptors (sm_80) no launch carries PDL."""
    code = ("import sys; sys.path.insert(0, 'tools'); import hopper_compile_check as h\n"
            "import triton\n"
            "print(any('PDL' in c for _, c, _, _, _ in h.launches(128, 128)))\n"
            "compiled = set()\n"
            "for kernel, constexprs, warps, stages, bf16 in h.launches(128, 128, descriptors=True):\n"
            "    name = kernel.fn.__name__\n"
            "    print('launch', name, constexprs.get('PDL', False))\n"
            "    if constexprs.get('PDL') and bf16 and name not in compiled:\n"
            "        compiled.add(name)\n"
            "        binary = triton.compile(triton.compiler.ASTSource(kernel, h.signature(kernel, bf16), constexprs),\n"
            "                                target=h.TARGETS['sm_90'][0],\n"
            "                                options=dict(num_warps=warps, num_stages=stages))\n"
            "        print('wait', name, 'griddepcontrol.wait' in binary.asm['ptx'])\n")
    lines = run_code(root, code, timeout=600).splitlines()
    assert lines[0] == "False", lines[0]                            # no PDL without descriptors
    forward = {f"chunk_gdn2_fwd_{part}_kernel" for part in ("intra", "wy", "scan")}
    launched = [line.split()[1:] for line in lines if line.startswith("launch ")]
    assert {name for name, _ in launched} > forward
    assert all((flag == "True") == (name in forward) for name, flag in launched), launched
    assert sorted(line for line in lines if line.startswith("wait ")) == [f"wait {k} True" for k in sorted(forward)]
