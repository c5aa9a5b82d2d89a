# Generated from chapters/09_triton_chunked_forward.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""Which Triton kernels a commit had: the sources of a module's @triton.jit functions and *_TILES tables at a
git commit, to check that two recorded runs timed the same kernels (Chapters 9 and 10)."""

import ast
import subprocess
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]       # the checkout this package lives in, if it is one
KERNEL_FILES = ("gdn2edu/chunk_kernels.py", "gdn2edu/chunk_backward_kernels.py")


def kernel_sources(commit, path):
    """{name: source} of the @triton.jit functions (decorators included) and of the *_TILES tables of the file
    ``path`` (relative to the repository) at ``commit``; None where the repository's history is not at hand (an
    installed package, a shallow clone, Colab)."""
    try:
        shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPOSITORY, capture_output=True, text=True)
    except OSError:                                      # no git here
        return None
    if shown.returncode != 0:
        return None
    found = {}
    for node in ast.parse(shown.stdout).body:
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            found[node.name] = ast.unparse(node)
        elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]).endswith("_TILES"):
            found[ast.unparse(node.targets[0])] = ast.unparse(node.value)
    return found


def same_kernels(commit_a, commit_b, paths=KERNEL_FILES):
    """True if each file of ``paths`` has kernels and the same kernel_sources at the two commits, False if one
    differs, None where git's history is not at hand."""
    pairs = [(kernel_sources(commit_a, path), kernel_sources(commit_b, path)) for path in paths]
    if any(None in pair for pair in pairs):
        return None
    return all(a and a == b for a, b in pairs)
