# Generated from chapters/00_read_me_first.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""What the chapters need to run outside the book build (Colab, plain Jupyter)."""

import os

try:
    from myst_nb import glue as _book_glue
except ImportError:                     # no myst-nb (Colab): the chapters still run, and glue prints
    _book_glue = None

GLUED = {}


def glue(name, variable, display=True):
    """``myst_nb.glue`` in the book build; in a notebook (no myst-nb, or GDN2EDU_NOTEBOOK=1) remember
    ``variable`` under ``name`` and print ``name = value``, shown or not on the site (``display``)."""
    GLUED[name] = variable
    if _book_glue is not None and os.environ.get("GDN2EDU_NOTEBOOK") != "1":
        return _book_glue(name, variable, display=display)
    shown = f"{variable:.4g}" if isinstance(variable, float) else variable
    print(f"{name} = {shown}")
