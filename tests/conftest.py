"""Shared fixtures: the repository root and float64 random GDN2 inputs."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# Without a GPU, Triton kernels run in its interpreter; the variable must be set before triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def built_book(root, tmp_path_factory):
    """Build into a fresh folder: an empty jupyter-cache, so every chapter executes from scratch.

    While working on the site tests only, GDN2EDU_BUILT_SITE=path/to/_build/html reuses a site built before."""
    if os.environ.get("GDN2EDU_BUILT_SITE"):
        return Path(os.environ["GDN2EDU_BUILT_SITE"])
    out = tmp_path_factory.mktemp("book")
    result = subprocess.run(
        [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", str(root), "-W", "-n", "--keep-going",
         "--path-output", str(out)],
        capture_output=True, text=True)
    if result.returncode != 0:
        log = result.stdout + result.stderr
        cause = log.find("CellExecutionError")            # the failing cell and its traceback, if a cell failed
        pytest.fail(f"book build failed:\n{log[max(0, cause - 200):cause + 5000] if cause >= 0 else ''}\n...\n{log[-5000:]}")
    return out / "_build" / "html"


def make_inputs(B, T, H, K, V, dtype=torch.float64, erase_max=2.0, seed=0):
    """Fresh random GDN2 inputs in their ranges (gdn2edu.inputs.random_inputs), seeded."""
    from gdn2edu.inputs import random_inputs       # after TRITON_INTERPRET is set: gdn2edu imports triton
    return random_inputs(B, T, H, K, V, dtype=dtype, erase_max=erase_max, seed=seed)


def mathjax_checker(root):
    """(node, tests/mathjax) with MathJax 3 installed there: the typesetter that the formula tests run in node.
    Fails rather than skips without node and npm: .ci/run installs them, and the README says so."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not (node and npm):
        pytest.fail("node and npm are needed to run MathJax outside a browser (see README)")
    checker = root / "tests" / "mathjax"
    if not (checker / "node_modules" / "mathjax-full").exists():
        subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund"], cwd=checker, check=True)
    return node, checker
