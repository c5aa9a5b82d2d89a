# Generated from chapters/00_read_me_first.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""What the chapters need to run outside the book build (Colab, plain Jupyter)."""

try:
    from myst_nb import glue
except ImportError:                     # no myst-nb: keep the chapters running, show what they glue
    GLUED = {}

    def glue(name, variable, display=True):
        """Stand-in for ``myst_nb.glue``: remember ``variable`` under ``name``; print it if ``display``."""
        GLUED[name] = variable
        if display:
            print(f"{name} = {variable!r}")
