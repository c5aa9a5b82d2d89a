"""The derived files (gdn2edu/, .ipynb pairs, install cells, README links) match the chapters."""

import re
import subprocess
import sys

import jupytext


def run_tool(root, *args):
    return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True)


def test_package_is_tangled_from_the_chapters(root):
    result = run_tool(root, "tools/tangle.py", "--check")
    assert result.returncode == 0, f"gdn2edu/ is stale, run `python tools/sync.py`:\n{result.stdout}"


def test_every_derived_file_is_in_sync(root):
    result = run_tool(root, "tools/sync.py", "--check")
    assert result.returncode == 0, f"run `python tools/sync.py`:\n{result.stdout}"


def test_every_chapter_has_an_ipynb_pair_with_the_same_cells(root):
    chapters = sorted((root / "chapters").glob("*.md"))
    assert chapters, "no chapters found"
    for md in chapters:
        ipynb = md.with_suffix(".ipynb")
        assert ipynb.exists(), f"{ipynb.name} missing"
        source, pair = jupytext.read(md), jupytext.read(ipynb)
        assert [(c.cell_type, c.source) for c in source.cells] == [(c.cell_type, c.source) for c in pair.cells]
        assert all(not c.get("outputs") for c in pair.cells), f"{ipynb.name} carries outputs"


def test_generated_modules_name_their_chapter(root):
    for module in (root / "gdn2edu").glob("*.py"):
        header = module.read_text().splitlines()[:2]
        assert re.match(r"# Generated from chapters/.*\.md by tools/tangle\.py\.", header[0]), module.name
        assert "Edit the chapter, not this file" in header[1], module.name


def test_ci_runs_the_readme_test_command(root):
    readme = (root / "README.md").read_text()
    section = readme.split("Run all tests", 1)[1]
    command = re.search(r"```bash\n(.+?)\n```", section, re.S).group(1).strip()
    ci_lines = [line.strip() for line in (root / ".ci/run").read_text().splitlines()]
    assert command in ci_lines, f".ci/run must run the README test command {command!r}"
