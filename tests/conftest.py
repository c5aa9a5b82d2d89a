"""Shared fixtures: the repository root, the built book and decks, float64 random GDN2 inputs, the npm
packages of tests/mathjax."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from bs4 import BeautifulSoup

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


# Building every deck executes every chapter (the book test already does that once), so the deck tests build a
# subset from scratch: Chapter 0 (no figures) and Chapter 2 (figures, equations, a definition, citations, glue).
SLIDE_CHAPTERS = ("00_read_me_first", "02_unrolling_one_chunk")


@pytest.fixture(scope="session")
def built_slides(root, tmp_path_factory):
    """tools/slides.py's decks (slides/), figures (figures/) and executed notebooks (executed/) of
    SLIDE_CHAPTERS, in a fresh folder: nothing comes from an earlier run."""
    out = tmp_path_factory.mktemp("slides")
    result = subprocess.run(
        [sys.executable, str(root / "tools" / "slides.py"), "--chapters", *SLIDE_CHAPTERS,
         "--out", str(out / "slides"), "--figures", str(out / "figures"), "--cache", str(out / "executed")],
        cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, f"slides.py failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return out


def visible_text(soup):
    """A deck's text outside code (a BeautifulSoup of it): where MyST syntax would be a rendering failure, and
    where MathJax looks for TeX."""
    soup = BeautifulSoup(str(soup), "html.parser")
    for node in soup.select("pre, code, script, style"):
        node.decompose()
    return soup.get_text("\n")


def make_inputs(B, T, H, K, V, dtype=torch.float64, erase_max=2.0, seed=0):
    """Fresh random GDN2 inputs in their ranges (gdn2edu.inputs.random_inputs), seeded."""
    from gdn2edu.inputs import random_inputs       # after TRITON_INTERPRET is set: gdn2edu imports triton
    return random_inputs(B, T, H, K, V, dtype=dtype, erase_max=erase_max, seed=seed)


def npm_packages(root) -> Path:
    """tests/mathjax/node_modules, holding each package of tests/mathjax/package.json at its pinned version
    (`npm install` there first where one is missing or another version): MathJax 3 for the formula tests in
    node, MathJax's and reveal.js's browser builds for the browser tests. Fails rather than skips without npm:
    .ci/run installs it, and the README says so."""
    folder = root / "tests" / "mathjax"
    modules = folder / "node_modules"

    def installed(name):
        manifest = modules / name / "package.json"
        return json.loads(manifest.read_text())["version"] if manifest.is_file() else None

    pinned = json.loads((folder / "package.json").read_text())["dependencies"]
    if any(installed(name) != version for name, version in pinned.items()):
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is needed to install MathJax and reveal.js for the tests (see README)")
        subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund"], cwd=folder, check=True)
    return modules


def mathjax_checker(root):
    """(node, tests/mathjax) with MathJax 3 installed there: the typesetter that the formula tests run in node.
    Fails rather than skips without node and npm: .ci/run installs them, and the README says so."""
    node = shutil.which("node")
    if not node:
        pytest.fail("node and npm are needed to run MathJax outside a browser (see README)")
    return node, npm_packages(root).parent
