"""Where the intra kernel's time goes: the default path's intra launch (mode 1) timed with parts of its work cut
out of the kernel's source, or with other pipeline stages or warps, or done another way, on a GPU; JSON with
provenance. With ``--launch wy``, the same for the WY launch (WY_VARIANTS); with ``--launch scan``, for the
forward's scan launch, the one that writes the output (SCAN_VARIANTS); with ``--launch forward``, the whole
default-path forward (``chunk_gdn2_fwd``) of the intra kernel's candidates and without programmatic dependent
launch (FORWARD_VARIANTS).

    python tools/gpu_intra_ablation.py --out results/h200_intra_ablation.json [--commit SHA]
        [--shapes 1x8192x16,2x8192x16] [--variants baseline,no_inverse,...] [--rounds 3] [--launch intra]

Each variant is a copy of gdn2edu/chunk_kernels.py with a few lines of the kernel replaced (VARIANTS says which),
loaded as a module of its own, so that its kernels compile apart from the package's. A variant that cuts work
computes wrong values: it is a timing, not a kernel; a candidate (inverse_by_squaring) computes the same values
another way, or more of them (fused_wy: the WY kernel's outputs too; with it, the record also times the shipped
WY launch in every round, under "wy"). bf16, K = V = 128, chunk_kernels.baseline_inputs; each time
is the median of ``triton.testing.do_bench`` (gdn2edu.bench.measure_ms). Every variant is compiled first, then
timed once per round, the variants in turn within each round, so that a drift of the machine during the run
reaches all of them alike; the record keeps every round's time and the median over the rounds, and says
"complete" only when every round finished. For the WY, scan and forward launches it first compares each variant's
outputs with the baseline's on the GPU: bit for bit ("same_output_as_baseline") and by the largest difference over
the baseline's largest entry ("difference_to_baseline"). The edits must each match the source exactly once, so
that a change of the kernel stops the tool instead of timing something else (tests/test_gpu_intra_ablation.py
checks them against today's source).
"""

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from gdn2edu import chunk_kernels
from gdn2edu.bench import gpu_record, measure_ms, parse_shapes

SOURCE = Path(__file__).resolve().parents[1] / "gdn2edu" / "chunk_kernels.py"

_SKIP_INVERSE = ("    tl.debug_barrier()\n    b_L00 = _load_block(", "    return\n    tl.debug_barrier()\n    b_L00 = _load_block(")
_SKIP_BELOW = ("        if ROW > 0:\n            b_qr, b_er = _anchored_rows(",
               "        if ROW > 4:\n            b_qr, b_er = _anchored_rows(")
_SKIP_DIAGONAL = ("        b_l, b_s, b_xa = _diagonal_scores(b_q, b_e, b_k, b_g, b_first, b_last, PAIRWISE, BC, DOT)",
                  "        b_l, b_s, b_xa = b_q * b_k, b_e * b_g, b_first")
_SKIP_PREFIX = [(f"        if ROW > {r}:\n            b_g{r}, b_p = _gates(", f"        if ROW > 4:\n            b_g{r}, b_p = _gates(")
                for r in range(3)]
_SKIP_SUBSTITUTION = ("        b_A0 = _substitute_row(b_A0, b_L0, m_i)\n        b_A1 = _substitute_row(b_A1, b_L1, m_i)\n"
                      "        b_A2 = _substitute_row(b_A2, b_L2, m_i)\n        b_A3 = _substitute_row(b_A3, b_L3, m_i)\n",
                      "        pass\n")

# A candidate, not a cut: the diagonal blocks' inverse by repeated squaring. L is strictly lower triangular, so
# L^16 = 0 and (I + L)^{-1} = (I - L)(I + L^2)(I + L^4)(I + L^8): six 16 x 16 products per block, a chain of
# about four, instead of the shipped substitution and merges. tf32x3 products, as the gates' running sums take with
# 16-bit inputs (the bf16 timing's case); A agrees with the shipped kernel's up to
# rounding (tests/test_gpu_intra_ablation.py).
# the shipped inverse of the diagonal blocks (substitution on sub-blocks, then merges), which the squaring replaces
_SHIPPED_INVERSE = (
    "    b_A0, b_A1, b_A2, b_A3 = b_I, b_I, b_I, b_I\n"
    "    m_same = (o_c[:, None] // SUB) == (o_c[None, :] // SUB)                      # within one sub-block\n"
    "    for i in range(1, SUB):\n        m_i = ((o_c[:, None] % SUB) == i) & m_same\n" + _SKIP_SUBSTITUTION[0]
    + "    for d in tl.static_range(4):               # sub-blocks of SUB << d rows, paired while narrower than BC\n"
    "        if (SUB << d) < BC:\n"
    "            m_off = (((o_c[:, None] // (SUB << (d + 1))) == (o_c[None, :] // (SUB << (d + 1))))\n"
    "                     & ((o_c[:, None] // (SUB << d)) != (o_c[None, :] // (SUB << d))))\n"
    + "".join(f"            b_A{j} = _merge_pairs(b_A{j}, b_L{j}, m_off, DOT)\n" for j in range(4)))
_SQUARING_INVERSE = (_SHIPPED_INVERSE,
                     "    b_A0, b_A1, b_A2, b_A3 = b_I - b_L0, b_I - b_L1, b_I - b_L2, b_I - b_L3\n"
                     "    b_P0, b_P1, b_P2, b_P3 = b_L0, b_L1, b_L2, b_L3\n"
                     "    for _ in tl.static_range(3):\n"
                     + "".join(f"        b_P{j} = tl.dot(b_P{j}, b_P{j}, input_precision=\"tf32x3\")\n" for j in range(4))
                     + "".join(f"        b_A{j} += tl.dot(b_A{j}, b_P{j}, input_precision=\"tf32x3\")\n" for j in range(4)))

# Candidates, not cuts: the diagonal blocks' substitution on sub-blocks of another width than the shipped
# SUBSTITUTION_WIDTH (Chapter 9's _invert_unit_lower4; 16: row by row, the kernel before the merges). Same A up to
# rounding (tests/test_gpu_intra_ablation.py).
_SHIPPED_WIDTH = "SUBSTITUTION_WIDTH = 4\n"
SUBSTITUTION_WIDTHS = {"rows": 16, "halves": 8, "quarters": 4, "eighths": 2}


