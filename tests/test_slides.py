"""The lecture kit: tools/slides.py builds a reveal.js deck per chapter from the chapter sources.

The decks tested are conftest's SLIDE_CHAPTERS, built from scratch once a session (tests/test_browser.py
opens one of them in Chromium).
"""

import importlib.util
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import nbformat
import pytest
import yaml
from bs4 import BeautifulSoup
from conftest import SLIDE_CHAPTERS as CHAPTERS
from conftest import mathjax_checker, visible_text

RAW_MYST = re.compile(r"\{[a-z]+(?::[a-z]+)?\}`|:::\{|```\{|^\([\w-]+\)=\s*$|^:label:|^:class:", re.M)
FIGURE_MIMES = ("image/svg+xml", "image/png")


def load_slides(root):
    spec = importlib.util.spec_from_file_location("gdn2edu_tools_slides", root / "tools" / "slides.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module                      # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


def expected_figures(executed):
    count = 0
    for cell in executed.cells:
        for out in cell.get("outputs", []):
            if "scrapbook" not in out.get("metadata", {}) and any(m in out.get("data", {}) for m in FIGURE_MIMES):
                count += 1
    return count


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_deck_is_built_complete_and_clean(root, built_slides, chapter):
    deck_path = built_slides / "slides" / f"{chapter}.slides.html"
    assert deck_path.exists() and deck_path.stat().st_size > 2000
    soup = BeautifulSoup(deck_path.read_text(), "html.parser")
    source = (root / "chapters" / f"{chapter}.md").read_text()

    # non-empty: a title slide with the chapter's title, and one slide (stack) per ## section
    slides = soup.select("div.slides > section")
    title = re.search(r"^# (.+)$", source, flags=re.M).group(1)
    assert slides[0].h1 and slides[0].h1.get_text().strip() == title.replace("`", "")
    sections = re.findall(r"^## (.+)$", source, flags=re.M)
    assert len(slides) == 1 + len(sections) and len(sections) >= 3

    # every figure the executed chapter drew is in the deck, and written as a standalone file
    executed = nbformat.read(built_slides / "executed" / f"{chapter}.ipynb", as_version=4)
    n_fig = expected_figures(executed)
    images = soup.select("img.figure")
    assert len(images) == n_fig
    files = sorted((built_slides / "figures" / chapter).glob("fig-*"))
    assert len(files) == n_fig
    for image, path in zip(images, files):
        assert path.suffix == ".svg"
        assert ET.parse(path).getroot().tag.endswith("svg")
        assert image["src"].startswith("data:image/svg+xml;base64,")

    # no raw MyST, no unresolved glue, in what the audience sees
    text = visible_text(soup)
    assert not RAW_MYST.search(text), RAW_MYST.search(text)
    assert "{glue" not in text and "{cite" not in text and "{eq" not in text

    # MathJax with the book's macros, reveal.js
    config = yaml.safe_load((root / "_config.yml").read_text())
    macros = config["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    script = "\n".join(s.get_text() for s in soup.find_all("script"))
    assert "Reveal.initialize" in script and "RevealMath.MathJax3" in script
    assert all(f'"{name}"' in script for name in macros)


def test_index_links_every_deck(built_slides):
    soup = BeautifulSoup((built_slides / "slides" / "index.html").read_text(), "html.parser")
    links = {a["href"] for a in soup.find_all("a")}
    assert {f"{chapter}.slides.html" for chapter in CHAPTERS} <= links


def labelled_equations(path):
    return re.findall(r"^\$\$ *\(([\w-]+)\)\s*$", path.read_text(), flags=re.M)


def test_chapter_with_figures_has_its_figures_and_numbered_equations(root, built_slides):
    chapter = "02_unrolling_one_chunk"
    soup = BeautifulSoup((built_slides / "slides" / f"{chapter}.slides.html").read_text(), "html.parser")
    assert len(soup.select("img.figure")) >= 2
    # the book numbers labelled equations through the whole book, in _toc.yml order (Sphinx's numfig, which
    # Jupyter Book turns on, with no numbered sections): Chapter 2 goes on from where the pages before it end
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    docs = [toc["root"], *(entry["file"] for part in toc["parts"] for entry in part["chapters"])]
    before = sum(len(labelled_equations(root / f"{doc}.md")) for doc in docs[:docs.index(f"chapters/{chapter}")])
    count = len(labelled_equations(root / "chapters" / f"{chapter}.md"))
    tags = [int(t) for t in re.findall(r"\\tag\{(\d+)\}", soup.decode())]
    assert before > 0 and sorted(tags) == list(range(before + 1, before + count + 1))   # each, once
    text = visible_text(soup)
    assert "Definition 2 (The chunk system)" in text                # the prf:definition box, numbered as in the book
    assert "(Hatamizadeh et al., 2026)" in text                     # a citation, resolved from the bib


def test_deck_numbers_equations_and_definitions_as_the_book_does(built_book, built_slides):
    """A slide shows the number that the built site shows for the same equation or definition."""
    def words(node):
        return " ".join(node.get_text().split())

    for chapter in CHAPTERS:
        book = BeautifulSoup((built_book / "chapters" / f"{chapter}.html").read_text(), "html.parser")
        deck = BeautifulSoup((built_slides / "slides" / f"{chapter}.slides.html").read_text(), "html.parser")
        book_numbers = [int(re.search(r"\d+", n.get_text()).group()) for n in book.select(".math .eqno")]
        deck_numbers = [int(t) for t in re.findall(r"\\tag\{(\d+)\}", deck.decode())]
        assert sorted(deck_numbers) == sorted(book_numbers), chapter
        deck_titles = {words(title) for title in deck.select(".box-title")}
        for title in book.select("div.proof > p.admonition-title"):
            assert words(title) in deck_titles, (chapter, words(title), deck_titles)


def test_every_deck_formula_typesets_in_mathjax(root, built_slides):
    """The decks' formulas, with the book's macros, through MathJax 3 in node: no TeX errors."""
    node, checker = mathjax_checker(root)
    config = yaml.safe_load((root / "_config.yml").read_text())
    macros = config["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    formulas = []
    for chapter in CHAPTERS:
        deck = (built_slides / "slides" / f"{chapter}.slides.html").read_text()
        text = visible_text(BeautifulSoup(deck, "html.parser"))
        for display, tex in [(False, m) for m in re.findall(r"\\\((.+?)\\\)", text, flags=re.S)] + \
                            [(True, m) for m in re.findall(r"\\\[(.+?)\\\]", text, flags=re.S)]:
            formulas.append({"page": chapter, "tex": tex, "display": display})
    assert len(formulas) > 30
    result = subprocess.run([node, "typeset.js"], cwd=checker, input=json.dumps(
        {"macros": macros, "formulas": formulas}), capture_output=True, text=True, check=True)
    failures = json.loads(result.stdout)
    assert not failures, failures[:5]


def test_selection_rule_and_slideshow_markers(root):
    """The automatic rule, and Jupyter's slideshow metadata opting a cell in or out, on a made-up chapter."""
    slides = load_slides(root)
    long_code = "\n".join(f"x{i} = {i}" for i in range(30))
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Made up\n\n**What you will learn.** Things {cite}`hatamizadeh2026gdn2`."),
        nbformat.v4.new_markdown_cell("## One\n\nLead with $x$.\n\nAnother paragraph.\n\n"
                                      "Then:\n\n$$\na = b\n$$ (eq-made-up)\n\n"
                                      "```{admonition} Solutions\n:class: dropdown\n\nHIDDEN\n```"),
        nbformat.v4.new_code_cell("y = 1\nprint(y)"),
        nbformat.v4.new_code_cell(long_code),
        nbformat.v4.new_code_cell(long_code.replace("x", "z"),
                                  metadata={"slideshow": {"slide_type": "subslide"}}),
        nbformat.v4.new_code_cell("w = 2\nprint(w)", metadata={"slideshow": {"slide_type": "skip"}}),
        nbformat.v4.new_markdown_cell("SKIPPED PARAGRAPH", metadata={"slideshow": {"slide_type": "skip"}}),
        nbformat.v4.new_markdown_cell("Whole cell {doc}`01_token_recurrence`.",
                                      metadata={"slideshow": {"slide_type": "subslide"}}),
    ])
    convert = slides.sync.converter(slides.sync.book_settings())
    convert.equations["eq-made-up"] = ("chapters/99_made_up", 1)
    deck, figures = slides.build_deck(root / "chapters" / "99_made_up.md", nb, convert)
    soup = BeautifulSoup(deck, "html.parser")
    text = visible_text(soup)
    code = soup.get_text()
    assert figures == []
    assert "Lead with" in text and "Another paragraph" not in text      # a section's first paragraph only
    assert "\\tag{1}" in soup.decode() and "Then:" in text               # the equation and its lead-in
    assert "HIDDEN" not in text and "SKIPPED" not in text               # folded solutions, skip marker
    assert "y = 1" in code and "x29 = 29" not in code                   # short code in, long code out
    assert "z29 = 29" in code and "w = 2" not in code                   # opted in, opted out
    assert "The token recurrence" in text                               # a whole marked cell, roles resolved
    assert not RAW_MYST.search(text)


def test_chapters_argument_takes_a_number_or_a_file_stem(root, monkeypatch):
    """`--chapters 2`, `02`, the file stem and its slug name Chapter 2 (each chapter built once); `1` is
    Chapter 1, not 10 to 12."""
    slides = load_slides(root)
    built = []
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setattr(slides, "write_chapter", lambda path, *args, **kwargs: built.append(path.stem))
    monkeypatch.setattr(slides, "write_index", lambda *args: None)
    assert slides.main(["--chapters", "2", "02", "02_unrolling_one_chunk", "unrolling_one_chunk", "1"]) == 0
    assert built == ["02_unrolling_one_chunk", "01_token_recurrence"]


def test_unknown_chapter_is_an_error_naming_the_argument(root, capsys):
    slides = load_slides(root)
    with pytest.raises(SystemExit) as stop:
        slides.main(["--chapters", "2", "13"])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "argument --chapters: no chapter '13'" in error and "12_gdn2_layer" in error
