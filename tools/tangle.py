"""Tangle the chapters' export cells into the ``gdn2edu`` package.

A code cell whose first line is ``#| export: NAME`` is copied, without that line, into
``gdn2edu/NAME.py``. Every module belongs to exactly one chapter, cells keep their chapter
order, and each module opens with a header naming its chapter. ``gdn2edu/__init__.py`` is
generated too: it re-exports every public top-level function and class, chapter by chapter, except from
modules that run as programs (``python -m gdn2edu.bench``), which are imported by name.

    python tools/tangle.py          # write gdn2edu/
    python tools/tangle.py --check  # exit 1 (and list the files) if gdn2edu/ is stale
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
PACKAGE = ROOT / "gdn2edu"
MARKER = re.compile(r"^#\|\s*export:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$")


def _header(source: str) -> str:
    return (
        f"# Generated from {source} by tools/tangle.py.\n"
        "# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.\n"
    )


def export_cells(chapter: Path) -> list[tuple[str, str]]:
    """The (module, code) pairs of one chapter's export cells, in order."""
    notebook = jupytext.read(chapter)
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        first, _, rest = cell.source.partition("\n")
        match = MARKER.match(first.strip())
        if match:
            cells.append((match.group(1), rest.strip("\n")))
    return cells


def runs_as_program(code: str) -> bool:
    """Whether a module has a top-level ``if __name__ == "__main__"`` block (a command, like gdn2edu.bench)."""
    return any(isinstance(node, ast.If) and "__name__ == '__main__'" in ast.unparse(node.test)
               for node in ast.parse(code).body)


def public_names(code: str) -> list[str]:
    """Top-level functions and classes of a module that do not start with an underscore."""
    tree = ast.parse(code)
    return [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")
    ]


def render_package() -> dict[Path, str]:
    """Every file of gdn2edu/ as the chapters define it: {path: text}."""
    modules: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    for chapter in sorted(CHAPTERS.glob("*.md")):
        source = chapter.relative_to(ROOT).as_posix()
        for module, code in export_cells(chapter):
            if module == "__init__":
                raise SystemExit(f"{source}: __init__ is generated, export to a named module")
            if owner.setdefault(module, source) != source:
                raise SystemExit(
                    f"{source}: module {module!r} already belongs to {owner[module]}; "
                    "one module per idea, one chapter per module"
                )
            modules.setdefault(module, []).append(code)

    files: dict[Path, str] = {}
    init_lines = ['"""gdn2edu: Gated DeltaNet-2 from the token recurrence to Triton kernels."""', ""]
    exported: list[str] = []
    for module, cells in modules.items():
        text = _header(owner[module]) + "\n" + "\n\n\n".join(cells) + "\n"
        files[PACKAGE / f"{module}.py"] = text
        names = [] if runs_as_program(text) else public_names(text)   # `python -m` must import it first
        if names:
            init_lines.append(f"from gdn2edu.{module} import {', '.join(names)}")
            exported.extend(names)
    init_lines += ["", "__all__ = ["] + [f'    "{name}",' for name in exported] + ["]"]
    files[PACKAGE / "__init__.py"] = _header("chapters/*.md") + "\n" + "\n".join(init_lines) + "\n"
    return files


def stale_files(files: dict[Path, str]) -> list[str]:
    """Paths whose content on disk differs from ``files``, plus stray .py files in gdn2edu/."""
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    stale += [p for p in PACKAGE.glob("*.py") if p not in files]
    return sorted(p.relative_to(ROOT).as_posix() for p in stale)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    files = render_package()
    stale = stale_files(files)
    if args.check:
        for path in stale:
            print(f"stale: {path}")
        return 1 if stale else 0
    PACKAGE.mkdir(exist_ok=True)
    for path in PACKAGE.glob("*.py"):
        if path not in files:
            path.unlink()
    for path, text in files.items():
        path.write_text(text)
    print(f"tangled {len(files)} files into {PACKAGE.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
