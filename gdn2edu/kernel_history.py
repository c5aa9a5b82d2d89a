# Generated from chapters/09_triton_chunked_forward.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""Which Triton kernels a commit had: the sources of a module's @triton.jit functions and of its upper-case
settings (the *_TILES tables, FUSE_OUTPUT, MID_LIMIT, ...) at a git commit, to check that two recorded runs timed
the same kernels with the same settings (Chapters 9 to 12). The host functions that launch them are not compared."""

import ast
import subprocess
from pathlib import Path

KERNEL_FILES = ("gdn2edu/chunk_kernels.py", "gdn2edu/chunk_backward_kernels.py")
# Settings that 16-bit inputs never read: chunk_kernels._plan gives their products "tf32" whatever FLOAT32_DOT
# says (tests/test_chunk_kernels.py checks the plan, tests/test_kernel_history.py that no other function of the
# kernel modules names them). A record of bf16 or fp16 runs compares kernels ignoring them; so does one that
# states the FLOAT32_DOT it ran with (--fp32-dot).
FLOAT32_ONLY = ("FLOAT32_DOT", "FLOAT32_DOTS")
# The forward's kernels whose programs were renumbered, a chunk's heads made neighbours (Chapter 9's section
# "Neighbouring programs"): the same bits out (tests/test_gpu_intra_ablation.py), so a value recorded at the
# kernels before holds for today's; a time does not.
HEADS_FIRST = frozenset({"chunk_gdn2_fwd_intra_kernel", "chunk_gdn2_fwd_wy_kernel"})
# The kernels that changed when the scans took Aqk whole (Chapter 9's section "The scans take Aqk whole"): the
# intra kernel writes Aqk's blocks above the diagonal as zeros, the forward scan and output kernel (in the first
# file of KERNEL_FILES) and the backward scan (in the second) read it unmasked.
WHOLE_AQK = frozenset({"chunk_gdn2_fwd_intra_kernel", "chunk_gdn2_fwd_scan_kernel", "chunk_gdn2_fwd_output_kernel"})
WHOLE_AQK_BACKWARD = frozenset({"chunk_gdn2_bwd_scan_kernel"})
# What changed when the forward scan took its tiles by tensor descriptor (Chapter 9's section "The scan's tiles
# by descriptor"): the kernel, its new helper and its switch. The same bits out (tests/test_chunk_kernels.py, the
# H200's test matrix), so a value recorded before holds for today's kernels; a forward time does not.
SCAN_DESCRIPTORS = frozenset({"chunk_gdn2_fwd_scan_kernel", "_chunk_tile", "SCAN_BY_DESCRIPTOR"})
# What changed when the intra kernel's diagonal inverses went to substitution on sub-blocks and merges (Chapter 9's
# section "The diagonal inverses by merges"): the intra kernel, its inverse's helpers and the width setting. A is
# the same up to rounding, not bit for bit: a time recorded before does not hold for today's kernels, nor does an
# output compared bit for bit; the H200's test matrix was run again on the change.
BLOCKED_INVERSE = frozenset({"chunk_gdn2_fwd_intra_kernel", "_store_inverse", "_invert_unit_lower4", "_substitute_row",
                             "_merge_pairs", "SUBSTITUTION_WIDTH"})
# What changed when the intra kernel took over the redo of its flagged chunks from a second launch of its own, and
# the forward's launches became programmatic and dependent (Chapter 9's section "One launch for the intra kernel"):
# the three kernels (the PDL switch and wait), the intra kernel's new store helper, its redo (a call) and the
# switch. The same values bit for bit (the redo runs the second launch's code; PDL moves only when programs start):
# a value recorded before holds for today's kernels; a time does not.
ONE_INTRA_LAUNCH = frozenset({"chunk_gdn2_fwd_intra_kernel", "chunk_gdn2_fwd_wy_kernel", "chunk_gdn2_fwd_scan_kernel",
                              "_store_scores", "_redo_rows", "PROGRAMMATIC_LAUNCH"})


def _checkout():
    """The git checkout this package lives in, if it has its whole history; else None (an installed package,
    a shallow clone such as Colab's, no git)."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=root, capture_output=True,
                                 text=True)
    except OSError:                                      # no git here
        return None
    return root if shallow.returncode == 0 and shallow.stdout.strip() == "false" else None


