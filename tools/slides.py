"""Build a reveal.js lecture deck per chapter from the chapter sources.

    python tools/slides.py                      # every chapter: _build/slides/NN_slug.slides.html
    python tools/slides.py --chapters 2 03      # only these chapters (by number, 2 or 02, or file stem)
    python tools/slides.py --jobs 2             # execute two chapters at a time

What goes into a deck is chosen by a rule, so that nobody has to mark up the chapters:

- a title slide: the chapter's title and its "What you will learn" paragraph;
- one slide per ``##`` section (a vertical stack of sub-slides), holding the section's first paragraph and its
  displayed equations and definitions, each equation led in by the last sentence before it;
- one sub-slide per executed figure, with the sentence after the figure's cell as its caption;
- one sub-slide per short code cell (at most ``SHORT_CODE_LINES`` lines, not hidden, not only imports), with
  its printed output if that is short too;
- "Takeaways" and "Exercises" in full (the folded solutions stay folded: they are left out).

A cell can opt in or out with Jupyter's own slideshow metadata, which jupytext keeps in the MyST source
(``+++ {"slideshow": {"slide_type": "subslide"}}`` above a Markdown cell, a ``slideshow:`` entry in a code
cell's option block): ``slide`` or ``subslide`` puts the whole cell on a sub-slide of its own, ``skip`` keeps
it out of the deck.

The figures come from executing the chapter (jupytext + nbclient, the same kernel the book build uses), with
matplotlib asked for SVG. Each figure is embedded in the deck and also written, standalone, to
``_build/figures/NN_slug/fig-KK.svg`` for lecturers' own slides. Executed notebooks are cached under
``_build/slides/.executed/`` and reused while the chapter, the package ``gdn2edu/`` and the execution
settings are unchanged, so a second run costs seconds.

MyST roles go through the converter that writes the .ipynb pairs (tools/colab_markdown.py, set up by
tools/sync.py), so a deck cites, names and numbers as the book does: equations and definitions carry their
book-wide numbers. Only ``{glue:text}`` differs: a deck shows the value, from the executed notebook's glue
outputs with myst-nb's own formatter. Equations are typeset by MathJax 3 with the book's macros from
``_config.yml``; reveal.js and MathJax load from a CDN (pinned versions), as the book's own pages load MathJax.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import colab_markdown  # noqa: E402
import sync  # noqa: E402

ROOT = sync.ROOT
OUT_DIR = ROOT / "_build" / "slides"
FIGURE_DIR = ROOT / "_build" / "figures"
REVEAL = "https://cdn.jsdelivr.net/npm/reveal.js@5.1.0"
# TeX input only: reveal.js's math plugin typesets the whole page again on every slide change, and MathJax's
# MathML input would then typeset the hidden MathML it keeps beside each formula for screen readers, once
# more at every change (tests/test_browser.py counts the formulas after walking a deck)
MATHJAX = "https://cdn.jsdelivr.net/npm/mathjax@3.2.2/es5/tex-chtml.js"
SHORT_CODE_LINES = 14
SHORT_OUTPUT_LINES = 8
EQUATIONS_PER_SLIDE = 2
SETUP_SOURCE = "%config InlineBackend.figure_formats = ['svg']"
HIDDEN_TAGS = {"remove-cell", "remove-input", "hide-input", "hide-cell", "colab-install"}
FIGURE_MIMES = ("image/svg+xml", "image/png")


# ---------------------------------------------------------------------------------------------------------
# the book: chapters and their names


def chapter_paths() -> list[Path]:
    """The chapters in _toc.yml order."""
    return [ROOT / f"{doc}.md" for doc in sync.book_settings()["chapters"] if doc.startswith("chapters/")]


def chapter_argument(value: str) -> Path:
    """The chapter a --chapters value names: its number (2 or 02), its file stem or the stem's slug."""
    chapters = chapter_paths()
    for path in chapters:
        number, _, slug = path.stem.partition("_")
        if value in (path.stem, slug) or (value.isdigit() and number.isdigit() and int(value) == int(number)):
            return path
    raise argparse.ArgumentTypeError(
        f"no chapter {value!r}: give a number (2 or 02) or a file stem, one of {', '.join(p.stem for p in chapters)}")