# A candidate route of the issue on speed: the WY work fused into the intra kernel, after the inverse, so that the
# inputs are read while the chunk's lines are still in L2 and no WY launch follows. The kernel takes A's ten blocks
# from its registers (_store_inverse returns them), forms the base-2 G sub-chunk by sub-chunk with the intra
# kernel's _gates, and writes AE = A E, AZ = A Z, kg, Q_g and gamma_n as the WY kernel does (G on the chunk's last row from one sum,
# for kg and gamma_n). Its extra arguments come from the module's _FUSED_WY, which fuse_wy_outputs sets.
_FUSED_WY_HELPERS = '''@triton.jit
def _lower_times(b_A00, b_A10, b_A11, b_A20, b_A21, b_A22, b_A30, b_A31, b_A32, b_A33, b_X0, b_X1, b_X2, b_X3,
                 DOT: tl.constexpr):
    """The four row blocks of A [X0; X1; X2; X3] for A lower block-triangular (its ten blocks)."""
    return (tl.dot(b_A00, b_X0, input_precision=DOT),
            tl.dot(b_A10, b_X0, input_precision=DOT) + tl.dot(b_A11, b_X1, input_precision=DOT),
            tl.dot(b_A20, b_X0, input_precision=DOT) + tl.dot(b_A21, b_X1, input_precision=DOT)
            + tl.dot(b_A22, b_X2, input_precision=DOT),
            tl.dot(b_A30, b_X0, input_precision=DOT) + tl.dot(b_A31, b_X1, input_precision=DOT)
            + tl.dot(b_A32, b_X2, input_precision=DOT) + tl.dot(b_A33, b_X3, input_precision=DOT))


@triton.jit
def _store_rows4(X, t0, col0, T, n_cols, b_x0, b_x1, b_x2, b_x3, H: tl.constexpr, BC: tl.constexpr,
                 BW: tl.constexpr):
    """Four [BC, BW] row blocks at rows t0, t0 + BC, .. and columns col0 .. of a head's rows X [T, n_cols]."""
    p_x, m_x = _tile(X, t0, col0, T, n_cols, H * n_cols, BC, BW)
    tl.store(p_x, b_x0.to(p_x.dtype.element_ty), mask=m_x)
    p_x, m_x = _tile(X, t0 + BC, col0, T, n_cols, H * n_cols, BC, BW)
    tl.store(p_x, b_x1.to(p_x.dtype.element_ty), mask=m_x)
    p_x, m_x = _tile(X, t0 + 2 * BC, col0, T, n_cols, H * n_cols, BC, BW)
    tl.store(p_x, b_x2.to(p_x.dtype.element_ty), mask=m_x)
    p_x, m_x = _tile(X, t0 + 3 * BC, col0, T, n_cols, H * n_cols, BC, BW)
    tl.store(p_x, b_x3.to(p_x.dtype.element_ty), mask=m_x)


@triton.jit
def _wy_rows(q, k, b, KG, QG, p_qk, row0, i_k, T, scale, b_G, b_gn, H: tl.constexpr, K: tl.constexpr,
             BK: tl.constexpr, BC: tl.constexpr):
    """One sub-chunk's kg = k 2^(G_n - G) and Q_g = scale q 2^G, stored; returns its E = b k 2^G [BC, BK]."""
    b_k = _load(k + p_qk, row0, i_k * BK, T, K, H * K, BC, BK)
    p_x, m_x = _tile(KG + p_qk, row0, i_k * BK, T, K, H * K, BC, BK)
    tl.store(p_x, (b_k * tl.exp2(b_gn[None, :] - b_G)).to(p_x.dtype.element_ty), mask=m_x)
    p_x, m_x = _tile(QG + p_qk, row0, i_k * BK, T, K, H * K, BC, BK)
    tl.store(p_x, (_load(q + p_qk, row0, i_k * BK, T, K, H * K, BC, BK) * (scale * tl.exp2(b_G))
                   ).to(p_x.dtype.element_ty), mask=m_x)
    return _load(b + p_qk, row0, i_k * BK, T, K, H * K, BC, BK) * b_k * tl.exp2(b_G)


@triton.jit
def _wy_after_inverse(q, k, v, g, b, w, AE, AZ, KG, QG, GN, bos, T, t0, i_t, i_h, scale, b_A00, b_A10, b_A11,
                      b_A20, b_A21, b_A22, b_A30, b_A31, b_A32, b_A33, H: tl.constexpr, K: tl.constexpr,
                      V: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, DOT: tl.constexpr):
    """The WY kernel's outputs of one chunk from the ten blocks of its A, still in registers."""
    p_qk, p_vw = (bos * H + i_h) * K, (bos * H + i_h) * V
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        b_gn = tl.sum(_load(g + p_qk, t0, i_k * BK, T, K, H * K, 4 * BC, BK), axis=0) * 1.4426950408889634
        tl.store(GN + (i_t * H + i_h) * K + o_k, tl.exp2(b_gn), mask=o_k < K)
        b_p = tl.zeros([BK], dtype=tl.float32)
        b_G0, b_p = _gates(g, bos, T, t0, i_h, i_k, b_p, H, K, BC, BK, DOT)
        b_G1, b_p = _gates(g, bos, T, t0 + BC, i_h, i_k, b_p, H, K, BC, BK, DOT)
        b_G2, b_p = _gates(g, bos, T, t0 + 2 * BC, i_h, i_k, b_p, H, K, BC, BK, DOT)
        b_G3, b_p = _gates(g, bos, T, t0 + 3 * BC, i_h, i_k, b_p, H, K, BC, BK, DOT)
        b_E0 = _wy_rows(q, k, b, KG, QG, p_qk, t0, i_k, T, scale, b_G0, b_gn, H, K, BK, BC)
        b_E1 = _wy_rows(q, k, b, KG, QG, p_qk, t0 + BC, i_k, T, scale, b_G1, b_gn, H, K, BK, BC)
        b_E2 = _wy_rows(q, k, b, KG, QG, p_qk, t0 + 2 * BC, i_k, T, scale, b_G2, b_gn, H, K, BK, BC)
        b_E3 = _wy_rows(q, k, b, KG, QG, p_qk, t0 + 3 * BC, i_k, T, scale, b_G3, b_gn, H, K, BK, BC)
        b_X0, b_X1, b_X2, b_X3 = _lower_times(b_A00, b_A10, b_A11, b_A20, b_A21, b_A22, b_A30, b_A31, b_A32, b_A33,
                                              b_E0, b_E1, b_E2, b_E3, DOT)
        _store_rows4(AE + p_qk, t0, i_k * BK, T, K, b_X0, b_X1, b_X2, b_X3, H, BC, BK)
    for i_v in range(tl.cdiv(V, BV)):
        b_Z0 = _load(v + p_vw, t0, i_v * BV, T, V, H * V, BC, BV) * _load(w + p_vw, t0, i_v * BV, T, V, H * V, BC, BV)
        b_Z1 = _load(v + p_vw, t0 + BC, i_v * BV, T, V, H * V, BC, BV) * _load(w + p_vw, t0 + BC, i_v * BV, T, V,
                                                                              H * V, BC, BV)
        b_Z2 = _load(v + p_vw, t0 + 2 * BC, i_v * BV, T, V, H * V, BC, BV) * _load(w + p_vw, t0 + 2 * BC, i_v * BV, T,
                                                                                  V, H * V, BC, BV)
        b_Z3 = _load(v + p_vw, t0 + 3 * BC, i_v * BV, T, V, H * V, BC, BV) * _load(w + p_vw, t0 + 3 * BC, i_v * BV, T,
                                                                                  V, H * V, BC, BV)
        b_X0, b_X1, b_X2, b_X3 = _lower_times(b_A00, b_A10, b_A11, b_A20, b_A21, b_A22, b_A30, b_A31, b_A32, b_A33,
                                              b_Z0, b_Z1, b_Z2, b_Z3, DOT)
        _store_rows4(AZ + p_vw, t0, i_v * BV, T, V, b_X0, b_X1, b_X2, b_X3, H, BC, BV)


'''
_FUSED_WY_EDITS = [
    ("@triton.jit\ndef chunk_gdn2_fwd_intra_kernel(q, k, g, b, A, Aqk, flags, cu_seqlens, chunk_indices, scale,\n",
     _FUSED_WY_HELPERS + "@triton.jit\ndef chunk_gdn2_fwd_intra_kernel(q, k, g, b, A, Aqk, flags, cu_seqlens, "
     "chunk_indices, scale,\n        v, w, AE, AZ, KG, QG, GN, V: tl.constexpr, BV: tl.constexpr, BKW: tl.constexpr,\n"),
    ("    _store_block(A, bos, T, i_h, t0 + 3 * BC, 3 * BC, b_Ai33, H, BT, BC)\n",       # _store_inverse returns A
     "    _store_block(A, bos, T, i_h, t0 + 3 * BC, 3 * BC, b_Ai33, H, BT, BC)\n"
     "    return b_Ai00, b_Ai10, b_Ai11, b_Ai20, b_Ai21, b_Ai22, b_Ai30, b_Ai31, b_Ai32, b_Ai33\n"),
    ("    _store_inverse(A, bos, T, i_h, t0, b_L00, b_L11, b_L22, b_L33, b_L10, b_L20, b_L21, b_L30, b_L31, b_L32,\n"
     "                   H, BT, BC, SUB, DOT)\n",
     "    b_A00, b_A10, b_A11, b_A20, b_A21, b_A22, b_A30, b_A31, b_A32, b_A33 = _store_inverse(\n"
     "        A, bos, T, i_h, t0, b_L00, b_L11, b_L22, b_L33, b_L10, b_L20, b_L21, b_L30, b_L31, b_L32, H, BT, BC, SUB,\n"
     "        DOT)\n"
     "    _wy_after_inverse(q, k, v, g, b, w, AE, AZ, KG, QG, GN, bos, T, t0, i_t, i_h, scale, b_A00, b_A10, b_A11,\n"
     "                      b_A20, b_A21, b_A22, b_A30, b_A31, b_A32, b_A33, H, K, V, BC, BKW, BV, DOT)\n"),
    ("        q, k, g, b, A, Aqk, flags, p.cu, p.chunks, p.scale, H=p.H, K=p.K, BT=64, BC=16,",
     "        q, k, g, b, A, Aqk, flags, p.cu, p.chunks, p.scale, *_FUSED_WY, V=p.V, BV=16, BKW=16, H=p.H, K=p.K, "
     "BT=64, BC=16,")]