def kernel_sources(commit, path):
    """{name: source} of the @triton.jit functions (decorators included) and of the module-level settings
    (public names in upper case: the tile tables and the switches and limits that decide what is launched) of
    the file ``path`` (relative to the repository) at ``commit``; None where the whole history is not at hand.
    A commit or path that the whole history does not have is a ValueError."""
    root = _checkout()
    if root is None:
        return None
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=root, capture_output=True, text=True)
    if shown.returncode != 0:
        raise ValueError(f"{commit}:{path} is not in this repository's history: {shown.stderr.strip()}")
    return module_kernels(shown.stdout)


def module_kernels(source):
    """{name: source} of the @triton.jit functions and the public upper-case settings of a module's ``source``."""
    if not isinstance(source, str):
        raise ValueError(f"source must be a module's Python source as a str, got {type(source).__name__}")
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            found[node.name] = ast.unparse(node)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id.isupper() and not node.targets[0].id.startswith("_"):  # not a private cache
            found[node.targets[0].id] = ast.unparse(node.value)
    return found


def _compared(sources, ignoring):
    """kernel_sources without the settings named in ``ignoring`` (a tuple of names of FLOAT32_ONLY): a name
    outside it, a Triton function for one, is a ValueError, so that no kernel is left out of a comparison."""
    if isinstance(ignoring, str) or not set(ignoring) <= set(FLOAT32_ONLY):
        raise ValueError(f"ignoring must be a tuple of names from FLOAT32_ONLY {FLOAT32_ONLY}, got {ignoring!r}")
    return None if sources is None else {name: s for name, s in sources.items() if name not in ignoring}


def _check_paths(paths):
    """A ValueError unless ``paths`` is a non-empty sequence of file paths (not one path as a str)."""
    if isinstance(paths, str) or not paths:
        raise ValueError(f"paths must be a non-empty sequence of file paths, got {paths!r}")


def same_kernels(commit_a, commit_b, paths=KERNEL_FILES, ignoring=()):
    """True if each file of ``paths`` has kernels and the same kernel_sources at the two commits, False if one
    differs, None where the whole history is not at hand. Settings named in ``ignoring`` (FLOAT32_ONLY: for a
    record of 16-bit runs, or one that states its FLOAT32_DOT) are not compared."""
    _check_paths(paths)
    pairs = [(_compared(kernel_sources(commit_a, path), ignoring), _compared(kernel_sources(commit_b, path), ignoring))
             for path in paths]
    if any(None in pair for pair in pairs):
        return None
    return all(a and a == b for a, b in pairs)


def changed_kernels(commit_a, commit_b, path=KERNEL_FILES[0], ignoring=()):
    """The names of the kernel_sources of ``path`` that differ between the two commits (one that only one of
    them has counts), or None where the whole history is not at hand; settings named in ``ignoring`` left out."""
    a, b = (_compared(kernel_sources(c, path), ignoring) for c in (commit_a, commit_b))
    if a is None or b is None:
        return None
    return {name for name in a.keys() | b.keys() if a.get(name) != b.get(name)}


def changed_in_files(commit_a, commit_b, paths=KERNEL_FILES, ignoring=()):
    """changed_kernels of every file of ``paths`` together: the names that differ in any of them, or None where
    the whole history is not at hand."""
    _check_paths(paths)
    changed = [changed_kernels(commit_a, commit_b, path, ignoring) for path in paths]
    return None if None in changed else set().union(*changed)