def chapter_name(doc: str, convert: colab_markdown.Converter) -> str:
    """'Chapter 2 (Unrolling one chunk)' for chapters, the title for other pages."""
    stem = doc.rsplit("/", 1)[-1]
    title = convert.titles.get(doc, stem)
    number = re.match(r"(\d\d)_", stem)
    return f"Chapter {int(number.group(1))} ({title})" if number else title


# ---------------------------------------------------------------------------------------------------------
# execution, with a cache


def source_hash(md_path: Path) -> str:
    digest = hashlib.sha256(md_path.read_bytes())
    # the package it imports and the recorded results it reads (Chapters 8-12 read ../results)
    for source in sorted((ROOT / "gdn2edu").glob("*.py")) + sorted((ROOT / "results").glob("*.json")):
        digest.update(source.read_bytes())
    digest.update(SETUP_SOURCE.encode())          # how the chapter is executed (not how the deck is drawn)
    return digest.hexdigest()


def use_this_checkout():
    """Kernels started from here import this checkout's gdn2edu, whatever is installed."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])


def executed_notebook(md_path: Path, timeout: int = 900, log=print, cache_dir: Path | None = None):
    """The chapter as a notebook with outputs: from the cache, or executed now (figures as SVG)."""
    import jupytext
    import nbclient
    import nbformat

    cache = (cache_dir or OUT_DIR / ".executed") / f"{md_path.stem}.ipynb"
    wanted = source_hash(md_path)
    if cache.exists():
        nb = nbformat.read(cache, as_version=4)
        if nb.metadata.get("gdn2edu_slides", {}).get("source_hash") == wanted:
            return nb
    log(f"executing {md_path.relative_to(ROOT)} ...")
    nb = jupytext.read(md_path)
    nb.cells.insert(0, nbformat.v4.new_code_cell(SETUP_SOURCE))
    use_this_checkout()
    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(md_path.parent)}}).execute()
    nb.cells.pop(0)
    nb.metadata["gdn2edu_slides"] = {"source_hash": wanted}
    cache.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, cache)
    return nb


def glue_values(nb) -> dict[str, str]:
    """name -> text/plain of every myst-nb glue output of an executed notebook."""
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if meta:
                data = out.get("data", {})
                text = data.get(meta.get("mime_prefix", "") + "text/plain", data.get("text/plain"))
                if text is not None:
                    values[meta["name"]] = text
    return values


def figures_of(cell) -> list[tuple[str, str]]:
    """(mime, data) of each figure a code cell displayed, SVG preferred."""
    found = []
    for out in cell.get("outputs", []):
        if out.get("output_type") not in ("display_data", "execute_result"):
            continue
        if "scrapbook" in out.get("metadata", {}):
            continue
        for mime in FIGURE_MIMES:
            if mime in out.get("data", {}):
                data = out["data"][mime]
                found.append((mime, "".join(data) if isinstance(data, list) else data))
                break
    return found


# ---------------------------------------------------------------------------------------------------------
# MyST Markdown -> blocks -> HTML


@dataclass
class Block:
    kind: str                      # heading, para, math, directive, table, code
    text: str = ""
    level: int = 0
    label: str = ""
    name: str = ""                 # directive name
    arg: str = ""                  # directive argument
    options: dict = field(default_factory=dict)
    cell: object = None            # the code cell, for kind == "code"
    slide_type: str = ""           # Jupyter slideshow metadata of the cell it came from


def split_blocks(text: str) -> list[Block]:
    """A Markdown cell's text as blocks: headings, paragraphs (lists included), tables, math, directives."""
    lines, blocks, i = text.split("\n"), [], 0
    para: list[str] = []

    def flush():
        if any(line.strip() for line in para):
            body = "\n".join(para).strip("\n")
            blocks.append(Block("table" if body.lstrip().startswith("|") else "para", body))
        para.clear()

    while i < len(lines):
        line = lines[i]
        fence = colab_markdown.FENCE.match(line)
        directive = fence and colab_markdown.DIRECTIVE.match(fence.group("rest").strip())
        if colab_markdown.TARGET.match(line):
            flush()
            i += 1
        elif line.startswith("#"):
            flush()
            hashes = len(line) - len(line.lstrip("#"))
            blocks.append(Block("heading", line[hashes:].strip(), level=hashes))
            i += 1
        elif line.startswith("$$"):
            flush()
            body, i = [line[2:]], i + 1
            closing = re.match(r"^(.*)\$\$ *(?:\(([\w-]+)\))?\s*$", line[2:]) if line[2:].strip() else None
            if not closing:
                while i < len(lines) and not lines[i].startswith("$$"):
                    body.append(lines[i])
                    i += 1
                closing = colab_markdown.EQ_LABEL.match(lines[i]) if i < len(lines) else None
                label = closing.group("label") if closing else ""
                i += 1
            else:
                body, label = [closing.group(1)], closing.group(2) or ""
            blocks.append(Block("math", "\n".join(body).strip(), label=label or ""))
        elif directive:
            flush()
            end, body = colab_markdown.split_fenced(lines, i)
            options, body = colab_markdown.directive_options(body)
            blocks.append(Block("directive", "\n".join(body).strip("\n"), name=directive.group("name"),
                                arg=directive.group("arg").strip(), options=options))
            i = end + 1
        elif re.match(r"^\s*(`{3,}|~{3,})[\w-]*\s*$", line):       # a plain code fence: keep it whole
            marker = re.match(r"^\s*(`{3,}|~{3,})", line).group(1)
            para.append(line)
            i += 1
            while i < len(lines) and lines[i].strip() != marker:
                para.append(lines[i])
                i += 1
            if i < len(lines):
                para.append(lines[i])
            i += 1
        elif not line.strip():
            flush()
            i += 1
        else:
            para.append(line)
            i += 1
    flush()
    return blocks


