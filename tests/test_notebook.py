"""The chapters' glue works with myst-nb (the book build) and without it (Colab, plain Jupyter)."""

import subprocess
import sys


def test_glue_without_myst_nb_keeps_and_prints_values():
    code = (
        "import sys; sys.modules['myst_nb'] = None\n"          # importing myst_nb now raises ImportError
        "from gdn2edu.notebook import glue, GLUED\n"
        "glue('quiet', 1.5, display=False); glue('shown', 2)\n"
        "assert GLUED == {'quiet': 1.5, 'shown': 2}, GLUED\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "shown = 2"


def test_glue_is_myst_nb_when_installed():
    import myst_nb

    from gdn2edu.notebook import glue
    assert glue is myst_nb.glue
