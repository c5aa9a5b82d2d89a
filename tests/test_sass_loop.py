"""tools/sass_loop.py: the longest loop of a disassembly, and the command line on a real compile (sm_90, no GPU).

The tool compiles (it turns the interpreter off when it starts), so it runs in a child process here, as Chapter
9 runs it; its pure parts are checked in a child too, on a made-up disassembly."""

import json
import subprocess
import sys

SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0020*/                   ISETP.GE.AND P0, PT, R2, 0x4, PT ;
.L_x_1:
        /*0030*/                   FADD R3, R3, R4 ;
        /*0040*/              @!P0 BRA `(.L_x_1) ;
        /*0050*/                   FMUL R3, R3, R5 ;
        /*0060*/               @P0 BRA `(.L_x_0) ;
        /*0070*/                   BRA `(.L_x_2) ;
.L_x_2:
        /*0080*/                   EXIT ;
"""

SCAN = dict(H=16, K=128, V=128, BT=64, BK=128, BV=16, USE_INITIAL_STATE=False, STORE_FINAL_STATE=False,
            STORE_STATES=False, WRITE_OUTPUT=True, DOT="tf32")


def run_tool(root, *args):
    return subprocess.run([sys.executable, "tools/sass_loop.py", *args], cwd=root, capture_output=True, text=True)


def test_longest_loop_takes_the_longest_backward_branch(root):
    code = ("import json, sys; sys.path.insert(0, 'tools'); from sass_loop import longest_loop; "
            f"print(json.dumps([longest_loop({SASS!r}), longest_loop('')]))")
    run = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    (everything, loop), (nothing, no_loop) = json.loads(run.stdout)
    assert everything == ["MOV", "IADD3", "ISETP", "FADD", "BRA", "FMUL", "BRA", "BRA", "EXIT"]
    # the outer loop, from .L_x_0 to its branch (the inner one is shorter, the forward branch no loop)
    assert loop == ["IADD3", "ISETP", "FADD", "BRA", "FMUL", "BRA"]
    assert nothing == [] and no_loop == []


def test_scan_step_is_counted_for_hopper(root):
    run = run_tool(root, "--kernel", "chunk_gdn2_fwd_scan_kernel", "--constexprs", json.dumps(SCAN),
                   "--bf16", "AE,AZ,KG,h,R,QG,Aqk,o", "--arch", "sm_90")
    assert run.returncode == 0, run.stderr[-3000:]
    step = json.loads(run.stdout)
    assert step["kernel"] == "chunk_gdn2_fwd_scan_kernel" and step["arch"] == "sm_90"
    assert 0 < step["loop_instructions"] < step["instructions"]
    assert sum(step["loop_opcodes"].values()) == step["loop_instructions"]
    # the chunk step's three products on Hopper's warpgroup tensor cores (AE S, Q_g S + Aqk R, kg^T R)
    assert step["loop_opcodes"].get("HGMMA", 0) > 0


def test_bad_arguments_are_named(root):
    bad_json = run_tool(root, "--kernel", "chunk_gdn2_fwd_scan_kernel", "--constexprs", "{H: 16}")
    assert bad_json.returncode == 2 and "--constexprs must be a JSON object" in bad_json.stderr
    missing = run_tool(root, "--kernel", "no_such_kernel", "--constexprs", "{}")
    assert missing.returncode != 0 and "has no @triton.jit function 'no_such_kernel'" in missing.stderr
    bad_pointer = run_tool(root, "--kernel", "chunk_gdn2_fwd_scan_kernel", "--constexprs", json.dumps(SCAN),
                           "--bf16", "AE,nope")
    assert bad_pointer.returncode == 2 and "['nope']" in bad_pointer.stderr
