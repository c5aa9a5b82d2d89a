"""Compile every Triton kernel of gdn2edu for the GPUs readers meet, on this machine, no GPU needed.

The Triton interpreter that CI uses accepts code the GPU compiler refuses (a reassigned ``tl.constexpr``)
and knows nothing of shared memory. This compiles each kernel with the launch settings of K = V = 128 and
K = V = 256, float32 and bf16 tiles and the tile tables' warps and stages, for Hopper (sm_90: H100, H200),
Colab's A100 (sm_80) and L4 (sm_89), and checks that it fits the shared memory a block may use there. Exit
status 1 if any kernel fails. This Triton may pipeline differently from the one on the GPU (Triton 3.6 on
the H200 asked more for the scans at K = 256 than this check saw): a fit here is necessary, not sufficient.

    python tools/hopper_compile_check.py [--registers] [--loop-loads] [--arch sm_90,...] [--dim 128,...]
                                         [--kernels NAME,...]
                                         [--fp32-dot ieee|tf32x3|tf32] [--aligned] [--out FILE]
                                         [--tile TABLE.KEY=VALUE ...]

``--registers`` also prints each binary's registers per thread and its stack (registers spilled to local memory),
from ``cuobjdump -res-usage``, the tool that ships with Triton. ``--loop-loads`` prints the global loads that a
kernel's loops leave synchronous, with their source lines: in a pipelined loop the compiler turns loads whose
tiles feed products into asynchronous copies issued iterations ahead and issues the others where they stand. Read
it with ``--aligned``: without the alignment a launch has, no 16-bit load becomes an asynchronous copy.
``--arch``, ``--dim`` and ``--kernels`` (kernel function names) narrow what is compiled, each repeatable or a
comma list; the default is everything. ``--aligned`` compiles with every pointer argument known to be 16-byte
aligned, as a launch on torch tensors specializes them (without it, no load or store is vectorized, and the
register counts are those of scalar accesses). ``--fp32-dot`` is the ``input_precision`` of the float32 launches'
products (default: what chunk_gdn2 uses, ``chunk_kernels.FLOAT32_DOT``); the 16-bit launches keep "tf32", their
tensor-core products. Each line names the inputs' type of its launch (float32 or bf16) and the dot precision where
it has one; the intra kernel's launches with float16's operand check compiled in are "float16 check on bf16
pointers" (bf16 pointers stand in for float16 ones there). ``--out FILE`` writes every compiled launch (kernel,
inputs, constexprs, warps, stages, shared memory, registers, stack and loads left in loops) to FILE as JSON, with
the provenance of gdn2edu.bench (the commit is that of the gdn2edu imported: PYTHONPATH may point at a worktree of
an older commit), the targets and the tile tables compiled. ``--tile INTRA_TILES.BK=16`` compiles with one entry
of a tile table changed (repeatable), to compare a setting that is not shipped; ``--tile INTRA_TILES.maxnreg=168``
adds the register cap that the intra kernel's launch reads when its table has one (OPTIONAL_TILE_KEYS).
"""

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ["TRITON_INTERPRET"] = "0"      # before gdn2edu imports triton: compile, do not interpret

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from gdn2edu import chunk_backward_kernels as cb  # noqa: E402
from gdn2edu import chunk_kernels as ck  # noqa: E402
from gdn2edu import fused_recurrent as fr  # noqa: E402
from gdn2edu import gated_norm as gn  # noqa: E402
from gdn2edu import short_conv as sc  # noqa: E402

# the GPUs a reader meets: the H100/H200 (sm_90), Colab's A100 (sm_80) and L4 (sm_89), each with the
# shared memory one block may use (CUDA's "shared memory per block, opt-in")
TARGETS = {"sm_90": (GPUTarget("cuda", 90, 32), 232448), "sm_80": (GPUTarget("cuda", 80, 32), 166912),
           "sm_89": (GPUTarget("cuda", 89, 32), 101376)}
INT_POINTERS = {"cu_seqlens", "chunk_indices", "chunk_offsets", "flags"}
H = 16
# the backward's 16-bit tensors with bf16 inputs: the inputs, their gradients and the stored intermediates
BWD_BF16 = ("q", "k", "v", "b", "w", "do", "QG", "AE", "KG", "dR", "dh", "R", "P", "h", "Aqk", "dA", "dAqk",
            "dv", "dw", "dq", "dk", "db")