FUSED_WY_OUTPUTS = ("AE", "AZ", "KG", "QG", "GN")

# The order the intra and WY kernels had their programs in before "Neighbouring programs" (Chapter 9): program
# (i_t, i_h) of a 2-D grid, a head's chunks neighbouring; the same values, in another order.
_PROGRAM = "    i_t, i_h = tl.program_id(0) // H, tl.program_id(0) % H      # a chunk's heads: neighbouring programs\n"
_INTRA_CHUNK = "    bos, T, t0 = _chunk_of_program(i_t, cu_seqlens, chunk_indices, BT)\n    CHECK_OPERANDS"
_CHUNKS_FIRST = [(_PROGRAM + _INTRA_CHUNK, "    i_t, i_h = tl.program_id(0), tl.program_id(1)\n" + _INTRA_CHUNK),
                 ("chunk_gdn2_fwd_intra_kernel[(p.chunks.shape[0] * p.H,)](",
                  "chunk_gdn2_fwd_intra_kernel[(p.chunks.shape[0], p.H)](")]
_WY_CHUNKS_FIRST = [(_PROGRAM + "    bos, T, t0 = _chunk_of_program(i_t, cu_seqlens, chunk_indices, BT)\n    o_t",
                     "    i_t, i_h = tl.program_id(0), tl.program_id(1)\n"
                     "    bos, T, t0 = _chunk_of_program(i_t, cu_seqlens, chunk_indices, BT)\n    o_t"),
                    ("chunk_gdn2_fwd_wy_kernel[(p.chunks.shape[0] * p.H,)](", "chunk_gdn2_fwd_wy_kernel[(p.chunks.shape[0], p.H)](")]

# name -> (what it cuts or changes, source edits [(old, new)], changes to INTRA_TILES)
# A candidate route of the issue on speed: the gates formed once. Today each row of sub-chunks forms the gates of
# every sub-chunk before it again (a product with the lower-triangular ones per sub-chunk and key block: ten where
# four would do). Here each row stores its sub-chunk's base-2 G from the chunk's start (float32 [T, H, K], the
# module's _GATES_KEPT[0]) and Q_g = scale q 2^G (_GATES_KEPT[1], in the intermediates' type; for the rows after the
# first from the rows anchored at the first row, scale (q 2^(G - G_first)) 2^G_first), and the later rows read G
# back, behind a barrier at the end of each row; the prefix is G on the row before the sub-chunk (the sequence's
# last row in a tail, as the running sum carries it). Its WY partner (WY_VARIANTS' reads_kept_gates) reads G
# instead of summing g and writes no Q_g.
_ROW_GATES = ("        if ROW > 0:\n"
              "            b_g0, b_p = _gates(g, bos, T, t0, i_h, i_k, b_p, H, K, BC, BK, DOT)\n"
              "        if ROW > 1:\n"
              "            b_g1, b_p = _gates(g, bos, T, t0 + BC, i_h, i_k, b_p, H, K, BC, BK, DOT)\n"
              "        if ROW > 2:\n"
              "            b_g2, b_p = _gates(g, bos, T, t0 + 2 * BC, i_h, i_k, b_p, H, K, BC, BK, DOT)\n"
              "        b_q, b_e, b_k, b_g, b_first, b_last = _sub_chunk(q, k, b, g, bos, T, t0 + ROW * BC, i_h, i_k, b_p,\n"
              "                                                         H, K, BC, BK, DOT)\n")
