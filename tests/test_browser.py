"""The built site in a real browser (headless Chromium, see tests/browser.py): at a desktop and a phone width,
on every page, math is typeset without errors, every image loads, each chapter has its Colab link to its
.ipynb pair, and no display equation, code cell or output is cut off (wide blocks scroll).

And one lecture deck (tools/slides.py): reveal.js starts with a slide per section of the deck's file, its
math is typeset without errors, its figures load, nothing it asks for fails to load, and next() walks it to
its last slide."""

import re

import pytest
import yaml
from bs4 import BeautifulSoup
from conftest import npm_packages, visible_text

import browser

WIDTHS = (1280, 390)
ARTIFACTS = "tests/artifacts"           # the screenshot lands here (git ignores it)


def pages(root):
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    return [toc["root"]] + [entry["file"] for part in toc["parts"] for entry in part["chapters"]]


@pytest.fixture(scope="module")
def node_modules(root):
    """The npm packages tests/mathjax installs: MathJax 3's and reveal.js's browser builds, which the server
    hands out in place of the CDN copies that the pages and the decks name."""
    return npm_packages(root)


@pytest.fixture(scope="module")
def chromium():
    executable = browser.find_chromium()
    if executable is None:
        pytest.fail("Chromium is needed for the browser test: `apt-get install -y chromium` (see README)")
    page = browser.Chromium(executable)
    yield page
    page.close()


@pytest.fixture(scope="module")
def reports(root, built_book, node_modules, chromium):
    """{(page, width): what the page reports} for every page of the table of contents at both widths."""
    found = {}
    with browser.Site(built_book, node_modules) as url:
        for width in WIDTHS:
            chromium.set_width(width)
            for name in pages(root):
                chromium.open(f"{url}/{name}.html")
                found[name, width] = chromium.evaluate(browser.PAGE_REPORT)
                if name == "chapters/01_token_recurrence" and width == WIDTHS[0]:
                    out = root / ARTIFACTS
                    chromium.screenshot(out / f"01_token_recurrence_{width}px.png")
    return found


def check_math(report, where):
    """What browser.PAGE_REPORT found of the math on one page: MathJax typeset every formula, without an error."""
    if report["math"]:
        assert report["mathjaxLoaded"], f"{where}: MathJax did not load"
        assert report["typeset"] == report["math"], f"{where}: formulas left untypeset"
    assert not report["merror"], f"{where}: MathJax errors {report['merror'][:3]}"
    assert not report["undefinedMacros"], f"{where}: undefined macros {report['undefinedMacros'][:3]}"


def test_math_is_typeset_without_errors(reports):
    for (name, width), report in reports.items():
        check_math(report, f"{name} at {width}px")
    assert sum(r["math"] for (_, w), r in reports.items() if w == WIDTHS[0]) > 300


def test_every_image_loads(reports):
    for (name, width), report in reports.items():
        assert not report["brokenImages"], f"{name}: images that do not load {report['brokenImages'][:3]}"
    assert sum(len(r["images"]) for (n, w), r in reports.items() if n.startswith("chapters/") and w == 1280) > 10


def test_each_chapter_has_a_colab_link_to_its_notebook(root, reports):
    for (name, width), report in reports.items():
        if name.startswith("chapters/"):
            assert report["colab"], f"{name}: no Colab launch link"
            assert all(link.endswith(f"/{name}.ipynb") for link in report["colab"]), report["colab"]
            assert (root / f"{name}.ipynb").exists()


@pytest.mark.parametrize("width", WIDTHS)
def test_no_block_is_cut_off(reports, width):
    clipped = {name: r["clipped"] for (name, w), r in reports.items() if w == width and r["clipped"]}
    assert not clipped, f"at {width}px, blocks wider than their box that do not scroll: {clipped}"


def test_a_chapter_screenshot_is_kept(root, reports):
    shot = root / ARTIFACTS / f"01_token_recurrence_{WIDTHS[0]}px.png"
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


DECK = "02_unrolling_one_chunk"          # of conftest's SLIDE_CHAPTERS, the one with figures and equations


@pytest.fixture(scope="module")
def deck(built_slides, node_modules, chromium):
    """(the deck's HTML parsed, what the page reports, what the deck reports, the loads that failed) for DECK
    opened in Chromium at a desktop's size."""
    path = built_slides / "slides" / f"{DECK}.slides.html"
    with browser.Site(path.parent, node_modules) as url:
        chromium.set_width(1280, 800)
        chromium.open(f"{url}/{path.name}")
        deck_report = chromium.evaluate(browser.DECK_REPORT)       # first: it waits for reveal.js and MathJax
        page_report = chromium.evaluate(browser.PAGE_REPORT)
        failed = chromium.failed_loads()
    return BeautifulSoup(path.read_text(), "html.parser"), page_report, deck_report, failed


def test_deck_loads_all_it_names(deck):
    *_, failed = deck
    assert not failed, f"{DECK}: what the deck asks for that did not load: {failed[:5]}"


def test_deck_starts_with_a_slide_per_section(deck):
    soup, _, report, _ = deck
    assert report["ready"], f"{DECK}: reveal.js did not start"
    sections = soup.select("div.slides > section")
    leaves = [s for s in soup.select("div.slides section") if not s.find("section")]
    assert len(sections) > 3 and len(leaves) > len(sections)
    assert (report["horizontal"], report["total"]) == (len(sections), len(leaves))


def test_deck_math_is_typeset_without_errors(deck):
    soup, page, report, _ = deck
    check_math(page, DECK)
    assert not report["rawTex"], f"{DECK}: TeX left as text {report['rawTex'][:3]}"
    in_file = len(re.findall(r"\\[([]", visible_text(soup)))        # \( and \[ outside code
    assert report["formulas"] == in_file > 20, f"{DECK}: {report['formulas']} formulas typeset of {in_file}"
    assert report["formulasAfterWalk"] == report["formulas"], \
        f"{DECK}: changing slides typeset formulas again, {report['formulasAfterWalk']} of them after the walk"


def test_deck_figures_load(deck):
    soup, page, _, _ = deck
    assert len(page["images"]) == len(soup.find_all("img")) >= 2
    assert not page["brokenImages"], f"{DECK}: images that do not load {page['brokenImages'][:3]}"


def test_deck_walks_to_its_last_slide(deck):
    soup, _, report, _ = deck
    assert report["ready"], f"{DECK}: reveal.js did not start"
    assert report["visited"] == report["total"], f"next() showed {report['visited']} of {report['total']} slides"
    assert report["isLastSlide"] and report["lastShown"]
    sections = soup.select("div.slides > section")
    last = (len(sections) - 1, max(len(sections[-1].find_all("section", recursive=False)) - 1, 0))
    assert (report["last"]["h"], report["last"]["v"]) == last
