"""Chapter 9's kernel_history: which Triton kernels and settings (tile tables, switches, limits) a commit had,
read from git."""

import subprocess

import pytest

from gdn2edu.kernel_history import (FLOAT32_ONLY, HEADS_FIRST, KERNEL_FILES, SCAN_DESCRIPTORS, WHOLE_AQK,
                                    WHOLE_AQK_BACKWARD, _checkout, changed_in_files, changed_kernels, kernel_sources,
                                    module_kernels, same_kernels)

ROOT = _checkout()                   # None without the whole history: the functions then answer None
needs_history = pytest.mark.skipif(ROOT is None, reason="no complete git history here")


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


@needs_history
def test_kernel_sources_reads_the_kernels_and_tables_of_a_commit():
    head = _git("rev-parse", "HEAD")
    found = kernel_sources(head, KERNEL_FILES[0])
    assert "chunk_gdn2_fwd_intra_kernel" in found and "INTRA_TILES" in found and "MID_LIMIT" in found
    assert found["MID_LIMIT"] == "60.0"
    assert found["chunk_gdn2_fwd_intra_kernel"].startswith("@triton.jit")
    assert same_kernels(head, head) is True
    with pytest.raises(ValueError, match="not in this repository's history"):
        kernel_sources(head, "no/such/file.py")
    with pytest.raises(ValueError, match="not in this repository's history"):
        kernel_sources("0" * 40, KERNEL_FILES[0])
    with pytest.raises(ValueError, match="not in this repository's history"):    # bench.package_commit's mark of
        same_kernels(head + "+modified", head)                                  # a run of uncommitted code


@needs_history
def test_same_kernels_sees_a_changed_kernel():
    """The commit that first tangled chunk_kernels.py had other kernels than today's; 745c0d6 -> a3411b9 changed
    a tool and a chapter only. e6c4116 -> f30021e changed no Triton function, but the backward's settings KEPT
    and SAVED (what the forward keeps for it): a setting counts."""
    first = _git("log", "--format=%H", "--diff-filter=A", "--", KERNEL_FILES[0]).split()[-1]
    assert same_kernels(first, "HEAD", KERNEL_FILES[:1]) is False
    assert same_kernels("745c0d6", "a3411b9") is True
    assert same_kernels("e6c4116", "f30021e") is False
    assert changed_kernels("e6c4116", "f30021e", KERNEL_FILES[1]) == {"KEPT", "SAVED"}


@needs_history
def test_changed_kernels_names_what_a_commit_changed():
    """19d4214 made the forward scan write the output, with the switch FUSE_OUTPUT and the scan's stages in
    FUSED_SCAN_STAGES, and gave the WY kernel its stages in WY_TILES, and nothing else among the forward's kernels
    and settings; its backward file's kernels and settings stayed as they were."""
    assert changed_kernels("19d4214~1", "19d4214") == {"chunk_gdn2_fwd_scan_kernel", "WY_TILES", "FUSE_OUTPUT",
                                                       "FUSED_SCAN_STAGES"}
    assert changed_kernels("19d4214~1", "19d4214", KERNEL_FILES[1]) == set()
    assert changed_kernels("HEAD", "HEAD") == set()


@needs_history
def test_heads_first_names_what_the_renumbering_changed():
    """8d974f9 renumbered the intra and WY kernels' programs and changed nothing else of either kernel file;
    changed_in_files joins both files' answers."""
    assert changed_in_files("8d974f9~1", "8d974f9") == HEADS_FIRST
    assert changed_in_files("19d4214~1", "19d4214") == changed_kernels("19d4214~1", "19d4214")
    assert changed_in_files("e6c4116", "f30021e") == {"KEPT", "SAVED"}


@needs_history
def test_scan_descriptors_names_what_the_descriptor_scan_changed():
    """c48e560 gave the forward scan its tiles by tensor descriptor: the scan kernel, its helper _chunk_tile and
    the switch SCAN_BY_DESCRIPTOR in the forward file, nothing in the backward file."""
    assert changed_in_files("c48e560~1", "c48e560") == SCAN_DESCRIPTORS
    assert changed_kernels("c48e560~1", "c48e560", KERNEL_FILES[1]) == set()