_GATES_KEPT_EDITS = [
    ("def _row_scores(q, k, g, b, bos, T, t0, i_h, scale, ROW: tl.constexpr,",
     "def _row_scores(q, k, g, b, bos, T, t0, i_h, scale, Gk, QGk, ROW: tl.constexpr,"),
    (_ROW_GATES,
     "        p_g, o_kk = Gk + (bos * H + i_h) * K, i_k * BK + tl.arange(0, BK)\n"
     "        if ROW > 0:\n"
     "            b_g0 = _load(p_g, t0, i_k * BK, T, K, H * K, BC, BK)\n"
     "            b_p = tl.load(p_g + (tl.minimum(t0 + ROW * BC, T) - 1) * H * K + o_kk, mask=o_kk < K, other=0.0)\n"
     "        if ROW > 1:\n"
     "            b_g1 = _load(p_g, t0 + BC, i_k * BK, T, K, H * K, BC, BK)\n"
     "        if ROW > 2:\n"
     "            b_g2 = _load(p_g, t0 + 2 * BC, i_k * BK, T, K, H * K, BC, BK)\n"
     "        b_q, b_e, b_k, b_g, b_first, b_last = _sub_chunk(q, k, b, g, bos, T, t0 + ROW * BC, i_h, i_k, b_p,\n"
     "                                                         H, K, BC, BK, DOT)\n"
     "        p_x, m_x = _tile(p_g, t0 + ROW * BC, i_k * BK, T, K, H * K, BC, BK)\n"
     "        tl.store(p_x, b_g, mask=m_x)\n"
     "        p_x, m_x = _tile(QGk + (bos * H + i_h) * K, t0 + ROW * BC, i_k * BK, T, K, H * K, BC, BK)\n"
     "        if ROW == 0:\n"
     "            tl.store(p_x, (b_q * (scale * tl.exp2(b_g))).to(p_x.dtype.element_ty), mask=m_x)\n"),
    ("        if ROW > 0:\n            b_qr, b_er = _anchored_rows(b_q, b_e, b_g, b_first)\n",
     "        if ROW > 0:\n            b_qr, b_er = _anchored_rows(b_q, b_e, b_g, b_first)\n"
     "            tl.store(p_x, (b_qr * (scale * tl.exp2(b_first))[None, :]).to(p_x.dtype.element_ty), mask=m_x)\n"),
    *[(f"            q, k, g, b, bos, T, t0, i_h, scale, ROW, H, K, BC, BK, {flags}, DOT)",
       f"            q, k, g, b, bos, T, t0, i_h, scale, Gk, QGk, ROW, H, K, BC, BK, {flags}, DOT)")
      for flags in ("False, CHECK_OPERANDS", "True, False")],      # the first pass, and the redo's rows
    ("def chunk_gdn2_fwd_intra_kernel(q, k, g, b, A, Aqk, flags, cu_seqlens, chunk_indices, scale,\n",
     "def chunk_gdn2_fwd_intra_kernel(q, k, g, b, A, Aqk, flags, cu_seqlens, chunk_indices, scale, Gk, QGk,\n"),
    ("                         BC)                    # 64 x 64 tiles straight into their products, unmasked\n",
     "                         BC)                    # 64 x 64 tiles straight into their products, unmasked\n"
     "        tl.debug_barrier()                      # this row's G, read by the rows after it\n"),
    ("        q, k, g, b, A, Aqk, flags, p.cu, p.chunks, p.scale, H=p.H, K=p.K, BT=64, BC=16,",
     "        q, k, g, b, A, Aqk, flags, p.cu, p.chunks, p.scale, *_GATES_KEPT, H=p.H, K=p.K, BT=64, BC=16,"),
    *[(f"_redo_rows(q, k, g, b, A, Aqk, bos, T, t0, i_h, scale, H{end}",          # the redo takes them on
       f"_redo_rows(q, k, g, b, A, Aqk, bos, T, t0, i_h, scale, Gk, QGk, H{end}") for end in (":", ",")]]
# Two parts of gates_kept, to see which costs: G kept without the stores of Q_g (the WY launch would still form it),
# and gates_kept without its barriers (a timing only: a later row may then read G before it is visible)
_QG_STORES = ("        p_x, m_x = _tile(QGk + (bos * H + i_h) * K, t0 + ROW * BC, i_k * BK, T, K, H * K, BC, BK)\n"
              "        if ROW == 0:\n"
              "            tl.store(p_x, (b_q * (scale * tl.exp2(b_g))).to(p_x.dtype.element_ty), mask=m_x)\n")
_GATES_ONLY_EDITS = [_GATES_KEPT_EDITS[0], (_ROW_GATES, _GATES_KEPT_EDITS[1][1].replace(_QG_STORES, "")),
                     *_GATES_KEPT_EDITS[3:]]
_GATES_KEPT_NO_BARRIER_EDITS = [edit for edit in _GATES_KEPT_EDITS if "tl.debug_barrier()" not in edit[1]]

_REDO_BRANCH = ("        if e > MID_LIMIT:                       # (the whole program's branch: e is one value) "
                "the four rows again,\n", "        if False:\n")

VARIANTS = {
    "baseline": ("the shipped kernel and tiles", [], {}),
    "no_inverse": ("phase 2 cut: no read-back of L, no substitutions, no block merges, no stores of A", [_SKIP_INVERSE], {}),
    "no_substitution": ("the diagonal blocks' substitutions cut (their merges, the block merges and stores kept)",
                        [_SKIP_SUBSTITUTION], {}),
    "no_prefix_gates": ("the gates of the sub-chunks before each row not formed again (no loads of g, products, "
                        "prefix sums for them)", _SKIP_PREFIX, {}),
    "no_below_diagonal": ("the blocks below the diagonal cut (their key loads and products)", [_SKIP_BELOW], {}),
    "no_gate_product": ("the running sum of the gates (the product with the lower-triangular ones) cut",
                        [("    b_g = tl.dot((o_c[:, None] >= o_c[None, :]).to(tl.float32), b_g, "
                          "input_precision=GATE_DOT)    # rows past T add 0\n", "")], {}),
    "gate_tf32": ("the gates' running sum as one tf32 product instead of three (tf32x3)",
                  [('GATE_DOT: tl.constexpr = "tf32x3" if DOT == "tf32" else "ieee"', "GATE_DOT: tl.constexpr = DOT")], {}),
    "inverse_by_squaring": ("the diagonal blocks inverted by repeated squaring (same A up to rounding)",
                            [_SQUARING_INVERSE], {}),
    **{f"inverse_by_{part}": ("the diagonal blocks inverted by substitution row by row, no merges (the kernel before "
                              "them; same A up to rounding)" if width == 16 else
                              f"the diagonal blocks inverted by substitution on {16 // width} sub-blocks of "
                              f"{width} rows at once, then {(16 // width).bit_length() - 1} merge(s) by products "
                              "(same A up to rounding)", [(_SHIPPED_WIDTH, f"SUBSTITUTION_WIDTH = {width}\n")], {})
       for part, width in SUBSTITUTION_WIDTHS.items() if f"SUBSTITUTION_WIDTH = {width}\n" != _SHIPPED_WIDTH},
    "fused_wy": ("the WY work fused after the inverse (a candidate: same AE, AZ, kg, Q_g, gamma_n; no WY launch "
                 "after it)", _FUSED_WY_EDITS, {}),
    "loads_and_gates_only": ("phase 2, the blocks below the diagonal and the diagonal products cut: loads, gates, "
                             "stores", [_SKIP_INVERSE, _SKIP_BELOW, _SKIP_DIAGONAL], {}),
    # the shipped table has three stages since the ninth forward sweep (the record of 393f77b timed two as its
    # baseline and three and four as variants)
    "stages_1": ("one pipeline stage", [], {"num_stages": 1}),
    "stages_2": ("two pipeline stages", [], {"num_stages": 2}),
    "stages_4": ("four pipeline stages", [], {"num_stages": 4}),
    "warps_2": ("two warps", [], {"num_warps": 2}),
    # register caps: at 235 registers a thread (the blocked inverse's, compiled for sm_90) eight one-warp programs
    # fit a multiprocessor; 224, 200 and 168 let 9, 10 and 12 fit, with a few bytes spilled (hopper_compile_check)
    **{f"maxnreg_{cap}": (f"registers capped at {cap} a thread", [], {"maxnreg": cap}) for cap in (224, 200, 168)},
    "chunks_first": ("the programs in the order before: a head's chunks neighbouring (the same values)",
                     _CHUNKS_FIRST, {}),
    "gates_kept": ("the gates formed once: each row stores its G and Q_g, the later rows read G back (a candidate: "
                   "same A and Aqk up to rounding, G and Q_g for the WY launch)", _GATES_KEPT_EDITS, {}),
    "gates_kept_g_only": ("gates_kept without the stores of Q_g (G kept and read back)", _GATES_ONLY_EDITS, {}),
    "gates_kept_no_barrier": ("gates_kept without the barriers after its rows (a timing: G may be read early)",
                              _GATES_KEPT_NO_BARRIER_EDITS, {}),
    # where mode 1's extra time over mode 0 goes: its redo's branch and call cut (the flags still formed and
    # stored), or its whole check cut (mode 1 compiled as mode 0); at the baseline's gates no chunk is flagged, so
    # both compute the shipped values there
    "no_redo": ("mode 1's redo of a flagged chunk cut, its flags kept (a timing: no chunk is flagged at the "
                "baseline's gates)", [_REDO_BRANCH], {}),
    "no_check": ("mode 1's check cut: no flags, no redo, the kernel of mode 0 (a timing)",
                 [("    if MODE == 1:\n        unsafe_here", "    if MODE == 2:\n        unsafe_here")], {}),
}

