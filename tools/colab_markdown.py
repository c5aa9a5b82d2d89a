"""Rewrite a chapter's MyST Markdown cells into plain Jupyter Markdown, for the .ipynb pairs.

Jupyter and Colab know nothing of Sphinx: `_config.yml`'s MathJax macros, MyST roles (`{cite}`, `{doc}`,
`{ref}`, `{eq}`, `{prf:ref}`, `{glue:text}`), directives (admonitions, sphinx-proof blocks), targets
`(label)=` and equation labels `$$ (label)` would show as raw text or fail to typeset. This module turns
each into what a plain Markdown renderer shows right:

- macros are expanded in place (each notebook cell typesets alone, whatever renderer Colab uses);
- a citation becomes author-year text from book/references.bib;
- a reference to a page, section, definition or equation becomes its title or number, linked to that
  chapter's Colab notebook when it lives in another chapter;
- a labelled equation gets its number from the book's numbering as a `\\tag`;
- a glued number becomes the glued name in code font: in a notebook, `gdn2edu.notebook.glue` prints
  `name = value` under the cell that computed it (see Chapter 0);
- an admonition becomes a `<details>` block (folded, as on the site), a proof block a bold heading.

tools/sync.py calls `Converter(...).markdown(doc, text)` on every Markdown cell; tools/slides.py uses the
same converter, with the glued values themselves (`Converter.with_glue`), for the text of its decks.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

ROLE = re.compile(r"\{(?P<role>[a-z][\w:-]*)\}`(?P<arg>[^`]*)`")
TARGET = re.compile(r"^\((?P<label>[\w.:-]+)\)=\s*$")
EQ_LABEL = re.compile(r"^\$\$\s*\((?P<label>[\w.:-]+)\)\s*$")
FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})(?P<rest>.*)$")
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*$")
DIRECTIVE = re.compile(r"^\{(?P<name>[\w:-]+)\}\s*(?P<arg>.*)$")      # what follows a fence
# LaTeX accents that appear in references.bib
ACCENTS = {'\\"u': "ü", '\\"o': "ö", '\\"a': "ä", "\\'e": "é", "\\`e": "è", "\\'a": "á", "\\v{c}": "č"}


class NotebookTextError(ValueError):
    """A MyST construct the conversion cannot resolve (an unknown label, citation key or directive)."""


def _plain(tex: str) -> str:
    """Text of a BibTeX field value: accents decoded, braces and `\\url` dropped."""
    for code, char in ACCENTS.items():
        tex = tex.replace("{" + code + "}", char).replace(code, char)
    tex = re.sub(r"\\url\{([^}]*)\}", r"\1", tex).replace("\\_", "_").replace("--", "–")
    return re.sub(r"\s+", " ", tex.replace("{", "").replace("}", "")).strip()


def read_bib(path: Path) -> dict[str, dict[str, str]]:
    """{key: {field: raw value}} of a BibTeX file (braced values, nested braces allowed)."""
    text, entries = path.read_text(), {}
    for match in re.finditer(r"@\w+\s*\{\s*([^,\s]+)\s*,", text):
        key, pos, fields = match.group(1), match.end(), {}
        while True:
            field = re.compile(r"\s*(\w+)\s*=\s*\{").match(text, pos)
            if not field:
                break
            depth, i = 1, field.end()
            while depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            fields[field.group(1).lower()] = text[field.end():i - 1]
            pos = re.compile(r"\s*,?").match(text, i).end()
        entries[key] = fields
    return entries


def author_year(fields: dict[str, str]) -> tuple[str, str]:
    """('Yang et al.', '2024') from a BibTeX entry: family names, 'et al.' past two authors."""
    raw = fields.get("author", "")
    names = []
    for person in re.split(r"\s+and\s+", raw):
        person = person.strip()
        if person.startswith("{") and person.endswith("}"):       # {NVIDIA Research}: a corporate author
            names.append(_plain(person))
        elif "," in person:
            names.append(_plain(person.split(",")[0]))
        else:
            names.append(_plain(person).split()[-1])
    if len(names) > 2:
        who = f"{names[0]} et al."
    else:
        who = " and ".join(names)
    return who, _plain(fields.get("year", "n.d."))


def split_fenced(lines: list[str], start: int) -> tuple[int, list[str]]:
    """For a fence opened at lines[start], the index of its closing line and the lines between: the first
    line of the same character, at least as long, with nothing after it (CommonMark's rule; MyST nests
    directives by making the outer fence longer)."""
    fence = FENCE.match(lines[start]).group("fence")
    for i in range(start + 1, len(lines)):
        m = FENCE.match(lines[i])
        if m and m.group("fence")[0] == fence[0] and len(m.group("fence")) >= len(fence) \
                and not m.group("rest").strip():
            return i, lines[start + 1:i]
    raise NotebookTextError(f"unclosed fence {lines[start]!r}")


def directive_options(body: list[str]) -> tuple[dict[str, str], list[str]]:
    """A directive body's leading ``:key: value`` options, and the lines after them."""
    options, i = {}, 0
    while i < len(body) and re.match(r"^:[\w-]+:", body[i]):
        key, _, value = body[i][1:].partition(":")
        options[key] = value.strip()
        i += 1
    return options, body[i:]


