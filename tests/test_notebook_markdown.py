"""The .ipynb pairs read right in Jupyter and Colab: every formula typesets with no macro from _config.yml,
and no MyST role, directive or target is left raw (tools/colab_markdown.py writes them)."""

import json
import re
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "tools"))
import colab_markdown  # noqa: E402
from conftest import mathjax_checker

RAW = {
    "role": re.compile(r"\{[a-z][\w:-]*\}$"),     # searched in the text just before each code span
    "directive": re.compile(r"^\s*(`{3,}|:{3,})\{", re.M),
    "target": re.compile(r"^\([\w.:-]+\)=\s*$", re.M),
    "equation label": re.compile(r"\$\$\s*\([\w.:-]+\)"),
    "link to a .md page": re.compile(r"\]\((?!https?:)[^)]*\.md\)"),
}


def notebooks(root):
    found = sorted((root / "chapters").glob("*.ipynb"))
    assert found, "no .ipynb pairs"
    return found


def markdown_cells(path):
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]


def without_code(text):
    """Markdown as a renderer reads it for math: fenced code blocks and inline code taken out."""
    text = re.sub(r"^(`{3,}|~{3,}).*?^\1\s*$", "", text, flags=re.S | re.M)
    return re.sub(r"(`+)[^`]*?\1", "", text)


def formulas(text):
    """The formulas that Jupyter's Markdown renderer hands to MathJax: $$...$$ and \\begin...\\end blocks
    (display), then $...$ (inline), after code is taken out."""
    text, found = without_code(text), []
    for pattern, display in ((r"\$\$(.+?)\$\$", True), (r"\\begin\{(\w+\*?)\}.+?\\end\{\1\}", True),
                             (r"(?<![\\$])\$([^$\n]+?)\$", False)):
        for match in re.finditer(pattern, text, flags=re.S):
            found.append({"tex": match.group(1) if pattern.startswith(r"\$") else match.group(0),
                          "display": display})
        text = re.sub(pattern, " ", text, flags=re.S)
    return found


def raw_myst(text):
    """[(what, excerpt)] for every MyST construct left in Markdown ``text``. A role is `{name}` outside
    code followed by a code span (its argument); `{name}` inside code, as in "the `{glue:text}` role", is
    prose about MyST and fine."""
    found = []
    for what, pattern in RAW.items():
        if what == "role":
            prose = re.sub(r"^(`{3,}|~{3,}).*?^\1\s*$", "", text, flags=re.S | re.M)
            pieces = re.split(r"(`+[^`]*?`+)", prose)
            found += [(what, a[-60:] + b) for a, b in zip(pieces, pieces[1:])
                      if not a.startswith("`") and b.startswith("`") and pattern.search(a)]
        else:
            # a directive is itself a fence: search outside the fenced examples of other languages (```md ...)
            examples_out = re.sub(r"^(`{3,}|~{3,})(?!\{)[^\n]*\n.*?^\1\s*$", "", text, flags=re.S | re.M)
            searched = examples_out if what == "directive" else without_code(text)
            hit = pattern.search(searched)
            if hit:
                found.append((what, searched[max(0, hit.start() - 60):hit.end() + 40]))
    return found


def test_no_raw_myst_in_notebook_markdown(root):
    for path in notebooks(root):
        for cell in markdown_cells(path):
            assert not raw_myst(cell), f"{path.name}: raw MyST left: {raw_myst(cell)[:3]}"


def test_the_raw_checks_catch_myst(root):
    """The check above can fail: on the chapters' MyST sources it finds every kind of construct."""
    sources = "\n".join(p.read_text() for p in (root / "chapters").glob("*.md"))
    assert {what for what, _ in raw_myst(sources)} == set(RAW)
    assert not raw_myst("shows it with a `{glue:text}` role, and `$$ (x)` in code")