# The WY kernel's variants, each timed on the WY launch (--launch wy), against what FLA's kernel for the step
# does (Chapter 11): its products take A and E (or Z) rounded to the inputs' 16-bit type, it reads G already summed
# (a kernel of its own, before), and FLA 0.6.0's forward has it write no Q_g.
_WY_A = ("    b_A = tl.where(o_t[:, None] >= o_t[None, :], _load(A + (bos * H + i_h) * BT, t0, 0, T, BT, H * BT, BT, "
         "BT), 0.0)\n")
_WY_PRODUCTS_16BIT = [
    (_WY_A, _WY_A.replace("0.0)\n", "0.0).to(AE.dtype.element_ty)\n")),
    ("tl.store(p_x, tl.dot(b_A, b_E, input_precision=DOT), mask=m_x)",
     "tl.store(p_x, tl.dot(b_A, b_E.to(b_A.dtype), input_precision=DOT), mask=m_x)"),
    ("tl.store(p_x, tl.dot(b_A, b_Z, input_precision=DOT), mask=m_x)",
     "tl.store(p_x, tl.dot(b_A, b_Z.to(b_A.dtype), input_precision=DOT), mask=m_x)")]
_WY_NO_QG = ("        p_x, m_x = _tile(QG + p_qk, t0, i_k * BK, T, K, H * K, BT, BK)\n        tl.store(p_x, "
             "_load(q + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * (scale * tl.exp2(b_G)), mask=m_x)\n", "")
_WY_READS_KEPT_GATES = [
    ("b_G = tl.cumsum(_load(g + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * 1.4426950408889634, axis=0)",
     "b_G = _load(Gc + p_qk, t0, i_k * BK, T, K, H * K, BT, BK)"),
    ("        b_Gn = tl.sum(tl.where(o_t[:, None] == BT - 1, b_G, 0.0), axis=0)\n",
     "        o_kk = i_k * BK + tl.arange(0, BK)\n"
     "        b_Gn = tl.load(Gc + p_qk + (tl.minimum(t0 + BT, T) - 1) * H * K + o_kk, mask=o_kk < K, other=0.0)\n"),
    _WY_NO_QG,
    ('out["QG"], out["GN"], out["G"], p.cu', 'out["QG"], out["GN"], _KEPT_G, p.cu')]
# Host-made tensor descriptors for the WY launch (fixed-length batches: each [B, T, H, C] input and output seen as a
# 4-D tensor whose second dimension ends at T, so a chunk's rows past a sequence's end load as zeros and are not
# stored, as the masks do). The scan makes its five descriptors inside the kernel, once in each of its few
# programs (one per sequence, head and value block); the WY launch has a program per chunk and head, thousands,
# each of which would make eleven. Made once on the host, they cost no program anything (and the host's time to
# make them is not in the launch's GPU time that the tool measures). by_host_descriptor reads the seven inputs'
# tiles so and stores as before; by_host_descriptor_stores also stores the four outputs' tiles through them.
_WY_AT = "[(bos // T).to(tl.int32), t0.to(tl.int32), i_h, {col}]"    # (sequence, row, head, column): 32-bit
_WY_READ = "{x}.load(" + _WY_AT + ").reshape(BT, {w}).to(tl.float32)"
_WY_READ_A_G_K_B = [
    ("    b_A = tl.where(o_t[:, None] >= o_t[None, :], _load(A + (bos * H + i_h) * BT, t0, 0, T, BT, H * BT, BT, "
     "BT), 0.0)\n",
     "    b_A = tl.where(o_t[:, None] >= o_t[None, :], " + _WY_READ.format(x="A", col="0", w="BT") + ", 0.0)\n"),
    ("tl.cumsum(_load(g + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * 1.4426950408889634, axis=0)",
     "tl.cumsum(" + _WY_READ.format(x="g", col="i_k * BK", w="BK") + " * 1.4426950408889634, axis=0)"),
    ("        b_k = _load(k + p_qk, t0, i_k * BK, T, K, H * K, BT, BK)\n",
     "        b_k = " + _WY_READ.format(x="k", col="i_k * BK", w="BK") + "\n"),
    ("        b_E = _load(b + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * b_k * tl.exp2(b_G)\n",
     "        b_E = " + _WY_READ.format(x="b", col="i_k * BK", w="BK") + " * b_k * tl.exp2(b_G)\n")]
_WY_READ_Q = [
    ("tl.store(p_x, _load(q + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * (scale * tl.exp2(b_G)), mask=m_x)",
     "tl.store(p_x, " + _WY_READ.format(x="q", col="i_k * BK", w="BK") + " * (scale * tl.exp2(b_G)), mask=m_x)")]
_WY_READ_V_W = [
    ("            b_Z = _load(v + p_vw, t0, i_v * BV, T, V, H * V, BT, BV) * _load(w + p_vw, t0, i_v * BV, T, V, "
     "H * V,\n                                                                             BT, BV)\n",
     "            b_Z = " + _WY_READ.format(x="v", col="i_v * BV", w="BV") + " * "
     + _WY_READ.format(x="w", col="i_v * BV", w="BV") + "\n")]
_WY_HOST_LAUNCH = [
    ("    chunk_gdn2_fwd_wy_kernel[(p.chunks.shape[0] * p.H,)](\n        q, k, v, g, b, w, A, out[",
     "    from triton.tools.tensor_descriptor import TensorDescriptor\n"
     "    if p.N != p.B:\n"
     "        raise ValueError('host descriptors take sequences of one length, got packed sequences (cu_seqlens)')\n"
     "    BK, BV = min(_block_width(p.K), tiles['BK']), _block_width(p.V, tiles['BV'])\n"
     "    def tiles_of(x, width):\n"
     "        if x.data_ptr() % 16 or x.shape[-1] * x.element_size() % 16:\n"
     "            raise ValueError(f'a descriptor needs 16-byte rows and base, got {x.dtype} rows of {x.shape[-1]}')\n"
     "        return TensorDescriptor(x, list(x.shape), list(x.stride()), [1, 64, 1, width])\n"
     "    q, k, g, b = (tiles_of(x, BK) for x in (q, k, g, b))\n"
     "    v, w, A = tiles_of(v, BV), tiles_of(w, BV), tiles_of(A, 64)\n"
     "    chunk_gdn2_fwd_wy_kernel[(p.chunks.shape[0] * p.H,)](\n        q, k, v, g, b, w, A, out["),
    ('BT=64, BK=min(_block_width(p.K), tiles["BK"]),\n        BV=_block_width(p.V, tiles["BV"]), STORE_G',
     'BT=64, BK=BK, BV=BV, STORE_G')]
