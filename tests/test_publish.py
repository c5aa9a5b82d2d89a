"""Ready to publish: the deploy workflow, the license, and a Colab install cell that says what went wrong."""

import subprocess
import sys

import yaml


def test_deploy_workflow_builds_the_book_and_deploys_the_site(root):
    workflow = yaml.safe_load((root / ".github" / "workflows" / "deploy-book.yml").read_text())
    steps = workflow["jobs"]["deploy-book"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "actions/upload-pages-artifact" in uses and "actions/deploy-pages" in uses
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "_build/html"
    assert "jupyter-book build ." in runs and "pip install -r requirements.txt" in runs
    assert workflow["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
    branch = yaml.safe_load((root / "_config.yml").read_text())["repository"]["branch"]
    assert workflow[True]["push"]["branches"] == [branch]          # YAML reads the key `on` as True


def test_license_names_code_and_prose_and_is_named_where_readers_look(root):
    text = (root / "LICENSE").read_text()
    assert "MIT License" in text and "CC BY 4.0" in text and "Permission is hereby granted" in text
    for page in ("README.md", "book/intro.md"):
        named = (root / page).read_text()
        assert "MIT" in named and "CC BY 4.0" in named, page


def test_colab_install_cell_fails_with_a_clear_sentence(root, tmp_path):
    """Run the notebooks' install cell as Colab would, against a repository that cannot be reached."""
    sys.path.insert(0, str(root / "tools"))
    import sync
    missing = tmp_path / "no-such-repository"
    source = sync.install_source(f"file://{missing}", "main", notebook=True)
    script = tmp_path / "cell.py"
    script.write_text("import sys, types\nsys.modules['google.colab'] = types.ModuleType('google.colab')\n"
                      + source)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    last = [line for line in result.stderr.splitlines() if line.startswith("RuntimeError")]
    assert last and f"Could not fetch the gdn2edu repository from file://{missing} (branch main)" in last[0], \
        result.stderr[-2000:]
    assert "check that this runtime is online and that the repository is public" in result.stderr
    assert "CalledProcessError" not in result.stderr


def test_install_cell_does_nothing_outside_colab(root):
    sys.path.insert(0, str(root / "tools"))
    import sync
    source = sync.install_source("file:///nowhere", "main", notebook=True)
    result = subprocess.run([sys.executable, "-c", source + "\nimport os; print(os.environ['GDN2EDU_NOTEBOOK'])"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "1", result.stderr