@needs_history
def test_whole_aqk_names_what_taking_aqk_whole_changed_file_by_file():
    """c74f6ad made the scans take Aqk whole: in the forward file exactly WHOLE_AQK, in the backward file exactly
    WHOLE_AQK_BACKWARD (16-bit records: the float32-only settings are not compared)."""
    assert [changed_kernels("c74f6ad~1", "c74f6ad", path, ignoring=FLOAT32_ONLY) for path in KERNEL_FILES] == [
        WHOLE_AQK, WHOLE_AQK_BACKWARD]


def test_without_history_every_answer_is_none(monkeypatch):
    import gdn2edu.kernel_history as kh
    monkeypatch.setattr(kh, "_checkout", lambda: None)
    assert kh.kernel_sources("HEAD", KERNEL_FILES[0]) is None and kh.same_kernels("HEAD", "HEAD") is None
    assert kh.changed_kernels("HEAD", "HEAD") is None and kh.changed_in_files("HEAD", "HEAD") is None


@pytest.mark.parametrize("paths", ["gdn2edu/chunk_kernels.py", ()])
@pytest.mark.parametrize("compare", ["same_kernels", "changed_in_files"])
def test_comparisons_of_files_refuse_paths_that_are_not_a_list_of_files(paths, compare):
    import gdn2edu.kernel_history as kh
    with pytest.raises(ValueError, match="paths must be a non-empty sequence"):
        getattr(kh, compare)("HEAD", "HEAD", paths)


def test_module_kernels_takes_jit_functions_and_public_settings_only():
    source = ("import triton\nLIMIT = 60.0\nTILES = {'BK': 16}\n_CACHE = {}\nlower = 1\nA, B = 1, 2\n"
              "@triton.jit\ndef kernel(x):\n    pass\n\ndef host(x):\n    return LIMIT\n")
    found = module_kernels(source)
    assert set(found) == {"LIMIT", "TILES", "kernel"}          # not the private cache, the lower-case name,
    assert found["TILES"] == "{'BK': 16}" and found["kernel"].startswith("@triton.jit")   # a tuple target or host
    with pytest.raises(ValueError, match="source must be a module's Python source as a str, got bytes"):
        module_kernels(source.encode())


def test_only_the_plan_and_kernel_settings_name_the_float32_only_settings():
    """FLOAT32_ONLY's promise, that 16-bit inputs never read those settings: in the kernel modules no function
    but the plan (which gives 16-bit inputs "tf32", test_chunk_kernels checks) and kernel_settings (which sets
    them) names them, and no Triton function at all."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    readers = {}
    for path in KERNEL_FILES:
        for node in ast.parse((root / path).read_text()).body:
            if isinstance(node, ast.FunctionDef):
                names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                if names & set(FLOAT32_ONLY):
                    readers[path, node.name] = names & set(FLOAT32_ONLY)
    assert set(readers) == {(KERNEL_FILES[0], "_plan"), (KERNEL_FILES[0], "kernel_settings")}, readers


@needs_history
def test_ignoring_leaves_out_the_float32_only_settings_and_nothing_else():
    """aa50ef6 changed the default FLOAT32_DOT, from "ieee" to "tf32x3", and no other kernel or setting:
    ignoring FLOAT32_ONLY its parent has the same kernels."""
    assert changed_kernels("aa50ef6~1", "aa50ef6") == {"FLOAT32_DOT"}
    assert changed_kernels("aa50ef6~1", "aa50ef6", ignoring=FLOAT32_ONLY) == set()
    assert same_kernels("aa50ef6~1", "aa50ef6") is False
    assert same_kernels("aa50ef6~1", "aa50ef6", ignoring=FLOAT32_ONLY) is True
    assert same_kernels("19d4214~1", "19d4214", ignoring=FLOAT32_ONLY) is False     # the scan kernel still counts


@pytest.mark.parametrize("ignoring", [("chunk_gdn2_fwd_scan_kernel",), ("INTRA_TILES",), "FLOAT32_DOT"])
def test_ignoring_refuses_anything_but_float32_only_settings(ignoring):
    """A kernel's name, a tile table, or a bare str (whose letters would be names): refused, so that no kernel or
    setting that 16-bit inputs read can be left out of a comparison."""
    with pytest.raises(ValueError, match="ignoring must be a tuple of names from FLOAT32_ONLY"):
        same_kernels("HEAD", "HEAD", ignoring=ignoring)
    with pytest.raises(ValueError, match="ignoring must be a tuple of names from FLOAT32_ONLY"):
        changed_kernels("HEAD", "HEAD", ignoring=ignoring)