_WY_HOST_READS = _WY_READ_A_G_K_B + _WY_READ_Q + _WY_READ_V_W + _WY_HOST_LAUNCH
_WY_STORE = ("        p_x, m_x = _tile({x} + p_qk, t0, i_k * BK, T, K, H * K, BT, BK)\n        tl.store(p_x, {value}, "
             "mask=m_x)\n")
_WY_PUT = ("        {x}.store(" + _WY_AT.format(col="i_k * BK") + ", ({value}).reshape(1, BT, 1, BK).to({x}.dtype))"
           "\n")
_WY_HOST_STORES = _WY_READ_A_G_K_B + _WY_READ_V_W + [
    (_WY_STORE.format(x="AE", value="tl.dot(b_A, b_E, input_precision=DOT)"),
     _WY_PUT.format(x="AE", value="tl.dot(b_A, b_E, input_precision=DOT)")),
    (_WY_STORE.format(x="KG", value="b_k * tl.exp2(b_Gn[None, :] - b_G)"),
     _WY_PUT.format(x="KG", value="b_k * tl.exp2(b_Gn[None, :] - b_G)")),
    (_WY_STORE.format(x="QG", value="_load(q + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * (scale * tl.exp2(b_G))"),
     _WY_PUT.format(x="QG", value=_WY_READ.format(x="q", col="i_k * BK", w="BK") + " * (scale * tl.exp2(b_G))")),
    ("            p_x, m_x = _tile(AZ + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)\n"
     "            tl.store(p_x, tl.dot(b_A, b_Z, input_precision=DOT), mask=m_x)\n",
     "            AZ.store(" + _WY_AT.format(col="i_v * BV") + ", tl.dot(b_A, b_Z, input_precision=DOT)"
     ".reshape(1, BT, 1, BV).to(AZ.dtype))\n"),
    (_WY_HOST_LAUNCH[0][0], _WY_HOST_LAUNCH[0][1].replace(
        "    chunk_gdn2_fwd_wy_kernel[",
        "    out = dict(out, **{name: tiles_of(out[name], BK) for name in ('AE', 'KG', 'QG')},\n"
        "               **({'AZ': tiles_of(out['AZ'], BV)} if out['AZ'] is not None else {}))\n"
        "    chunk_gdn2_fwd_wy_kernel[")),
    _WY_HOST_LAUNCH[1]]
WY_VARIANTS = {
    "baseline": ("the shipped kernel and tiles", [], {}),
    "products_16bit": ("A, E and Z rounded to the store type before their products (16-bit tensor-core products, "
                       "FLA's way; a candidate with other rounding)", _WY_PRODUCTS_16BIT, {}),
    "no_running_sum": ("the running sum of the gates cut (G is each row's own gate)",
                       [("b_G = tl.cumsum(_load(g + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * 1.4426950408889634, "
                         "axis=0)", "b_G = _load(g + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * 1.4426950408889634")],
                       {}),
    "no_qg": ("Q_g cut: q not read, Q_g not formed or stored (what FLA 0.6.0's forward leaves to its output kernel)",
              [_WY_NO_QG], {}),
    "no_az": ("AZ cut: v and w not read, AZ not formed or stored",
              [("    if STORE_AZ:                            # only the scan reads AZ", "    if STORE_AZ and K < 0:")], {}),
    "chunks_first": ("the programs in the order before: a head's chunks neighbouring (the same values)",
                     _WY_CHUNKS_FIRST, {}),
    "by_host_descriptor": ("the seven inputs' tiles through tensor descriptors made on the host, sequences of one "
                           "length only (a candidate: the same values)", _WY_HOST_READS, {}),
    "by_host_descriptor_stores": ("by_host_descriptor, the four outputs' tiles stored through them too (a "
                                  "candidate: the same values)", _WY_HOST_STORES, {}),
    "reads_kept_gates": ("gates_kept's partner: G read as the intra launch kept it instead of summed from g, no Q_g "
                         "(a candidate: the same AE, kg and gamma_n up to rounding)", _WY_READS_KEPT_GATES, {}),
}

# The scan's variants (--launch scan), each timed on the forward's scan launch, the one that writes the output. The
# shipped scan loads its five tiles a chunk through tensor descriptors where they are valid (SCAN_BY_DESCRIPTOR,
# Chapter 9): the Hopper's tensor memory accelerator (TMA), one thread issuing a tile's copy, rows past the
# sequence's end zero-filled. masked_loads is the scan before it, the same values by masked loads: the counters
# found the scan's warps waiting on their own synchronisation more than on memory ("What the counters say",
# Chapter 11). The two-stage variants ask whether a WY block fits beside the scan (gpu_scan_concurrency.py).
_MASKED_LOADS = ("\nSCAN_BY_DESCRIPTOR = True\n", "\nSCAN_BY_DESCRIPTOR = False\n")
_TWO_STAGES = ("\nFUSED_SCAN_STAGES = 3\n", "\nFUSED_SCAN_STAGES = 2\n")
# Candidates with one product on the chain of states. Today each chunk step waits on two products in turn, R = AZ -
# (AE) S and then kg^T R, with R rounded to 16 bits between them. Since S' = Diag(gamma_n) S + kg^T (AZ - AE S)
# = Diag(gamma_n) S + kg^T AZ - (kg^T AE) S, the products kg^T AE [K, K] and kg^T AZ [K, BV] need only the
# chunk's loaded tiles, so they can be formed off the chain, and the step waits on one product with S. R is still
# formed for the output, off the chain too. kg^T AE and S are rounded to the inputs' 16-bit type for that product,
# as today's products take S (in float32 the [K, K] tile overflowed an sm_90 block's shared memory when compiled
# here). Same values up to rounding (tests/test_gpu_intra_ablation.py).
_STATE_UPDATE = "        b_S = b_S * b_gn[:, None] + tl.dot(tl.trans(b_kg), b_Rq, input_precision=DOT)\n"
_OFF_CHAIN = ("        b_M = tl.dot(tl.trans(b_kg), b_AE, input_precision=DOT)      # kg^T AE [K, K]: off the chain\n"
              "        b_U = tl.dot(tl.trans(b_kg), b_AZ, input_precision=DOT)      # kg^T AZ [K, BV]: off the chain\n")
_CHAIN_16BIT = (_STATE_UPDATE, _OFF_CHAIN + "        b_S = b_S * b_gn[:, None] + b_U - "
                "tl.dot(b_M.to(b_Sq.dtype), b_Sq, input_precision=DOT)\n")
_EIGHT_WARPS = ('SCAN_TILES = {"BV": "auto", "num_warps": 4, "num_stages": 4}',
                'SCAN_TILES = {"BV": "auto", "num_warps": 8, "num_stages": 4}')
