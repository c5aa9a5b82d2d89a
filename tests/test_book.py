"""Build the whole book from scratch, warnings as errors, and look at the rendered pages."""

import json
import re
import subprocess

import yaml
from bs4 import BeautifulSoup
from conftest import mathjax_checker


def chapter_pages(root):
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    return [entry["file"] for part in toc["parts"] for entry in part["chapters"]
            if entry["file"].startswith("chapters/")]


def page(built_book, name):
    return BeautifulSoup((built_book / f"{name}.html").read_text(), "html.parser")


def test_every_chapter_executed_and_rendered(root, built_book):
    for name in chapter_pages(root):
        soup = page(built_book, name)
        assert soup.select(".cell_output"), f"{name}: no cell outputs, was it executed?"
        assert not soup.select(".output.error, .output.traceback"), f"{name}: error output"


def test_colab_links_open_the_ipynb_pair(root, built_book):
    config = yaml.safe_load((root / "_config.yml").read_text())
    slug = config["repository"]["url"].rstrip("/").split("github.com/")[-1]
    for name in chapter_pages(root):
        links = [a["href"] for a in page(built_book, name).find_all("a", href=True)
                 if "colab.research.google.com" in a["href"]]
        expected = f"https://colab.research.google.com/github/{slug}/blob/main/{name}.ipynb"
        assert links and all(link == expected for link in links), (name, links)
        assert (root / f"{name}.ipynb").exists()


def test_math_is_rendered_not_raw(root, built_book):
    """Every $...$ became a MathJax element: no dollar signs left in prose outside code and math."""
    for name in chapter_pages(root) + ["book/notation", "book/intro"]:
        soup = page(built_book, name)
        article = soup.find("article") or soup
        for node in article.select("pre, code, .math, script, .highlight"):
            node.decompose()
        text = article.get_text(" ")
        assert not re.search(r"\$[^$\s][^$]*\$", text), f"{name}: raw math left: {text[text.find('$') - 60:][:160]}"
        assert article.select_one("h1"), name
    soup = page(built_book, "chapters/01_token_recurrence")
    assert len(soup.select(".math")) > 20


def test_citations_and_glue_resolved(built_book):
    soup = page(built_book, "chapters/01_token_recurrence")
    text = soup.get_text(" ")
    assert "Hatamizadeh" in text, "bibliography citations did not resolve"
    assert "{glue" not in text and "{cite" not in text and "{eq" not in text


def test_every_formula_typesets_in_mathjax(root, built_book):
    """Typeset each formula of the built pages with MathJax 3 in node: no TeX errors, no unknown macros."""
    node, checker = mathjax_checker(root)
    config = yaml.safe_load((root / "_config.yml").read_text())
    macros = config["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    formulas = []
    for html in sorted(built_book.rglob("*.html")):
        for node_ in BeautifulSoup(html.read_text(), "html.parser").select(".math"):
            for number in node_.select(".eqno"):          # "(1.1)#": the label, not TeX
                number.decompose()
            text = node_.get_text().strip()
            display = text.startswith("\\[")
            formulas.append({"page": html.name, "tex": text[2:-2], "display": display})
    assert len(formulas) > 50
    result = subprocess.run([node, "typeset.js"], cwd=checker, input=json.dumps(
        {"macros": macros, "formulas": formulas}), capture_output=True, text=True, check=True)
    failures = json.loads(result.stdout)
    assert not failures, failures[:5]