class Converter:
    """Everything the conversion needs to know about the whole book: titles, labels, numbers, citations.

    ``docs`` maps each document of the table of contents, in order (e.g. ``"chapters/01_token_recurrence"``),
    to its MyST Markdown text; ``colab`` maps a chapter document to its Colab URL; ``blob`` is the URL prefix
    of the repository's files (for pages that have no notebook); ``macros`` are _config.yml's MathJax macros.
    A glued number becomes its name in code font, or its text where ``glue`` is set (see with_glue).
    """

    def __init__(self, docs: dict[str, str], bib: dict[str, dict[str, str]], macros: dict[str, str],
                 colab: dict[str, str], blob: str):
        self.docs, self.bib, self.colab, self.blob = docs, bib, colab, blob.rstrip("/")
        self.glue = None
        self.macros = {name: body for name, body in macros.items()}
        for name, body in self.macros.items():
            if not re.fullmatch(r"[A-Za-z]+", name) or "#" in body:
                raise NotebookTextError(f"macro \\{name}: only argument-free macros can be expanded, got {body!r}")
        self.titles, self.sections, self.proofs, self.equations = {}, {}, {}, {}
        number, counts = 0, {}
        for doc, text in docs.items():
            lines = text.splitlines()
            for i, line in enumerate(lines):
                heading = HEADING.match(line)
                if heading and doc not in self.titles:
                    self.titles[doc] = heading.group("title")
                target = TARGET.match(line)
                if target:
                    after = next((HEADING.match(x) for x in lines[i + 1:] if x.strip()), None)
                    if not after:
                        raise NotebookTextError(f"{doc}: target ({target.group('label')})= is not before a heading")
                    self.sections[target.group("label")] = (doc, after.group("title"))
                eq = EQ_LABEL.match(line)
                if eq:
                    number += 1          # Sphinx numbers labelled equations through the whole book
                    self.equations[eq.group("label")] = (doc, number)
                directive = re.match(r"^(`{3,}|:{3,})\{prf:(\w+)\}\s*(.*)$", line)
                if directive:            # sphinx-proof numbers each kind through the whole book
                    kind = directive.group(2).capitalize()
                    counts[kind] = counts.get(kind, 0) + 1
                    label = next((x.split(":label:", 1)[1].strip() for x in lines[i + 1:i + 6]
                                  if x.startswith(":label:")), None)
                    if label:
                        self.proofs[label] = (doc, f"{kind} {counts[kind]}", directive.group(3).strip())

    def with_glue(self, glue) -> Converter:
        """This converter, writing each glued number as ``glue(name, format_spec)`` instead of its name."""
        other = copy.copy(self)
        other.glue = glue
        return other

    def numbered(self, kind: str, label: str | None) -> str:
        """'Definition 2': the book's name of the sphinx-proof block of ``kind`` labelled ``label``."""
        return self.proofs.get(label, (None, kind))[1]

    # -- references ---------------------------------------------------------------------------------------

    def _link(self, text: str, doc: str, here: str) -> str:
        """`text`, linked to `doc`'s notebook (a chapter) or file (other pages) unless `doc` is `here`."""
        if doc == here:
            return text
        url = self.colab.get(doc) or f"{self.blob}/{doc}.md"
        return f"[{text}]({url})"

    def _resolve_doc(self, target: str, here: str) -> str:
        base = Path(here).parent
        parts = []
        for part in (base / target).as_posix().split("/"):
            if part == "..":
                parts.pop()
            elif part not in (".", ""):
                parts.append(part)
        doc = "/".join(parts)
        if target.startswith("/"):
            doc = target.lstrip("/")
        doc = re.sub(r"\.(md|ipynb)$", "", doc)
        if doc not in self.docs:
            raise NotebookTextError(f"{here}: no page {target!r}")
        return doc

    def _role(self, role: str, arg: str, here: str) -> str:
        explicit = re.fullmatch(r"(?P<text>.+?)\s*<(?P<target>[^<>]+)>", arg, re.S)
        text, target = (explicit.group("text"), explicit.group("target")) if explicit else (None, arg.strip())
        if role in ("cite", "cite:p", "cite:t", "cite:ps", "cite:ts"):
            cited = []
            for key in (k.strip() for k in target.split(",")):
                if key not in self.bib:
                    raise NotebookTextError(f"{here}: citation key {key!r} is not in references.bib")
                who, year = author_year(self.bib[key])
                cited.append(f"{who} ({year})" if role.startswith("cite:t") else f"{who}, {year}")
            return "; ".join(cited) if role.startswith("cite:t") else f"({'; '.join(cited)})"
        if role == "doc":
            doc = self._resolve_doc(target, here)
            return self._link(text or self.titles[doc], doc, here)
        if role == "ref":
            if target not in self.sections:
                raise NotebookTextError(f"{here}: no section labelled {target!r}")
            doc, title = self.sections[target]
            return self._link(text or f"“{title}”", doc, here)
        if role == "eq":
            if target not in self.equations:
                raise NotebookTextError(f"{here}: no equation labelled {target!r}")
            doc, number = self.equations[target]
            return self._link(f"({number})", doc, here)
        if role == "prf:ref":
            if target not in self.proofs:
                raise NotebookTextError(f"{here}: no definition or proposition labelled {target!r}")
            doc, numbered, title = self.proofs[target]
            return self._link(text or (f"{numbered} ({title})" if title else numbered), doc, here)
        if role.startswith("glue"):
            name, _, spec = target.partition(":")
            return self.glue(name, spec) if self.glue else f"`{name}`"
        if role == "math":
            return f"${target}$"
        raise NotebookTextError(f"{here}: no plain-Markdown form for the role {{{role}}}")

    # -- text -----------------------------------------------------------------------------------------------

    def _inline(self, line: str, here: str) -> str:
        """Roles, relative .md links and macros of one line, leaving inline code alone."""
        pieces = re.split(r"(`[^`]*`)", line)
        out, i = [], 0
        while i < len(pieces):
            piece = pieces[i]
            # a role is `{role}` followed by a code span: the split put its argument in the next piece
            role = re.search(r"\{([a-z][\w:-]*)\}$", piece)
            if role and i + 1 < len(pieces) and pieces[i + 1].startswith("`"):
                out.append(self._text(piece[:role.start()], here))
                out.append(self._role(role.group(1), pieces[i + 1][1:-1], here))
                i += 2
                continue
            out.append(piece if piece.startswith("`") else self._text(piece, here))
            i += 1
        return "".join(out)

    def _text(self, text: str, here: str) -> str:
        def link(match):
            return f"]({self._link_target(match.group(1), here)})"
        text = re.sub(r"\]\(((?!https?:|#|mailto:)[^)\s]+\.md)\)", link, text)
        return self.expand_macros(text)

    def _link_target(self, target: str, here: str) -> str:
        doc = self._resolve_doc(target, here)
        return self.colab.get(doc) or f"{self.blob}/{doc}.md"

    def expand_macros(self, text: str) -> str:
        for name, body in self.macros.items():
            text = re.sub(r"\\" + name + r"(?![A-Za-z])", lambda _m, b=body: b, text)
        return text

    def markdown(self, here: str, text: str) -> str:
        """One Markdown cell of document `here`, in plain Jupyter Markdown."""
        lines, out, i = text.split("\n"), [], 0
        while i < len(lines):
            line = lines[i]
            fence = FENCE.match(line)
            if TARGET.match(line):
                i += 1
                continue
            if EQ_LABEL.match(line):
                out.append(f"\\tag{{{self.equations[EQ_LABEL.match(line).group('label')][1]}}}")
                out.append("$$")
                i += 1
                continue
            if fence:
                end, body = split_fenced(lines, i)
                directive = DIRECTIVE.match(fence.group("rest").strip())
                if directive:
                    out.extend(self._directive(directive.group("name"), directive.group("arg"), body, here))
                else:                                   # a plain code block: verbatim
                    out.extend(lines[i:end + 1])
                i = end + 1
                continue
            out.append(self._inline(line, here))
            i += 1
        return "\n".join(out)

    def _directive(self, name: str, argument: str, body: list[str], here: str) -> list[str]:
        options, body = directive_options(body)
        inner = self.markdown(here, "\n".join(body).strip("\n")).split("\n")
        title = self._inline(argument, here)
        if name == "admonition":
            if "dropdown" in options.get("class", ""):
                return ["<details>", f"<summary>{title}</summary>", "", *inner, "", "</details>"]
            return [f"> **{title}**", ">", *(f"> {x}" if x else ">" for x in inner)]
        if name in ("note", "tip", "important", "warning", "caution", "hint", "attention", "seealso"):
            return [f"> **{name.capitalize()}.**", ">", *(f"> {x}" if x else ">" for x in inner)]
        if name.startswith("prf:"):
            kind = name.split(":", 1)[1].capitalize()
            if kind == "Proof":
                return [f"*Proof.*{' ' + title if title else ''}", "", *inner, "", "$\\blacksquare$"]
            numbered = self.numbered(kind, options.get("label"))
            heading = f"**{numbered} ({title}).**" if title else f"**{numbered}.**"
            return [heading, "", *inner]
        raise NotebookTextError(f"{here}: no plain-Markdown form for the directive {{{name}}}")