SCAN_VARIANTS = {
    "baseline": ("the shipped kernel and tiles: the tiles by tensor descriptor", [], {}),
    "one_product_chain_16bit": ("kg^T AE and kg^T AZ formed off the chain, the step waiting on one product, "
                                "(kg^T AE) S, both rounded to the inputs' type (a candidate: the same values up to "
                                "rounding)", [_CHAIN_16BIT], {}),
    "warps_8": ("the shipped scan on eight warps", [_EIGHT_WARPS], {}),
    "one_product_chain_16bit_8_warps": ("one_product_chain_16bit on eight warps (its [K, K] tile crowds four "
                                        "warps' registers)", [_CHAIN_16BIT, _EIGHT_WARPS], {}),
    "masked_loads": ("the five tiles of a chunk by masked loads, as before the descriptors (the same values)",
                     [_MASKED_LOADS], {}),
    "stages_2": ("the shipped scan with two pipeline stages instead of three", [_TWO_STAGES], {}),
    "masked_loads_2_stages": ("masked_loads with two pipeline stages instead of three", [_MASKED_LOADS, _TWO_STAGES],
                              {}),
}
# The forward's launches as they were before programmatic dependent launch (PDL, Chapter 9's PROGRAMMATIC_LAUNCH):
# each kernel then starts only when the one before has finished. The same values, bit for bit.
_PLAIN_LAUNCHES = ("\nPROGRAMMATIC_LAUNCH = True\n", "\nPROGRAMMATIC_LAUNCH = False\n")

# The redo of a flagged chunk inlined in the kernel, as it first shipped: _redo_rows a function Triton inlines, not
# a call. Compiled for sm_90, the inlined kernel's mode 1 takes 255 registers and 64 bytes of stack
# (results/compile_intra_one_launch_inlined.json), and on an H100 the forward with it was the slower one at every baseline
# shape (results/h100_forward_ablation_one_launch.json: one_intra_launch against one_intra_launch_call there).
# The same values.
_REDO_INLINED = [("@triton.jit(noinline=True)\ndef _redo_rows(", "@triton.jit\ndef _redo_rows(")]

# A candidate for mode 1's check: each row's largest midpoint exponent is a reduction over the program's lanes, four
# a program. Here the rows keep their exponents per channel [BK], maxed element by element, and the program reduces
# once, where the flags are formed: the same flags.
_ONE_EXPONENT_MAX = [
    ("    return b_L0, b_L1, b_L2, b_Ld, b_S0, b_S1, b_S2, b_Sd, tl.max(b_x), amax\n",
     "    return b_L0, b_L1, b_L2, b_Ld, b_S0, b_S1, b_S2, b_Sd, b_x, amax\n"),
    ("    e, amax = 0.0, 0.0\n", "    e, amax = tl.zeros([BK], dtype=tl.float32), 0.0\n"),
    ("        unsafe_here = (e > MID_LIMIT).to(tl.int32)\n",
     "        e = tl.max(e)\n        unsafe_here = (e > MID_LIMIT).to(tl.int32)\n"),
]

# The intra kernel's candidates (no cuts: they compute the forward's values) and plain_launches, timed as whole
# forwards (--launch forward): what a switch to one would change in the time that the harness compares with FLA's.
FORWARD_VARIANTS = {**{name: v for name, v in VARIANTS.items()
                       if name == "baseline" or name.startswith(("inverse_by_", "maxnreg_"))},
                    "plain_launches": ("the forward's launches without programmatic dependent launch (PDL), each "
                                       "kernel starting when the one before has finished (the same values)",
                                       [_PLAIN_LAUNCHES], {}),
                    "redo_inlined": ("the redo of a flagged chunk inlined in the kernel, not called (the same "
                                     "values)", _REDO_INLINED, {}),
                    "one_exponent_max": ("mode 1 reduces its midpoint exponents to one number once a program, not "
                                         "once a row (a candidate: the same flags)", _ONE_EXPONENT_MAX, {})}
LAUNCHES = {"intra": VARIANTS, "wy": WY_VARIANTS, "scan": SCAN_VARIANTS, "forward": FORWARD_VARIANTS}


def variant_source(name, source=None, variants=VARIANTS):
    """The source of chunk_kernels.py (or ``source``) with the edits of ``name`` in ``variants`` (VARIANTS or
    WY_VARIANTS); ValueError if an edit does not match exactly once."""
    if name not in variants:
        raise ValueError(f"unknown variant {name!r}; expected one of {sorted(variants)}")
    text = SOURCE.read_text() if source is None else source
    for old, new in variants[name][1]:
        if text.count(old) != 1:
            raise ValueError(f"variant {name}: an edit matches {text.count(old)} times, not once: {old[:60]!r}")
        text = text.replace(old, new)
    return text


