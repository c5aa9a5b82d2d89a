"""The chapters' glue is myst-nb's in the book build, and prints every value in a notebook (Colab, Jupyter)."""

import os
import subprocess
import sys

import pytest

PRINTS = (
    "from gdn2edu.notebook import glue, GLUED\n"
    "glue('quiet', 1.23456789, display=False); glue('shown', 2)\n"
    "assert GLUED == {'quiet': 1.23456789, 'shown': 2}, GLUED\n"
)


@pytest.mark.parametrize("how", ["no myst-nb", "GDN2EDU_NOTEBOOK=1"])
def test_glue_in_a_notebook_keeps_and_prints_every_value(how):
    """The notebooks' text names glued numbers instead of showing them, so each one must be printed."""
    env = {**os.environ, "GDN2EDU_NOTEBOOK": "1" if how == "GDN2EDU_NOTEBOOK=1" else "0"}
    block = "import sys; sys.modules['myst_nb'] = None\n" if how == "no myst-nb" else ""   # import now fails
    result = subprocess.run([sys.executable, "-c", block + PRINTS], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["quiet = 1.235", "shown = 2"]


def test_glue_in_the_book_build_is_myst_nb(monkeypatch):
    import myst_nb

    import gdn2edu.notebook as notebook
    assert notebook._book_glue is myst_nb.glue
    calls = []
    monkeypatch.setattr(notebook, "_book_glue", lambda *args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.delenv("GDN2EDU_NOTEBOOK", raising=False)
    notebook.glue("x", 1.5, display=False)
    assert calls == [(("x", 1.5), {"display": False})]
