"""Imports run one way: a module tangled from chapter N imports gdn2edu modules of chapters <= N only, at any
depth of its code (a function-level import of a later chapter is the circle this rules out)."""

import ast
import re

from conftest import ROOT


def chapter_of(module_file):
    """The chapter number in a tangled module's header, 'Generated from chapters/NN_slug.md'."""
    match = re.search(r"Generated from chapters/(\d+)_", module_file.read_text())
    return int(match.group(1)) if match else None


def test_modules_import_only_earlier_chapters():
    package = ROOT / "gdn2edu"
    chapters = {f.stem: chapter_of(f) for f in package.glob("*.py") if f.stem != "__init__"}
    assert all(n is not None for n in chapters.values()), chapters
    backwards = []
    for name, chapter in chapters.items():
        for node in ast.walk(ast.parse((package / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gdn2edu."):
                imported = node.module.split(".")[1]
                if chapters[imported] > chapter:
                    backwards.append(f"{name} (chapter {chapter}) imports {imported} (chapter {chapters[imported]})")
    assert not backwards, backwards