class Renderer:
    """MyST text of one chapter -> HTML for reveal.js: roles resolved by the book's converter (as in the
    .ipynb pairs) but glued numbers shown as values, math left to MathJax."""

    def __init__(self, doc: str, convert: colab_markdown.Converter, glued: dict[str, str]):
        from markdown_it import MarkdownIt
        from mdit_py_plugins.dollarmath import dollarmath_plugin

        self.doc, self.glued = doc, glued
        self.convert = convert.with_glue(self.glued_text)
        self.md = MarkdownIt("commonmark", {"html": False}).enable("table")
        self.md.use(dollarmath_plugin, allow_labels=False, double_inline=True)
        self.md.add_render_rule("math_inline", lambda _renderer, tokens, idx, *_: (
            "\\(" + html.escape(tokens[idx].content) + "\\)"))
        self.md.add_render_rule("math_inline_double", lambda _renderer, tokens, idx, *_: (
            "\\[" + html.escape(tokens[idx].content) + "\\]"))
        self.md.add_render_rule("math_block", lambda _renderer, tokens, idx, *_: (
            '<div class="math">\\[' + html.escape(tokens[idx].content) + "\\]</div>"))

    def glued_text(self, name: str, spec: str) -> str:
        """A glued value as the book prints it, with myst-nb's own formatter."""
        from myst_nb.core.variables import format_plain_text

        if name not in self.glued:
            raise KeyError(f"{self.doc}: nothing glued under {name!r}")
        return format_plain_text(self.glued[name], spec or "s")

    def inline(self, text: str) -> str:
        """Markdown (one or more paragraphs, lists, tables) -> HTML."""
        return self.md.render(self.convert.markdown(self.doc, text))

    def math(self, block: Block) -> str:
        """A displayed equation, tagged with its number in the book when it is labelled."""
        number = self.convert.equations.get(block.label, (None, None))[1]
        tag = f"\\tag{{{number}}}" if number is not None else ""
        return f'<div class="math">\\[{html.escape(block.text)}{tag}\\]</div>'

    def directive(self, block: Block) -> str:
        """A directive as a titled box; a sphinx-proof block named and numbered as in the book."""
        if block.name.startswith("prf:"):
            numbered = self.convert.numbered(block.name.split(":", 1)[1].capitalize(), block.options.get("label"))
            title = f"{numbered} ({self.inline_text(block.arg)})" if block.arg else numbered
        else:
            title = self.inline_text(block.arg) if block.arg else block.name.capitalize()
        body = []
        for inner in split_blocks(block.text):
            if inner.kind == "math":
                body.append(self.math(inner))
            elif inner.kind in ("para", "table"):
                body.append(self.inline(inner.text))
            elif inner.kind == "directive":
                body.append(self.directive(inner))
        return f'<div class="box"><p class="box-title">{title}</p>{"".join(body)}</div>'

    def inline_text(self, text: str) -> str:
        rendered = self.inline(text).strip()
        return re.sub(r"^<p>(.*)</p>$", r"\1", rendered, flags=re.S)


