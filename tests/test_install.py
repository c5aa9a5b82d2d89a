"""The package installs alone: `pip install <repo>` into a fresh venv gives an importable gdn2edu whose
Triton kernels run (in the interpreter, without a GPU), and pyproject.toml declares exactly what it imports."""

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv

import pytest
import torch

# Third-party modules gdn2edu may import without declaring them: fla is an optional comparison, imported
# inside a function and only when present; myst_nb is the book build's glue, with a fallback.
OPTIONAL = {"fla", "myst_nb"}
# the distribution that provides each imported top-level module
DISTRIBUTION = {"torch": "torch", "triton": "triton"}
# declared although the package does not import them: Triton's interpreter, which runs the kernels without
# a GPU, imports numpy but triton does not declare it (the fresh-venv test below fails without it)
NEEDED_BY_A_DEPENDENCY = {"numpy"}


def imported_modules(package_dir):
    """Top-level names of every module the package's files import, stdlib and own package excluded."""
    names = set()
    for path in package_dir.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "gdn2edu"}


def declared_distributions(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return {re.match(r"[A-Za-z0-9_.-]+", spec).group(0).lower() for spec in project["dependencies"]}


def test_pyproject_declares_what_the_package_imports_and_nothing_else(root):
    imported = imported_modules(root / "gdn2edu") - OPTIONAL
    unknown = imported - DISTRIBUTION.keys()
    assert not unknown, f"gdn2edu imports {sorted(unknown)}: add them to pyproject.toml and to DISTRIBUTION here"
    assert declared_distributions(root) == {DISTRIBUTION[m] for m in imported} | NEEDED_BY_A_DEPENDENCY


KERNEL_CALL = """
import torch, gdn2edu
from gdn2edu import fused_recurrent_gdn2, recurrent_gdn2
torch.manual_seed(0)
B, T, H, K, V = 1, 5, 2, 16, 16
q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
k = torch.nn.functional.normalize(k, dim=-1)
g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, K))
b, w = torch.rand(B, T, H, K), torch.rand(B, T, H, V)
o, _ = fused_recurrent_gdn2(q, k, v, g, b, w)
ref, _ = recurrent_gdn2(*(x.double() for x in (q, k, v, g, b, w)))
err = ((o.double() - ref).norm() / ref.norm()).item()
assert err < 1e-5, err
print(gdn2edu.__file__)
"""


def copy_of_the_repository(root, dest):
    """The files a fresh clone has (no build outputs, no caches, no node modules)."""
    ignore = shutil.ignore_patterns(".git", "_build", "build", "*.egg-info", "__pycache__", ".pytest_cache",
                                    "node_modules", ".ipynb_checkpoints", ".whl", ".device")
    shutil.copytree(root, dest, ignore=ignore)
    return dest


def test_pip_install_into_a_fresh_venv_gives_a_working_package(root, tmp_path):
    """About a minute: the venv gets the torch that is installed here (on this machine a CPU wheel from
    pip's local find-links; elsewhere see README for the CPU index), then `pip install <repo>` must
    bring everything else, triton included."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    torch_pin = f"torch=={torch.__version__.split('+')[0]}"
    step = subprocess.run(pip + [torch_pin], capture_output=True, text=True)
    assert step.returncode == 0, f"could not install {torch_pin} into the venv:\n{step.stderr[-3000:]}"
    repo = copy_of_the_repository(root, tmp_path / "repo")
    step = subprocess.run(pip + [str(repo)], capture_output=True, text=True)
    assert step.returncode == 0, f"pip install <repo> failed:\n{step.stderr[-3000:]}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    env["TRITON_INTERPRET"] = "1"
    run = subprocess.run([str(python), "-c", KERNEL_CALL], capture_output=True, text=True, cwd=tmp_path,
                         env=env)
    assert run.returncode == 0, f"import or kernel call failed in the fresh venv:\n{run.stderr[-3000:]}"
    assert str(env_dir) in run.stdout, f"gdn2edu came from {run.stdout.strip()}, not from the venv"

    # The notebooks' install cell, as Colab runs it (google.colab importable), in this venv: it clones the
    # repository, installs the package from the clone and moves into its chapters/ folder, so ../results is
    # there. The clone comes from this checkout's committed HEAD instead of the public URL, into tmp_path.
    branch = subprocess.run(["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=root, capture_output=True,
                            text=True).stdout.strip()
    if branch in ("", "HEAD"):
        pytest.skip("the install cell clones a branch; this checkout has none checked out")
    sys.path.insert(0, str(root / "tools"))
    import sync
    clone = tmp_path / "colab" / "gdn2edu"
    cell = sync.install_source(f"file://{root}", branch, notebook=True).replace('"/content/gdn2edu"', repr(str(clone)))
    assert str(clone) in cell, "the install cell no longer clones into /content/gdn2edu: update this test"
    script = ("import sys, types\nsys.modules['google.colab'] = types.ModuleType('google.colab')\n" + cell +
              "\nimport gdn2edu, pathlib\nprint(pathlib.Path.cwd()); print(pathlib.Path('../results').is_dir())")
    run = subprocess.run([str(python), "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0, f"the Colab install cell failed:\n{run.stderr[-3000:]}"
    assert run.stdout.split() == [str(clone / "chapters"), "True"], run.stdout


def test_pip_install_leaves_no_untracked_build_folder(root):
    """`pip install .` writes build/ into the source tree: git must ignore it."""
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    probe = subprocess.run(["git", "check-ignore", "-q", "build/lib/gdn2edu/__init__.py"], cwd=root)
    assert probe.returncode == 0, "add build/ to .gitignore"