# the intra kernel's 16-bit pointers with bf16 q, k, b (g stays float32, as in the benchmark's inputs; A is
# always float32, Aqk is stored in the intermediates' type): the launch that the benchmark times
INTRA_BF16 = ("q", "k", "b", "Aqk")
# the WY kernel's 16-bit pointers: its inputs but g, its 16-bit outputs (not GN and Gc, float32 always)
WY_BF16 = ("q", "k", "v", "b", "w", "AE", "AZ", "KG", "QG")
# the short convolution's 16-bit tensors in a bf16 layer (its partial sums dw, db stay float32)
CONV_BF16 = ("x", "weight", "bias", "state", "y", "dy", "dx", "dstate")
# the output norm's 16-bit tensors in a bf16 layer (rstd and the partial sums dw stay float32)
NORM_BF16 = ("x", "gate", "weight", "y", "dy", "dx", "dgate")
# the L2 normalisation's 16-bit tensors with bf16 q, k (rstd stays float32)
L2_BF16 = ("x", "y", "dy", "dx")


def signature(kernel, bf16=()):
    """Argument types for ASTSource: float32 tensors (bf16 for the names in ``bf16``), int32 maps, float32
    scale and eps, int32 lengths T and N."""
    types = {}
    for param in kernel.params:
        if param.is_constexpr:
            types[param.name] = "constexpr"
        elif param.name in ("scale", "eps"):
            types[param.name] = "fp32"
        elif param.name in ("T", "N"):
            types[param.name] = "i32"
        else:
            types[param.name] = ("*i32" if param.name in INT_POINTERS else
                                 "*bf16" if param.name in bf16 else "*fp32")
    return types