# ---------------------------------------------------------------------------------------------------------
# the deck


def _slide_type(cell) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "")


def chapter_blocks(nb) -> list[Block]:
    """The notebook as one stream of blocks, code cells included, in reading order."""
    stream = []
    for cell in nb.cells:
        slide_type = _slide_type(cell)
        if cell.cell_type == "markdown":
            if slide_type in ("slide", "subslide"):
                stream.append(Block("marked", cell.source, slide_type=slide_type))
                continue
            for block in split_blocks(cell.source):
                block.slide_type = slide_type
                stream.append(block)
        elif cell.cell_type == "code":
            stream.append(Block("code", cell.source, cell=cell, slide_type=slide_type))
    return stream


def _is_short_code(cell) -> bool:
    tags = set(cell.get("metadata", {}).get("tags", []))
    lines = [line for line in cell.source.splitlines() if line.strip()]
    if tags & HIDDEN_TAGS or not lines or len(lines) > SHORT_CODE_LINES:
        return False
    only_imports = all(re.match(r"^(import |from \S+ import |_ = torch\.manual_seed|#)", line) for line in lines)
    return not only_imports


def _last_sentence(text: str, max_words: int = 45) -> str:
    if text.lstrip().startswith(("-", "|", "1.")):
        return ""
    sentences = re.split(r"(?<=[.:;])\s+(?=[A-Z*({])", text.strip())
    last = sentences[-1] if sentences else ""
    return last if len(last.split()) <= max_words else ""


def _first_sentence(text: str, max_words: int = 45) -> str:
    if text.lstrip().startswith(("-", "|", "1.")):
        return ""
    first = re.split(r"(?<=[.:;])\s+(?=[A-Z*({])", text.strip())[0]
    return first if len(first.split()) <= max_words else ""


