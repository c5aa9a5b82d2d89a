"""Chapter 9's kernel_history: which Triton kernels and tile tables a commit had, read from git."""

import subprocess

import pytest

from gdn2edu.kernel_history import KERNEL_FILES, REPOSITORY, kernel_sources, same_kernels


def _head():
    try:
        shown = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPOSITORY, capture_output=True, text=True)
    except OSError:
        return None
    return shown.stdout.strip() if shown.returncode == 0 else None


def test_kernel_sources_reads_the_kernels_and_tables_of_a_commit():
    head = _head()
    if head is None:
        pytest.skip("no git history here")
    found = kernel_sources(head, "gdn2edu/chunk_kernels.py")
    assert "chunk_gdn2_fwd_intra_kernel" in found and "INTRA_TILES" in found
    assert found["chunk_gdn2_fwd_intra_kernel"].startswith("@triton.jit")
    assert same_kernels(head, head) is True
    assert kernel_sources(head, "no/such/file.py") is None
    assert kernel_sources("0" * 40, KERNEL_FILES[0]) is None


def test_same_kernels_sees_a_changed_kernel():
    """e6c4116 -> f30021e kept every kernel (only Python around the launches changed); the first commit that
    tangled chunk_kernels.py has other kernels than today's."""
    head = _head()
    if head is None or kernel_sources("e6c4116", KERNEL_FILES[0]) is None:
        pytest.skip("no git history here")
    assert same_kernels("e6c4116", "f30021e") is True
    first = subprocess.run(["git", "log", "--format=%H", "--diff-filter=A", "--", KERNEL_FILES[0]], cwd=REPOSITORY,
                           capture_output=True, text=True).stdout.split()[-1]
    assert same_kernels(first, head, KERNEL_FILES[:1]) is False