def launches(K, V, fp32_dot=None, shared_memory=None, descriptors=False):
    """(kernel, constexprs, num_warps, num_stages, bf16 pointers) as the host code launches them at
    K, V: float32 inputs, and for the scans and the backward also bf16 inputs with their 16-bit
    intermediates; the layer's short convolution (D = H * K, W = 4) at K = 128 only; the output norm at D = V;
    the L2 normalisation of q, k at D = K.
    The float32 launches' products use ``fp32_dot`` (None: chunk_kernels.FLOAT32_DOT), the bf16 ones "tf32";
    ``shared_memory``, a block's bytes on the target (None: a Hopper's), picks the stages that depend on it;
    ``descriptors``: the target has tensor descriptors (sm_90), where the forward scan loads through them as
    _scan_by_descriptor has it (K and V of both launches' tiles are multiples of 16 bytes), and the forward's
    kernels launch programmatically (chunk_kernels._programmatic: compute capability 9 or more)."""
    f32 = ck.FLOAT32_DOT if fp32_dot is None else fp32_dot
    intra, wy, scan, out = ck.INTRA_TILES, ck.WY_TILES, ck.SCAN_TILES, ck.OUTPUT_TILES
    # a package older than BWD_WY_TILES (an older commit on PYTHONPATH) recomputed WY with the forward's tiles
    bscan, blocal, binputs = cb.BWD_SCAN_TILES, cb.BWD_LOCAL_TILES, cb.BWD_INPUTS_TILES
    bwy = getattr(cb, "BWD_WY_TILES", wy)
    # the forward scan's forms (STORE_STATES, WRITE_OUTPUT, stages): a package older than the scan that writes
    # the output launched one, without those flags
    fused = getattr(ck, "_fused_scan_stages", None)
    scan_forms = ((True, False, scan["num_stages"]),) + (
        ((True, True, fused(shared_memory)), (False, True, fused(shared_memory))) if fused else ())
    conv = sc.CONV_TILES
    # both scans' value blocks; "auto" picks at most 64, which is what it picks without a GPU: the largest tiles
    scan_bv, fscan_bv = (ck._scan_value_block(t["BV"], 1, H, V, torch.device("cpu")) for t in (bscan, scan))
    fused_bv = min(V, max(8, 2048 // K))
    # a package older than the scan by descriptors (an older commit on PYTHONPATH) had no such flag
    by_descriptor = dict(BY_DESCRIPTOR=descriptors and ck.SCAN_BY_DESCRIPTOR) if hasattr(ck, "SCAN_BY_DESCRIPTOR") \
        else {}
    # a package older than the blocked inverse had no substitution width
    substitution = dict(SUB=ck.SUBSTITUTION_WIDTH) if hasattr(ck, "SUBSTITUTION_WIDTH") else {}
    # the intra kernel's modes: safe_gate's and the checked one; a package older than PROGRAMMATIC_LAUNCH launched
    # the checked mode 1 and then mode 2 on the flagged chunks (its mode 0, safe_gate's, is not compiled there)
    intra_modes = (0, 1) if hasattr(ck, "PROGRAMMATIC_LAUNCH") else (1, 2)
    # on a target with descriptors (sm_90) the forward's three kernels also wait for the launch before
    pdl = dict(PDL=True) if descriptors and getattr(ck, "PROGRAMMATIC_LAUNCH", False) else {}
    return [
        # the intra kernel as float32 and bf16 inputs launch it, and with float16's operand check (OPERAND_LIMIT
        # below MID_LIMIT compiles the check in; bf16 pointers stand in for float16 ones)
        *((ck.chunk_gdn2_fwd_intra_kernel, dict(H=H, K=K, BT=64, BC=16, BK=intra["BK"], MODE=mode,
                                                MID_LIMIT=ck.MID_LIMIT, OPERAND_LIMIT=ck._operand_limit(store),
                                                DOT=dot, **substitution, **pdl),
           intra["num_warps"], intra["num_stages"], pointers)
          for dot, pointers, store in ((f32, (), torch.float32), ("tf32", INTRA_BF16, torch.bfloat16),
                                       ("tf32", INTRA_BF16, torch.float16)) for mode in intra_modes),
        # the WY kernel as the forward launches it (AZ, no G), as the default backward's recomputation does (G, no
        # AZ) and as a recomputation of the scan too does (G and AZ: recompute_states, disable_recompute)
        *((ck.chunk_gdn2_fwd_wy_kernel, dict(H=H, K=K, V=V, BT=64, BK=t["BK"], BV=t["BV"], STORE_G=store_G,
                                             STORE_AZ=store_AZ, DOT=dot, **pdl), t["num_warps"],
           t.get("num_stages", 2), pointers)
          for dot, pointers in ((f32, ()), ("tf32", WY_BF16))
          for store_G, store_AZ, t in ((False, True, wy), (True, False, bwy), (True, True, wy))),
        # the forward scan as the backward's recomputation launches it (states, no output), as the forward under
        # autograd does (the output, and the states that the backward keeps) and as a forward without a backward
        # does (the output alone), in float32 and with 16-bit intermediates
        *((ck.chunk_gdn2_fwd_scan_kernel, dict(H=H, K=K, V=V, BT=64, BK=K, BV=fscan_bv, USE_INITIAL_STATE=True,
                                               STORE_FINAL_STATE=True, DOT=dot, **by_descriptor, **pdl,
                                               **(dict(STORE_STATES=states, WRITE_OUTPUT=output) if fused else {})),
           scan["num_warps"], stages if pointers and K <= 128 else 1, pointers)
          for dot, pointers in ((f32, ()), ("tf32", ("AE", "AZ", "KG", "h", "R", "QG", "Aqk", "o")))
          for states, output, stages in scan_forms
          # float32 runs every form on one stage, where the form that also stores the states bounds the one
          # without in shared memory: its compile (tens of seconds at K = 256) is left out
          if pointers or states),
        *((ck.chunk_gdn2_fwd_output_kernel, dict(H=H, K=K, V=V, BT=64, BK=K, BV=ck._output_value_block(K, V),
                                                 DOT=dot), out["num_warps"], 2, pointers)
          for dot, pointers in ((f32, ()), ("tf32", ("QG", "h", "Aqk", "R", "o")))),
        *(launch for dot, pointers in ((f32, ()), ("tf32", BWD_BF16)) for launch in (
            (cb.chunk_gdn2_bwd_scan_kernel, dict(H=H, K=K, V=V, BT=64, BK=K, BV=scan_bv, USE_FINAL_GRAD=True,
                                                 STORE_INITIAL_GRAD=True, DOT=dot),
             bscan["num_warps"], bscan["num_stages"] if pointers else 1, pointers),
            (cb.chunk_gdn2_bwd_local_kernel, dict(H=H, V=V, BT=64, BV=blocal["BV"], DOT=dot),
             blocal["num_warps"], blocal["num_stages"], pointers),
            *((cb.chunk_gdn2_bwd_inputs_kernel, dict(H=H, K=K, V=V, BT=64, BC=16, BK=binputs["BK"], BV=binputs["BV"],
                                                   MODE=mode, DOT=dot),
             binputs["num_warps"], binputs["num_stages"], pointers) for mode in (1, 2)))),
        (fr._fused_recurrent_gdn2_fwd_kernel, dict(H=H, K=K, V=V, BK=K, BV=fused_bv, USE_INITIAL_STATE=True,
                                                   STORE_FINAL_STATE=True), 1, 1, ()),
        *((kernel, dict(D=H * K, W=4, BT=conv["BT"], BD=conv["BD"], HAS_BIAS=True, HAS_STATE=True, **flags),
           conv["num_warps"], 1, pointers)
          for kernel, flags in ((sc.short_conv_fwd_kernel, {}), (sc.short_conv_bwd_kernel, dict(STATE_GRAD=True)))
          for pointers in ((), CONV_BF16) if K == 128),     # its tiles do not depend on K: compile it once
        *((kernel, dict(D=V, BR=gn.NORM_TILES["BR"], BD=V), gn.NORM_TILES["num_warps"], 1, pointers)
          for kernel in (gn.gated_norm_fwd_kernel, gn.gated_norm_bwd_kernel) for pointers in ((), NORM_BF16)),
        *((kernel, dict(D=K, BR=fr.L2NORM_TILES["BR"], BD=K), fr.L2NORM_TILES["num_warps"], 1, pointers)
          for kernel in (fr.l2_norm_fwd_kernel, fr.l2_norm_bwd_kernel) for pointers in ((), L2_BF16)),
    ]


def resource_usage(cubin):
    """{"registers": .., "stack": ..} per thread (stack in bytes) of a compiled kernel's binary, from
    ``cuobjdump -res-usage``; None where the report has no such field (or this Triton has no cuobjdump)."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    out = ""
    if os.path.exists(tool):
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True).stdout
    fields = dict(x.split(":", 1) for line in out.splitlines() if "REG:" in line for x in line.split()
                  if x.startswith(("REG:", "STACK:")))
    return {"registers": int(fields["REG"]) if "REG" in fields else None,
            "stack": int(fields["STACK"]) if "STACK" in fields else None}


LOOP_OPS = ("scf.for", "scf.while")     # a while loop's two regions, before and after "do", are both its body


def _source_line(defs, loc):
    """The "file:line" that TTGIR location ``loc`` (like "#loc12") stands for, given the TTGIR's location table
    ``defs`` ({"#loc12": its definition}): a call site's outermost caller, so that a load inside a helper is
    placed at the kernel's line that calls the helper; None if unknown."""
    seen = set()
    while loc in defs and loc not in seen:
        seen.add(loc)
        text = defs[loc]
        direct = re.fullmatch(r'"([^"]+)":(\d+):\d+', text)
        if direct:
            return f"{os.path.basename(direct.group(1))}:{direct.group(2)}"
        outer = re.fullmatch(r"callsite\((#loc\d*) at (#loc\d*)\)", text) or re.fullmatch(r'"[^"]*"\((#loc\d*)\)', text)
        if outer is None:
            return None
        loc = outer.group(outer.lastindex)
    return None


def loads_left_in_loops(ttgir):
    """The global loads inside a loop that the compiler left synchronous: each ``tt.load`` within an
    ``scf.for`` or ``scf.while`` of a kernel's TTGIR, as (tile, where): tile "<shape>x<element type>" (the
    element type alone for a scalar), where the source "file:line" (None if the TTGIR does not say). In a
    pipelined loop (num_stages > 1) Triton turns loads whose tiles feed products into asynchronous copies
    issued iterations ahead; these others are issued where they stand. Nesting follows the braces: a line
    ending in "{" opens a region (a loop body if it holds a LOOP_OPS operation or is a while loop's "} do {"),
    one starting with "}" closes one."""
    regions, found = [], []
    defs = dict(re.findall(r"^(#loc\d*) = loc\((.*)\)$", ttgir, flags=re.M))       # the location table
    for number, line in enumerate(ttgir.splitlines(), 1):
        text = line.strip()
        closing = len(text) - len(text.lstrip("}"))
        if closing > len(regions):
            raise ValueError(f"TTGIR line {number} closes a region that was never opened: {text[:80]!r}")
        del regions[len(regions) - closing:]
        if re.search(r"= tt\.load ", text) and "loop" in regions:
            tile = (re.search(r"tensor<([\dx]+)x!tt\.ptr<(\w+)>", text)                  # a tensor of pointers
                    or re.search(r"!tt\.ptr<tensor<([\dx]+)x(\w+)", text))                 # a block pointer
            scalar = re.search(r"!tt\.ptr<(\w+)>", text)
            at = re.search(r"loc\((#loc\d*)\)\s*$", text)
            found.append((f"{tile.group(1)}x{tile.group(2)}" if tile else scalar.group(1) if scalar else "?",
                          _source_line(defs, at.group(1)) if at else None))
        if text.endswith("{"):
            opens_loop = any(op in text for op in LOOP_OPS) or (closing and text.endswith("do {"))
            regions.append("loop" if opens_loop else "region")
    return found


def loads_text(loads):
    """loads_left_in_loops' list as the tool prints it: "<tile> at <file:line>", comma-separated."""
    return ", ".join(f"{tile} at {where}" if where else tile for tile, where in loads)


def usage_text(usage):
    """resource_usage's numbers as cuobjdump prints them, "REG:.. STACK:.."."""
    text = " ".join(f"{label}:{usage[name]}" for label, name in (("REG", "registers"), ("STACK", "stack"))
                    if usage[name] is not None)
    return text or "(no resource report)"


def inputs_label(constexprs, bf16):
    """The inputs' type a launch stands for: float32, bf16, or for the intra kernel with float16's operand check
    (OPERAND_LIMIT below MID_LIMIT) on bf16 pointers, "float16 check on bf16 pointers"."""
    if not bf16:
        return "float32"
    return "float16 check on bf16 pointers" if constexprs.get("OPERAND_LIMIT", ck.MID_LIMIT) < ck.MID_LIMIT else "bf16"


def tool_version():
    """{"commit": .., "modified": ..}: the commit of this tool's checkout and whether the tool differs from it."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                                timeout=30, check=True).stdout.strip()
        modified = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", os.path.basename(__file__)], cwd=here,
                                  timeout=30).returncode != 0
    except (OSError, subprocess.SubprocessError):
        commit, modified = "unknown", None
    return {"commit": commit, "modified": modified}


def _listed(parser, option, values, allowed):
    """The items of a repeatable, comma-separated option in ``allowed``'s order (all of them when not given);
    an unknown item is an error that names the option."""
    if not values:
        return list(allowed)
    wanted = [x.strip() for value in values for x in value.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in map(str, allowed)]
    if unknown or not wanted:
        parser.error(f"argument {option}: unknown {', '.join(map(repr, unknown)) or 'empty list'}; "
                     f"choose from {', '.join(map(str, allowed))}")
    return [x for x in allowed if str(x) in wanted]


def tile_tables():
    """{name: table} of the *_TILES dicts of chunk_kernels and chunk_backward_kernels (the tables themselves)."""
    return {name: table for module in (ck, cb) for name, table in vars(module).items()
            if name.endswith("_TILES") and isinstance(table, dict)}


# entries a table may lack, which its launch reads when present (chunk_kernels._launch_intra: a register cap)
OPTIONAL_TILE_KEYS = {"INTRA_TILES": ("maxnreg",)}


def _tile_setting(parser, text):
    """(table dict, key, int value) from "TABLE.KEY=VALUE", TABLE one of tile_tables() and KEY one of its
    entries or of its OPTIONAL_TILE_KEYS; anything else is a parser error. A register cap must lie in 1..255,
    the registers a thread may have."""
    name, _, rest = text.partition(".")
    key, _, value = rest.partition("=")
    table = tile_tables().get(name)
    if table is None or key not in (*table, *OPTIONAL_TILE_KEYS.get(name, ())) or not value.isdigit():
        optional = ", ".join(f"{t}.{k}" for t, keys in OPTIONAL_TILE_KEYS.items() for k in keys)
        parser.error(f"argument --tile: expected TABLE.KEY=INTEGER with TABLE a *_TILES table of chunk_kernels or "
                     f"chunk_backward_kernels and KEY one of its entries (or {optional}), got {text!r}")
    if key == "maxnreg" and not 1 <= int(value) <= 255:
        parser.error(f"argument --tile: a register cap must lie in 1..255, got {text!r}")
    return table, key, int(value)


def parse_args(argv):
    parser = argparse.ArgumentParser(description="Compile gdn2edu's Triton kernels for the GPUs readers meet, "
                                                 "no GPU needed; exit status 1 if any fails.")
    parser.add_argument("--loop-loads", action="store_true",
                        help="also print the global loads each kernel's loops leave synchronous (not pipelined); "
                             "with --aligned, as launches have their pointers")
    parser.add_argument("--registers", action="store_true",
                        help="also print each binary's registers per thread and stack (cuobjdump -res-usage)")
    parser.add_argument("--arch", action="append", help=f"from {', '.join(TARGETS)} (repeat or comma-separate; "
                                                        "default: all)")
    parser.add_argument("--dim", action="append", help="head dims K = V, from 128, 256 (default: both)")
    parser.add_argument("--kernels", action="append",
                        help="kernel function names, e.g. chunk_gdn2_fwd_scan_kernel (default: all)")
    parser.add_argument("--fp32-dot", choices=ck.FLOAT32_DOTS, default=ck.FLOAT32_DOT,
                        help="input_precision of the float32 launches' products (default: chunk_kernels."
                             "FLOAT32_DOT, %(default)s)")
    parser.add_argument("--aligned", action="store_true",
                        help="pointer arguments 16-byte aligned, as a launch on torch tensors specializes them")
    parser.add_argument("--out", help="write every compiled launch, its resources and the provenance to this JSON file")
    parser.add_argument("--commit", help="the commit to record with --out (default: git's HEAD where gdn2edu is "
                                         "imported from, +modified if the package differs from it)")
    parser.add_argument("--tile", action="append", default=[], metavar="TABLE.KEY=VALUE",
                        help="compile with one entry of a tile table changed, e.g. INTRA_TILES.BK=16 (repeatable; "
                             "--out records the tables compiled)")
    args = parser.parse_args(argv)
    args.tile = [_tile_setting(parser, text) for text in args.tile]
    args.arch = _listed(parser, "--arch", args.arch, list(TARGETS))
    args.dim = _listed(parser, "--dim", args.dim, [128, 256])
    args.kernels = _listed(parser, "--kernels", args.kernels,
                           sorted({kernel.fn.__name__ for kernel, *_ in launches(128, 128)}))
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    with contextlib.ExitStack() as settings:   # the shipped tables back after it, for a caller in this process
        for table, key, value in args.tile:
            settings.enter_context(ck.tile_table(table, {**table, key: value}))
        return _compile_all(args, argv)


def _compile_all(args, argv):
    """main's work on parsed arguments, with any --tile setting in place."""
    failures = compiled = 0
    records = [] if args.out else None
    for arch in args.arch:
        target, limit = TARGETS[arch]
        for dim in args.dim:
            print(f"{arch}, K = V = {dim}:")
            f, c = check(target, limit, dim, args.registers, args.kernels, args.fp32_dot, args.aligned, records,
                         arch, args.loop_loads)
            failures, compiled = failures + f, compiled + c
    if not compiled:
        print("nothing compiled: no launch of these kernels at these head dims on these GPUs")
    if args.out:
        import gdn2edu
        from gdn2edu.bench import provenance
        argv = sys.argv[1:] if argv is None else list(argv)
        record = {"provenance": provenance("cpu", args.commit, argv, program="python tools/hopper_compile_check.py"),
                  "package": os.path.dirname(os.path.abspath(gdn2edu.__file__)), "tool": tool_version(),
                  "targets": {arch: {"arch": arch, "shared_memory_limit": TARGETS[arch][1]} for arch in args.arch},
                  "dims": args.dim, "fp32_dot": args.fp32_dot, "aligned": args.aligned,
                  "tiles": {name: dict(table) for name, table in tile_tables().items()},
                  "launches": records}
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
        print(f"wrote {len(records)} launches to {args.out}")
    return 1 if failures or not compiled else 0


def check(target, limit, dim, registers, kernels, fp32_dot, aligned=False, records=None, arch=None,
          loop_loads=False):
    """Compile the launches of ``kernels`` at K = V = dim for the target, float32 products in ``fp32_dot``;
    (failures, launches compiled). Where a block has less shared memory than float32 tiles need (an L4),
    chunk_gdn2 refuses float32 inputs, so only the 16-bit variants are compiled there. A list ``records``
    gets a dict per launch, with its registers, stack and loads_left_in_loops (``arch`` names the target there);
    ``loop_loads`` prints those loads too."""
    failures = compiled = 0
    for kernel, constexprs, num_warps, num_stages, bf16 in launches(dim, dim, fp32_dot, limit,
                                                                    ck.tensor_descriptors_at(target.arch // 10)):
        name = kernel.fn.__name__
        if name not in kernels or (limit < ck.FLOAT32_SHARED_MEMORY and "DOT" in constexprs and not bf16):
            continue
        inputs = inputs_label(constexprs, bf16)
        label = (f", dot {constexprs['DOT']}" if "DOT" in constexprs else "") + \
            (f", MODE {constexprs['MODE']}" if "MODE" in constexprs else "") + \
            "".join(f", {flag}" for flag in ("STORE_G", "STORE_AZ", "WRITE_OUTPUT", "BY_DESCRIPTOR", "PDL")
                    if constexprs.get(flag)) + \
            (", no STORE_STATES" if constexprs.get("STORE_STATES") is False else "")
        options = dict(num_warps=num_warps, num_stages=num_stages)
        # OPTIONAL_TILE_KEYS' one entry: the register cap that _launch_intra hands to Triton when INTRA_TILES has it
        if kernel is ck.chunk_gdn2_fwd_intra_kernel and "maxnreg" in ck.INTRA_TILES:
            options["maxnreg"] = ck.INTRA_TILES["maxnreg"]
            label += f", maxnreg {options['maxnreg']}"
        start = time.monotonic()
        compiled += 1
        launch = dict(arch=arch, K=dim, V=dim, kernel=name, inputs=inputs, bf16_pointers=list(bf16),
                      constexprs=constexprs, **options)                                   # what --out records
        try:
            types = signature(kernel, bf16)
            attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names)
                     if types[name].startswith("*")} if aligned else None
            binary = triton.compile(triton.compiler.ASTSource(kernel, types, constexprs, attrs),
                                    target=target, options=options)
        except Exception as err:                  # a compile error: report it, go on with the others
            failures += 1
            error = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}"
            print(f"FAIL {name} ({inputs}{label}): {error}")
            if records is not None:
                records.append(dict(launch, ok=False, error=error))
            continue
        shared = binary.metadata.shared
        fits = shared <= limit
        failures += not fits
        usage = resource_usage(binary.asm["cubin"]) if registers or records is not None else None
        left = loads_left_in_loops(binary.asm["ttgir"])
        print(f"{'ok  ' if fits else 'FAIL'} {name} ({inputs}{label}, warps {num_warps}, stages {num_stages}): "
              f"shared memory {shared} of {limit} bytes, compiled in {time.monotonic() - start:.1f} s"
              + (f", {usage_text(usage)}" if registers else "")
              + (f", loads left in loops: {len(left)}" + (f" ({loads_text(left)})" if left else "") if loop_loads
                 else ""))
        if records is not None:
            records.append(dict(launch, ok=fits, shared_memory=shared, shared_memory_limit=limit, **usage,
                                loads_left_in_loops=[dict(tile=tile, source=where) for tile, where in left]))
    return failures, compiled


if __name__ == "__main__":
    sys.exit(main())