def _code_html(cell) -> str:
    out = [f'<pre><code class="language-python" data-trim data-noescape>{html.escape(cell.source)}</code></pre>']
    text = "".join(
        "".join(o["text"]) if isinstance(o.get("text"), list) else o.get("text", "")
        for o in cell.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stdout")
    if text.strip() and len(text.strip().splitlines()) <= SHORT_OUTPUT_LINES:
        out.append(f'<pre class="output">{html.escape(text.strip())}</pre>')
    return "".join(out)


def _figure_html(mime: str, data: str, alt: str) -> str:
    payload = data.encode() if mime == "image/svg+xml" else None
    encoded = base64.b64encode(payload).decode() if payload is not None else data.replace("\n", "")
    return f'<img class="figure" alt="{html.escape(alt)}" src="data:{mime};base64,{encoded}">'


def build_deck(md_path: Path, nb, convert: colab_markdown.Converter) -> tuple[str, list[tuple[str, str]]]:
    """The deck's HTML and the chapter's figures [(mime, data)], in order."""
    doc = md_path.relative_to(ROOT).with_suffix("").as_posix()
    render = Renderer(doc, convert, glue_values(nb))
    stream = chapter_blocks(nb)

    title = next((b.text for b in stream if b.kind == "heading" and b.level == 1), md_path.stem)
    sections: list[tuple[str, list[Block]]] = [("", [])]
    for block in stream:
        if block.kind == "heading" and block.level == 1:
            continue
        if block.kind == "heading" and block.level == 2:
            sections.append((block.text, []))
        else:
            sections[-1][1].append(block)

    figures: list[tuple[str, str]] = []
    slides: list[str] = []
    intro = [render.inline(b.text) for b in sections[0][1] if b.kind == "para" and b.slide_type != "skip"]
    slides.append(f'<section><h1>{render.inline_text(title)}</h1>{"".join(intro[:2])}'
                  f'<p class="source">{html.escape(doc)}.md</p></section>')

    for heading, blocks in sections[1:]:
        heading_html = render.inline_text(heading)
        full_text = heading.lower().startswith(("takeaways", "exercises"))
        subs: list[str] = []                             # finished sub-slides of this section
        current = [f"<h2>{heading_html}</h2>"]           # the sub-slide being filled
        heavy, lead_done, previous_para, previous_shown = 0, False, "", False
        sub_heading = heading_html                       # the ### heading in force, for continuation slides

        def close(continued=True):
            nonlocal current, heavy
            if len(current) > 1 or not subs:
                subs.append("".join(current))
            current = [f"<h3>{sub_heading}</h3>"] if continued else []
            heavy = 0

        for k, block in enumerate(blocks):
            if block.slide_type == "skip":
                continue
            if block.kind == "marked":                   # opted in: the whole cell, on its own sub-slide
                close()
                subs.append(f"<h3>{sub_heading}</h3>" + render.inline(block.text))
            elif block.kind == "heading":
                close()
                sub_heading = render.inline_text(block.text)
                current = [f"<h3>{sub_heading}</h3>"]
            elif block.kind in ("para", "table"):
                fenced = block.text.lstrip().startswith(("```", "~~~"))
                shown = (full_text or (not lead_done and block.kind == "para")
                         or (fenced and previous_shown))       # the commands a shown sentence introduces
                if shown:
                    current.append(render.inline(block.text))
                    lead_done = lead_done or block.kind == "para"
                previous_para, previous_shown = block.text, shown
            elif block.kind == "math" and not full_text:
                if heavy >= EQUATIONS_PER_SLIDE:
                    close()
                lead = "" if previous_shown else _last_sentence(previous_para)
                current.append((render.inline(lead) if lead else "") + render.math(block))
                heavy += 1
                previous_para, previous_shown = "", False
            elif block.kind == "directive":
                if block.options.get("class") == "dropdown":
                    continue                                         # folded solutions stay folded
                if heavy >= EQUATIONS_PER_SLIDE:
                    close()
                current.append(render.directive(block))
                heavy += 1
            elif block.kind == "code":
                cell = block.cell
                found = figures_of(cell)
                marked = block.slide_type in ("slide", "subslide")
                after = blocks[k + 1].text if k + 1 < len(blocks) and blocks[k + 1].kind == "para" else ""
                for mime, data in found:
                    close()
                    figures.append((mime, data))
                    caption = _first_sentence(after)
                    current.append(_figure_html(mime, data, f"{title}, figure {len(figures)}")
                                   + (f'<div class="caption">{render.inline(caption)}</div>' if caption else ""))
                    close()
                if marked or (not found and _is_short_code(cell)):
                    close()
                    current.append(_code_html(cell))
                    close()
        close(continued=False)
        slides.append("<section>" + "".join(f"<section>{body}</section>" for body in subs) + "</section>")

    deck = TEMPLATE.format(title=html.escape(re.sub(r"[`*]", "", title)), reveal=REVEAL, mathjax=MATHJAX,
                           macros=json.dumps(convert.macros), slides="\n".join(slides))
    return deck, figures


TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<meta name="generator" content="gdn2edu tools/slides.py">
<link rel="stylesheet" href="{reveal}/dist/reveal.css">
<link rel="stylesheet" href="{reveal}/dist/theme/white.css">
<link rel="stylesheet" href="{reveal}/plugin/highlight/monokai.css">
<style>
.reveal {{ font-size: 28px; }}
.reveal h1 {{ font-size: 1.9em; }} .reveal h2 {{ font-size: 1.4em; }} .reveal h3 {{ font-size: 1.0em; }}
.reveal section {{ text-align: left; }}
.reveal .slides section {{ height: 100%; overflow-y: auto; }}
.reveal pre {{ font-size: 0.55em; width: 100%; box-shadow: none; }}
.reveal pre.output {{ background: #f6f6f6; padding: 0.4em; }}
.reveal img.figure {{ display: block; margin: 0 auto; max-height: 560px; max-width: 100%; }}
.reveal .caption {{ font-size: 0.7em; }}
.reveal .box {{ border-left: 6px solid #4a7ab7; background: #f3f6fb; padding: 0.2em 0.8em; margin: 0.4em 0; }}
.reveal .box-title {{ font-weight: bold; margin: 0.2em 0; }}
.reveal .source {{ font-size: 0.5em; color: #777; }}
.reveal table {{ font-size: 0.6em; }}
</style>
</head>
<body>
<div class="reveal"><div class="slides">
{slides}
</div></div>
<script src="{reveal}/dist/reveal.js"></script>
<script src="{reveal}/plugin/math/math.js"></script>
<script src="{reveal}/plugin/highlight/highlight.js"></script>
<script>
Reveal.initialize({{
  hash: true, slideNumber: true, width: 1280, height: 800,
  mathjax3: {{
    mathjax: "{mathjax}",
    tex: {{ inlineMath: [["\\\\(", "\\\\)"]], displayMath: [["\\\\[", "\\\\]"]], macros: {macros} }}
  }},
  plugins: [RevealMath.MathJax3, RevealHighlight]
}});
</script>
</body>
</html>
"""


def write_chapter(md_path: Path, convert: colab_markdown.Converter, out_dir: Path, figure_dir: Path,
                  timeout: int, log=print, cache_dir: Path | None = None):
    nb = executed_notebook(md_path, timeout=timeout, log=log, cache_dir=cache_dir)
    deck, figures = build_deck(md_path, nb, convert)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{md_path.stem}.slides.html"
    target.write_text(deck)
    chapter_figures = figure_dir / md_path.stem
    if chapter_figures.exists():
        for old in chapter_figures.iterdir():
            old.unlink()
    chapter_figures.mkdir(parents=True, exist_ok=True)
    for number, (mime, data) in enumerate(figures, start=1):
        if mime == "image/svg+xml":
            (chapter_figures / f"fig-{number:02d}.svg").write_text(data)
        else:
            (chapter_figures / f"fig-{number:02d}.png").write_bytes(base64.b64decode(data))
    log(f"wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target} "
        f"({len(figures)} figures)")
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chapters", nargs="*", default=[], type=chapter_argument,
                        help="chapter numbers (2 or 02) or file stems (default: all)")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="folder for the decks")
    parser.add_argument("--figures", type=Path, default=FIGURE_DIR, help="folder for the standalone figures")
    parser.add_argument("--jobs", type=int, default=1, help="chapters executed at the same time")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("--cache", type=Path, default=None,
                        help="folder of executed notebooks (default _build/slides/.executed)")
    args = parser.parse_args(argv)
    chapters = list(dict.fromkeys(args.chapters)) or chapter_paths()
    convert = sync.converter(sync.book_settings())
    use_this_checkout()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(lambda p: write_chapter(p, convert, args.out, args.figures, args.timeout,
                                              cache_dir=args.cache), chapters))
    write_index(args.out, args.figures, convert)
    return 0


def write_index(out_dir: Path, figure_dir: Path, convert: colab_markdown.Converter):
    """_build/slides/index.html: every deck built so far, with its chapter's title and figure folder."""
    rows = []
    for md_path in chapter_paths():
        deck = out_dir / f"{md_path.stem}.slides.html"
        if deck.exists():
            doc = md_path.relative_to(ROOT).with_suffix("").as_posix()
            figures = figure_dir / md_path.stem
            n_fig = len(list(figures.glob("fig-*"))) if figures.exists() else 0
            link = os.path.relpath(figures, out_dir).replace(os.sep, "/")
            rows.append(f'<li><a href="{deck.name}">{html.escape(chapter_name(doc, convert))}</a>'
                        f' &middot; <a href="{link}/">{n_fig} figures</a></li>')
    (out_dir / "index.html").write_text(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Lecture decks</title></head>"
        f"<body><h1>Lecture decks</h1><ul>{''.join(rows)}</ul></body></html>\n")


if __name__ == "__main__":
    sys.exit(main())
