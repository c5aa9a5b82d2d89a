"""The built site in a real browser (headless Chromium, see tests/browser.py): at a desktop and a phone width,
on every page, math is typeset without errors, every image loads, each chapter has its Colab link to its
.ipynb pair, and no display equation, code cell or output is cut off (wide blocks scroll)."""

import shutil
import subprocess

import pytest
import yaml

import browser

WIDTHS = (1280, 390)
ARTIFACTS = "tests/artifacts"           # the screenshot lands here (git ignores it)


def pages(root):
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    return [toc["root"]] + [entry["file"] for part in toc["parts"] for entry in part["chapters"]]


@pytest.fixture(scope="module")
def mathjax(root):
    """MathJax 3's browser build from the npm package tests/mathjax installs (the pages name a CDN copy)."""
    checker = root / "tests" / "mathjax"
    if not (checker / "node_modules" / "mathjax-full").exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is needed to install MathJax for the browser test (see README)")
        subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund"], cwd=checker, check=True)
    return checker / "node_modules" / "mathjax-full" / "es5"


@pytest.fixture(scope="module")
def chromium():
    executable = browser.find_chromium()
    if executable is None:
        pytest.fail("Chromium is needed for the browser test: `apt-get install -y chromium` (see README)")
    page = browser.Chromium(executable)
    yield page
    page.close()


@pytest.fixture(scope="module")
def reports(root, built_book, mathjax, chromium):
    """{(page, width): what the page reports} for every page of the table of contents at both widths."""
    found = {}
    with browser.Site(built_book, mathjax) as url:
        for width in WIDTHS:
            chromium.set_width(width)
            for name in pages(root):
                chromium.open(f"{url}/{name}.html")
                found[name, width] = chromium.evaluate(browser.PAGE_REPORT)
                if name == "chapters/01_token_recurrence" and width == WIDTHS[0]:
                    out = root / ARTIFACTS
                    chromium.screenshot(out / f"01_token_recurrence_{width}px.png")
    return found


def test_math_is_typeset_without_errors(reports):
    for (name, width), report in reports.items():
        if report["math"]:
            assert report["mathjaxLoaded"], f"{name}: MathJax did not load"
            assert report["typeset"] == report["math"], f"{name} at {width}px: formulas left untypeset"
        assert not report["merror"], f"{name} at {width}px: MathJax errors {report['merror'][:3]}"
        assert not report["undefinedMacros"], f"{name} at {width}px: undefined macros {report['undefinedMacros'][:3]}"
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
