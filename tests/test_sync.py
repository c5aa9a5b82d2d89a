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
    """Same cells in the same order: code verbatim (but the install cell, which the pair extends), Markdown as
    tools/colab_markdown.py rewrites it for Jupyter and Colab; no outputs."""
    sys.path.insert(0, str(root / "tools"))
    import sync
    convert = sync.converter(sync.book_settings())
    chapters = sorted((root / "chapters").glob("*.md"))
    assert chapters, "no chapters found"
    for md in chapters:
        ipynb = md.with_suffix(".ipynb")
        assert ipynb.exists(), f"{ipynb.name} missing"
        source, pair = jupytext.read(md), jupytext.read(ipynb)
        assert [c.cell_type for c in source.cells] == [c.cell_type for c in pair.cells], ipynb.name
        doc = f"chapters/{md.stem}"
        for index, (a, b) in enumerate(zip(source.cells, pair.cells)):
            if a.cell_type == "markdown":
                expected = convert.markdown(doc, a.source)
                assert b.source == expected or (index == 0 and b.source.startswith(expected + "\n\n")), \
                    f"{ipynb.name} cell {index}"
            elif sync.INSTALL_TAG in a.metadata.get("tags", []):
                assert sync.INSTALL_TAG in b.metadata.get("tags", []) and "GDN2EDU_NOTEBOOK" in b.source
            else:
                assert a.source == b.source, f"{ipynb.name} cell {index}"
        assert all(not c.get("outputs") for c in pair.cells), f"{ipynb.name} carries outputs"
        assert "formats" not in pair.metadata.get("jupytext", {}), f"{ipynb.name} must not be paired back"


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
