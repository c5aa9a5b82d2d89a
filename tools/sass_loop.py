"""What one Triton kernel's longest loop compiles to, on this machine, no GPU needed: the kernel is compiled for a
target with ``triton.compile``, its binary disassembled with the ``nvdisasm`` that ships with Triton, and the
instructions of its longest loop (from the target of the longest backward branch to that branch: the loop body as
the compiler scheduled it) counted, by opcode. Prints one JSON object.

    python tools/sass_loop.py --kernel chunk_gdn2_fwd_scan_kernel --constexprs '{"H": 16, ...}'
        [--source PATH] [--bf16 NAME,...] [--warps 4] [--stages 3] [--arch sm_90]

``--source`` is a copy of a kernel module (default: gdn2edu/chunk_kernels.py), loaded as a module of its own, so
that an edited kernel can be compiled beside the shipped one; ``--bf16`` names the pointer arguments that are
bf16 (the others float32, int32 for the chunk maps, as tools/hopper_compile_check.py types them); every pointer
is compiled as 16-byte aligned, as a launch on torch tensors specializes them. This Triton may schedule
differently from the one on a GPU machine: the counts are of this compiler's binary.
"""

import argparse
import collections
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"      # before gdn2edu imports triton: compile, do not interpret

import triton  # noqa: E402

from hopper_compile_check import TARGETS, signature  # noqa: E402

SOURCE = Path(__file__).resolve().parents[1] / "gdn2edu" / "chunk_kernels.py"
_INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\b.*?(\.L_x_\d+)")


def load_kernel(source, name):
    """The @triton.jit function ``name`` of the module file ``source``, imported under a name of its own."""
    spec = importlib.util.spec_from_file_location(f"sass_loop_{Path(source).stem}", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not isinstance(getattr(module, name, None), triton.runtime.JITFunction):
        raise ValueError(f"{source} has no @triton.jit function {name!r}")
    return getattr(module, name)


def disassemble(cubin):
    """The SASS text of a cubin (bytes), from the nvdisasm that ships with Triton."""
    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run([str(nvdisasm), "-c", str(path)], capture_output=True, text=True, check=True).stdout


def longest_loop(sass):
    """(opcodes of every instruction, opcodes of the longest loop's body): the body runs from a label to the
    backward branch that jumps to it, both included; no backward branch, no loop (an empty list)."""
    opcodes, labels, loops = [], {}, []
    for line in sass.splitlines():
        label = _LABEL.match(line)
        if label:
            labels[label[1]] = len(opcodes)
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction:
            branch = _BRANCH.search(line)
            if branch and branch[1] in labels:                    # a label already seen: a backward branch
                loops.append((labels[branch[1]], len(opcodes)))
            opcodes.append(instruction[2])
    if not loops:
        return opcodes, []
    first, last = max(loops, key=lambda span: span[1] - span[0])
    return opcodes, opcodes[first:last + 1]


def count(kernel, constexprs, bf16=(), warps=4, stages=3, arch="sm_90"):
    """Compile ``kernel`` for ``arch`` and count its instructions: a dict with the totals, the loop's, the loop's
    instructions by opcode and the compiler's shared memory and registers."""
    types = signature(kernel, bf16)
    aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names) if types[name].startswith("*")}
    target = TARGETS[arch][0]
    binary = triton.compile(triton.compiler.ASTSource(kernel, types, constexprs, aligned), target=target,
                            options=dict(num_warps=warps, num_stages=stages))
    opcodes, loop = longest_loop(disassemble(binary.asm["cubin"]))
    return dict(kernel=kernel.fn.__name__, arch=arch, triton=triton.__version__, constexprs=constexprs,
                bf16_pointers=list(bf16), num_warps=warps, num_stages=stages,
                instructions=len(opcodes), loop_instructions=len(loop),
                loop_opcodes=dict(collections.Counter(loop).most_common()), shared_memory=binary.metadata.shared)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernel", required=True, help="the @triton.jit function's name")
    p.add_argument("--constexprs", required=True, help="its constexpr arguments, as a JSON object")
    p.add_argument("--source", type=Path, default=SOURCE, help="the module file (default: %(default)s)")
    p.add_argument("--bf16", default="", help="comma-separated names of the bf16 pointer arguments")
    p.add_argument("--warps", type=int, default=4)
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--arch", choices=sorted(TARGETS), default="sm_90")
    args = p.parse_args(argv)
    try:
        constexprs = json.loads(args.constexprs)
    except json.JSONDecodeError as err:
        p.error(f"--constexprs must be a JSON object: {err}")
    if not isinstance(constexprs, dict):
        p.error(f"--constexprs must be a JSON object, got {args.constexprs!r}")
    kernel = load_kernel(args.source, args.kernel)
    bf16 = tuple(name for name in args.bf16.split(",") if name)
    unknown = sorted(set(bf16) - set(kernel.arg_names))
    if unknown:
        p.error(f"--bf16 names {unknown}, which {args.kernel} does not take")
    print(json.dumps(count(kernel, constexprs, bf16, args.warps, args.stages, args.arch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
