"""tools/gpu_forward_sweep.py, the parts that run without a GPU: its candidates and their records."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_forward_sweep as sweep  # noqa: E402

from gdn2edu import chunk_kernels  # noqa: E402


def test_every_candidate_sets_only_keys_its_launch_reads():
    """A candidate has every key of the shipped table (the sweep replaces the table whole, and the launch reads
    them all) and no other, but "maxnreg" for the intra kernel, whose launch reads it when present."""
    for table, candidates in sweep.CANDIDATES.items():
        shipped = set(getattr(chunk_kernels, table))
        optional = {"maxnreg"} if table == "INTRA_TILES" else set()
        assert all(shipped <= set(c) <= shipped | optional for c in candidates), table
        assert len({tuple(sorted(c.items())) for c in candidates}) == len(candidates), table   # no repeats


def test_every_register_cap_tried_has_its_compile_record():
    """Chapter 11 reads what each cap costs in spills from results/compile_intra_rows_maxnreg*.json."""
    caps = {c["maxnreg"] for c in sweep.CANDIDATES["INTRA_TILES"] if "maxnreg" in c}
    assert caps and all((ROOT / "results" / f"compile_intra_rows_maxnreg{cap}.json").exists() for cap in caps)