def test_every_glued_name_in_the_text_is_glued_by_a_cell(root):
    """In a notebook a glued number shows as its `name`; gdn2edu.notebook.glue prints its value under the
    cell that computes it, so that cell must be in the notebook."""
    total = 0
    for md in sorted((root / "chapters").glob("*.md")):
        cells = json.loads(md.with_suffix(".ipynb").read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        # names glued literally, or by an f-string such as f"ch4_overflow_{name}" (any word fills the braces)
        glued = [re.sub(r"\\\{[^}]*\\\}", r"\\w+", re.escape(name))
                 for name in re.findall(r"\bglue\(\s*f?[\"']([\w.{}-]+)[\"']", code)]
        used = set(re.findall(r"\{glue(?::\w+)?\}`([\w.-]+)", md.read_text()))
        never = sorted(n for n in used if not any(re.fullmatch(g, n) for g in glued))
        assert not never, f"{md.name}: {never} used in the text but never glued"
        text = "\n".join(markdown_cells(md.with_suffix(".ipynb")))
        assert all(f"`{name}`" in text for name in used), md.name
        total += len(used)
    assert total > 50, "few glued numbers found: has the role's syntax changed?"


def test_every_notebook_formula_typesets_without_the_books_macros(root):
    """MathJax 3 in node, with no macros defined: what a notebook shows in Jupyter or Colab."""
    node, checker = mathjax_checker(root)
    found = []
    for path in notebooks(root):
        for cell in markdown_cells(path):
            found += [{"page": path.name, **f} for f in formulas(cell)]
    assert len(found) > 300, len(found)
    result = subprocess.run([node, "typeset.js"], cwd=checker, capture_output=True, text=True, check=True,
                            input=json.dumps({"macros": {}, "formulas": found}))
    failures = json.loads(result.stdout)
    assert not failures, failures[:5]


def test_the_typesetter_reports_an_undefined_macro(root):
    """The check above can fail: a formula with one of _config.yml's macros, and no definition, is reported."""
    node, checker = mathjax_checker(root)
    result = subprocess.run([node, "typeset.js"], cwd=checker, capture_output=True, text=True,
                            check=True, input=json.dumps({"macros": {}, "formulas": [
                                {"page": "x", "tex": r"a \had b", "display": False},
                                {"page": "x", "tex": r"\operatorname{Diag}(g) \tag{3}", "display": True}]}))
    assert [f["tex"] for f in json.loads(result.stdout)] == [r"a \had b"]


def converter():
    bib = {"smith2020": {"author": "Smith, Ann and Jones, Bob and Lee, Cy", "year": "2020"},
           "corp": {"author": "{ACME Labs}", "year": "2021"}}
    docs = {"book/intro": "# Intro\n",
            "chapters/01_a": "# First\n\n(sec-x)=\n## A section\n\n$$\nx\n$$ (eq-x)\n",
            "chapters/02_b": "# Second\n\n```{prf:definition} Thing\n:label: def-thing\n\nbody\n```\n\n"
                             "$$\ny\n$$ (eq-y)\n"}
    colab = {d: f"https://colab/{d}.ipynb" for d in docs if d.startswith("chapters/")}
    return colab_markdown.Converter(docs, bib, {"had": r"\odot", "R": r"\mathbb{R}"}, colab, "https://gh/blob/main")


def test_converter_resolves_each_construct():
    c = converter()
    text = ("See {cite}`smith2020,corp`, {doc}`01_a`, {ref}`sec-x`, {eq}`eq-x` and {eq}`eq-y`, "
            "{prf:ref}`def-thing`, {glue:text}`ch2_err:.1e` and $a \\had b \\in \\R^n$, not `\\had`; "
            "[notation](../book/intro.md).")
    assert c.markdown("chapters/02_b", text) == (
        "See (Smith et al., 2020; ACME Labs, 2021), [First](https://colab/chapters/01_a.ipynb), "
        "[“A section”](https://colab/chapters/01_a.ipynb), [(1)](https://colab/chapters/01_a.ipynb) and (2), "
        "Definition 1 (Thing), `ch2_err` and $a \\odot b \\in \\mathbb{R}^n$, not `\\had`; "
        "[notation](https://gh/blob/main/book/intro.md).")
    block = "(sec-x)=\n## A section\n$$\nx\n$$ (eq-x)\n```{admonition} Solutions\n:class: dropdown\n\nhi\n```"
    assert c.markdown("chapters/01_a", block) == (
        "## A section\n$$\nx\n\\tag{1}\n$$\n<details>\n<summary>Solutions</summary>\n\nhi\n\n</details>")


def test_converter_names_what_it_cannot_resolve():
    c = converter()
    for text, message in (("{cite}`nobody`", "citation key 'nobody'"), ("{eq}`eq-none`", "no equation"),
                          ("{doc}`missing`", "no page"), ("{foo}`bar`", "role {foo}"),
                          ("```{figure} x.png\n```", "directive {figure}")):
        with pytest.raises(colab_markdown.NotebookTextError, match=re.escape(message)):
            c.markdown("chapters/01_a", text)


# Chapters quick enough to run twice in CI (the book build runs them all from their .md): the first and the
# one that reads recorded results from ../results, which a notebook opened alone does not have.
ALONE = ["00_read_me_first", "11_profiling"]


@pytest.mark.parametrize("chapter", ALONE)
def test_notebook_runs_alone_outside_the_repository_and_prints_its_glued_numbers(root, tmp_path, chapter):
    """As in Colab: the .ipynb by itself in an empty folder, gdn2edu imported from where it is installed.
    Every number the text names must be printed by the cell that glues it."""
    import nbclient
    import nbformat
    notebook_path = tmp_path / f"{chapter}.ipynb"
    shutil.copy(root / "chapters" / notebook_path.name, notebook_path)
    notebook = nbformat.read(notebook_path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "\n".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                        for output in cell.get("outputs", []) if output.get("output_type") == "stream")
    named = set(re.findall(r"\{glue(?::\w+)?\}`([\w.-]+)", (root / "chapters" / f"{chapter}.md").read_text()))
    missing = sorted(name for name in named if not re.search(rf"^{re.escape(name)} = ", printed, re.M))
    assert not missing, f"{chapter}.ipynb: glued numbers named in the text but never printed: {missing}"
    assert named or chapter == "00_read_me_first"