def load_variant(name, folder, variants=VARIANTS):
    """Variant ``name`` of ``variants`` as a module of its own (written to ``folder``), its INTRA_TILES changed as
    the variant says."""
    path = Path(folder) / f"chunk_kernels_{name}{'' if variants is VARIANTS else '_wy'}.py"
    path.write_text(variant_source(name, variants=variants))
    spec = importlib.util.spec_from_file_location(f"chunk_kernels_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module                       # Triton looks kernels' globals up through the module
    spec.loader.exec_module(module)
    module.INTRA_TILES = dict(module.INTRA_TILES, **variants[name][2])
    return module


def fuse_wy_outputs(module, p, v, w):
    """For the fused_wy variant on the plan p: its extra kernel arguments (v, w [B, T, H, V] and the WY outputs,
    uninitialised) set as the module's _FUSED_WY; returns the outputs {name: tensor} of FUSED_WY_OUTPUTS: AE, KG,
    QG [B, T, H, K] and AZ [B, T, H, V] in p.store, GN [chunks, H, K] float32."""
    buffers = module._wy_buffers(p, v.device)
    out = {name: buffers[name] for name in FUSED_WY_OUTPUTS}
    module._FUSED_WY = (v, w, *out.values())
    return out


def keep_gates(module, p, device):
    """For the gates_kept variant on the plan p: its extra kernel arguments, G [B, T, H, K] float32 and Q_g
    [B, T, H, K] in p.store (uninitialised), set as the module's _GATES_KEPT; returns them as {"G", "QG"}."""
    out = dict(G=torch.empty(p.B, p.T, p.H, p.K, dtype=torch.float32, device=device),
               QG=torch.empty(p.B, p.T, p.H, p.K, dtype=p.store, device=device))
    module._GATES_KEPT = (out["G"], out["QG"])
    return out


def time_intra(module, B, T, H, device):
    """Median ms of the default path's first intra launch (mode 1: scores, flags, inverse) at (B, T, H)."""
    q, k, v, g, b, w = module.baseline_inputs(B, T, H, device=device)
    p = module._plan(q, k, v, g, b, w, None, None, None)
    A, Aqk, flags = module._intra_buffers(p, device)
    if hasattr(module, "_wy_after_inverse"):
        fuse_wy_outputs(module, p, v, w)
    keep_gates(module, p, device)                         # read by gates_kept alone
    return measure_ms(lambda: module._launch_intra(q, k, g, b, A, Aqk, flags, p, 1), warmup=50, rep=300)


def wy_launch(module, B, T, H, device):
    """The module's WY launch at (B, T, H) as a function of no arguments returning its outputs, on A from the intra
    launches; sets the module's _KEPT_G, which reads_kept_gates reads, for these inputs."""
    q, k, v, g, b, w = module.baseline_inputs(B, T, H, device=device)
    p = module._plan(q, k, v, g, b, w, None, None, None)
    A = module._intra_states(q, k, g, b, p)["A"]
    module._KEPT_G = chunk_kernels._wy_states(q, k, v, g, b, w, A, p, store_G=True)["G"]
    return lambda: module._wy_states(q, k, v, g, b, w, A, p)


def time_wy(module, B, T, H, device):
    """Median ms of the WY launch at (B, T, H), on A from the intra launches: what fused_wy would save, and what
    --launch wy times."""
    return measure_ms(wy_launch(module, B, T, H, device), warmup=50, rep=300)


def wy_outputs(module, B, T, H, device):
    """The WY launch's outputs at (B, T, H) as one tensor (AE, AZ, KG, QG flattened and cast to float32, then
    gamma_n): what a WY variant with the same values is checked by."""
    out = wy_launch(module, B, T, H, device)()
    return torch.cat([out[name].flatten().float() for name in ("AE", "AZ", "KG", "QG", "GN")])


def scan_inputs(module, B, T, H, device):
    """The plan and a forward's intermediates at (B, T, H) for the scan launch (the dict of _forward_states, its
    output in "o")."""
    q, k, v, g, b, w = module.baseline_inputs(B, T, H, device=device)
    p = module._plan(q, k, v, g, b, w, None, None, None)
    return p, module._forward_states(q, k, v, g, b, w, None, False, p, o=torch.empty_like(v), store_states=False)


def scan_output(module, B, T, H, device):
    """The output o [B, T, H, V] of the module's forward at (B, T, H), its scan launched on the module's own
    intermediates: what a scan variant is checked by against the baseline's."""
    return scan_inputs(module, B, T, H, device)[1]["o"]


def time_scan(module, B, T, H, device):
    """Median ms of the forward's scan launch (the one that writes the output) at (B, T, H), on a forward's
    intermediates."""
    p, f = scan_inputs(module, B, T, H, device)
    return measure_ms(lambda: module._scan_states(f, None, False, p, o=f["o"], store_states=False), warmup=50,
                      rep=300)


def forward_output(module, B, T, H, device):
    """The output o [B, T, H, V] of the module's default-path forward at (B, T, H) on the baseline inputs."""
    return module.chunk_gdn2_fwd(*module.baseline_inputs(B, T, H, device=device))[0]


def time_forward(module, B, T, H, device):
    """Median ms of the module's whole default-path forward (chunk_gdn2_fwd, no final state) at (B, T, H)."""
    inputs = module.baseline_inputs(B, T, H, device=device)
    return measure_ms(lambda: module.chunk_gdn2_fwd(*inputs), warmup=50, rep=300)


TIMERS = {"intra": time_intra, "wy": time_wy, "scan": time_scan, "forward": time_forward}


def parse_variants(text, variants=VARIANTS):
    """"baseline,no_inverse" -> ["baseline", "no_inverse"], each a name of ``variants``, or an argparse error."""
    names = [name for name in text.split(",") if name]
    unknown = sorted(set(names) - set(variants))
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"expected names of the variants ({', '.join(variants)}), got {text!r}")
    return names


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--commit", default=None)
    p.add_argument("--shapes", type=parse_shapes, default=((1, 8192, 16), (2, 8192, 16)))
    p.add_argument("--launch", choices=sorted(LAUNCHES), default="intra",
                   help="the launch to time: the intra kernel's (VARIANTS), the WY kernel's (WY_VARIANTS), the "
                        "scan's that writes the output (SCAN_VARIANTS), or the whole forward (FORWARD_VARIANTS)")
    p.add_argument("--variants", default=None,
                   help="comma-separated names of the launch's variants (default: all of them)")
    p.add_argument("--rounds", type=int, default=3, help="times each variant is timed, the variants in turn")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    variants = LAUNCHES[args.launch]
    try:
        names = list(variants) if args.variants is None else parse_variants(args.variants, variants)
    except argparse.ArgumentTypeError as err:
        p.error(f"--variants: {err}")
    for name in names:
        variant_source(name, variants=variants)           # every edit applies, before any compiling
    timed = TIMERS[args.launch]
    launch = dict(mode=1) if args.launch == "intra" else dict(launch=args.launch)
    result = gpu_record("gpu_intra_ablation.py", args.commit, argv, dtype="bf16", K=128, V=128, **launch,
                        shapes=[list(s) for s in args.shapes], rounds=args.rounds, complete=False, variants={})
    shapes = {"x".join(map(str, s)): s for s in args.shapes}
    with tempfile.TemporaryDirectory() as folder:
        modules = {name: load_variant(name, folder, variants) for name in names}
        # with fused_wy, the shipped WY launch is timed in every round too (on the baseline's module)
        wy_module = (modules.get("baseline") or load_variant("baseline", folder)) if "fused_wy" in names else None
        if wy_module is not None:
            result["wy"] = {"description": "the shipped WY launch, which fused_wy's intra launch replaces",
                            "rounds_ms": {s: [] for s in shapes}}
        for name, module in modules.items():
            for s in args.shapes:
                timed(module, *s, "cuda")                 # compile (and warm) every variant before any round
        outputs = {"scan": scan_output, "wy": wy_outputs, "forward": forward_output}.get(args.launch)
        if outputs is not None:             # each variant's outputs against the baseline's, on this GPU: bit for bit,
            reference = modules.get("baseline") or load_variant("baseline", folder, variants)   # and by how much
            result["same_output_as_baseline"], result["difference_to_baseline"] = {}, {}
            for name, module in modules.items():
                pairs = {key: (outputs(module, *s, "cuda").float(), outputs(reference, *s, "cuda").float())
                         for key, s in shapes.items()}
                result["same_output_as_baseline"][name] = {key: bool(torch.equal(x, y))
                                                           for key, (x, y) in pairs.items()}
                result["difference_to_baseline"][name] = {key: float((x - y).abs().max() / y.abs().max())
                                                          for key, (x, y) in pairs.items()}
        for name, module in modules.items():
            tiles = {"intra": {"intra_tiles": module.INTRA_TILES}, "wy": {"wy_tiles": module.WY_TILES},
                     "forward": {"intra_tiles": module.INTRA_TILES},
                     "scan": {"scan_tiles": module.SCAN_TILES,
                              "fused_scan_stages": module.FUSED_SCAN_STAGES}}[args.launch]
            result["variants"][name] = {"description": variants[name][0], "edits": len(variants[name][1]), **tiles,
                                        "rounds_ms": {s: [] for s in shapes}}
        for round_ in range(args.rounds):
            for name, module in modules.items():
                row = result["variants"][name]
                for key, s in shapes.items():
                    row["rounds_ms"][key].append(timed(module, *s, "cuda"))
                row["ms"] = {key: statistics.median(t) for key, t in row["rounds_ms"].items()}
                print(f"round {round_ + 1} {name:22s} " + "  ".join(f"{key} {t[-1]:.4f} ms"
                                                                 for key, t in row["rounds_ms"].items()), flush=True)
            if wy_module is not None:
                row = result["wy"]
                for key, s in shapes.items():
                    row["rounds_ms"][key].append(time_wy(wy_module, *s, "cuda"))
                row["ms"] = {key: statistics.median(t) for key, t in row["rounds_ms"].items()}
            args.out.write_text(json.dumps(result, indent=1))  # rewritten after every round
    result["complete"] = True
    args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
