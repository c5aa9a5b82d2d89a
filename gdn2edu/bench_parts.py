# Generated from chapters/11_profiling.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""Parts that later chapters add to ``python -m gdn2edu.bench``."""

# name -> planner(args, result) returning steps like plan_benchmark's; each puts its rows, in the layout of
# the "forward" rows, under result[name]. Chapter 12 adds "layer".
EXTENSION_PARTS = {}
