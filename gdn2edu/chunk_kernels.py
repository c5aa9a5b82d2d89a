# Generated from chapters/09_triton_chunked_forward.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""The chunked GDN2 forward in Triton: intra-chunk and WY kernels parallel over chunks, a state scan, the outputs."""

import contextlib
import contextvars
import functools
import os
from typing import NamedTuple

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # must precede the @triton.jit decorations below

import triton
import triton.language as tl

from gdn2edu.fused_recurrent import _check_kernel_dtypes, _on_device
from gdn2edu.inputs import _check_state, check_positive_ints, validate_inputs


@triton.jit
def _tile(base, row0, col0, n_rows, n_cols, stride, BR: tl.constexpr, BCOL: tl.constexpr):
    """Pointers and in-bounds mask of the [BR, BCOL] tile at (row0, col0) of a row-major [n_rows, n_cols] view."""
    o_r = row0 + tl.arange(0, BR)
    o_c = col0 + tl.arange(0, BCOL)
    return base + o_r[:, None] * stride + o_c[None, :], (o_r[:, None] < n_rows) & (o_c[None, :] < n_cols)


@triton.jit
def _chunk_of_program(i_t, cu_seqlens, chunk_indices, BT: tl.constexpr):
    """For the program of global chunk i_t: its sequence's first row bos, the sequence's length T, and the
    chunk's first row t0 within the sequence (chunk_indices maps i_t to (sequence, chunk)). bos and t0 are
    64-bit: times H * K they pass 2^31 in long batches."""
    i_n, i_c = tl.load(chunk_indices + 2 * i_t), tl.load(chunk_indices + 2 * i_t + 1)
    bos, eos = tl.load(cu_seqlens + i_n), tl.load(cu_seqlens + i_n + 1)
    return bos.to(tl.int64), eos - bos, i_c.to(tl.int64) * BT


@triton.jit
def _load(base, row0, col0, n_rows, n_cols, stride, BR: tl.constexpr, BCOL: tl.constexpr):
    """The tile as float32, zero outside the view (tails of sequences, padded feature columns)."""
    p_x, m_x = _tile(base, row0, col0, n_rows, n_cols, stride, BR, BCOL)
    return tl.load(p_x, mask=m_x, other=0.0).to(tl.float32)


@triton.jit
def _row(b_x, i, BR: tl.constexpr):
    """Row i of a [BR, BCOL] register tile as a [BCOL] vector (registers cannot be indexed: mask, then sum)."""
    return tl.sum(tl.where(tl.arange(0, BR)[:, None] == i, b_x, 0.0), axis=0)


@triton.jit
def _gates(g, bos, T, row0, i_h, i_k, b_prefix, H: tl.constexpr, K: tl.constexpr, BC: tl.constexpr,
           BK: tl.constexpr, DOT: tl.constexpr):
    """Base-2 G [BC, BK] of rows row0 .. row0+BC, key block i_k, continuing the previous sub-chunk's (b_prefix
    [BK]), and G on its last row [BK], the next sub-chunk's prefix. The running sum is one product with the
    lower-triangular ones (a tensor-core product instead of a scan across the warp's lanes), in float32's
    accuracy: the exponents it forms are multiplied out, so tf32's rounding would not do."""
    GATE_DOT: tl.constexpr = "tf32x3" if DOT == "tf32" else "ieee"
    o_c = tl.arange(0, BC)
    b_g = _load(g + (bos * H + i_h) * K, row0, i_k * BK, T, K, H * K, BC, BK) * 1.4426950408889634   # G / ln 2
    b_g = tl.dot((o_c[:, None] >= o_c[None, :]).to(tl.float32), b_g, input_precision=GATE_DOT)    # rows past T add 0
    b_g = b_g + b_prefix[None, :]
    return b_g, _row(b_g, BC - 1, BC)


@triton.jit
def _sub_chunk(q, k, b, g, bos, T, row0, i_h, i_k, b_prefix, H: tl.constexpr, K: tl.constexpr,
               BC: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr):
    """Rows row0 .. row0+BC of one chunk, key block i_k, in float32 [BC, BK]: queries, erase rows b * k, keys
    and base-2 G continuing the previous sub-chunk's (b_prefix [BK]); also G on the first row [BK], from one row
    load (cheaper than picking the row out of the tile), and on the last row, the next prefix."""
    b_q = _load(q + (bos * H + i_h) * K, row0, i_k * BK, T, K, H * K, BC, BK)
    b_k = _load(k + (bos * H + i_h) * K, row0, i_k * BK, T, K, H * K, BC, BK)
    b_b = _load(b + (bos * H + i_h) * K, row0, i_k * BK, T, K, H * K, BC, BK)
    b_g, b_last = _gates(g, bos, T, row0, i_h, i_k, b_prefix, H, K, BC, BK, DOT)
    o_k = i_k * BK + tl.arange(0, BK)
    b_g_first = tl.load(g + ((bos + row0) * H + i_h) * K + o_k, mask=(o_k < K) & (row0 + 0 * o_k < T), other=0.0)
    return b_q, b_b * b_k, b_k, b_g, b_prefix + b_g_first.to(tl.float32) * 1.4426950408889634, b_last


@triton.jit
def _anchored_rows(b_q, b_e, b_g, b_m):
    """Query and erase rows times their row factors 2^(G - m), for the anchor m [BK]."""
    b_r = tl.exp2(b_g - b_m[None, :])
    return b_q * b_r, b_e * b_r


@triton.jit
def _scores(b_qr, b_er, b_m, b_k, b_gk, DOT: tl.constexpr):
    """(E_a Y_c^T, Q_a Y_c^T): anchored rows of sub-chunk a against the keys b_k (base-2 G b_gk) of a
    sub-chunk c <= a, whose column factors 2^(m - G_key) are formed here for the same anchor m."""
    b_kt = tl.trans(b_k * tl.exp2(b_m[None, :] - b_gk))
    return tl.dot(b_er, b_kt, input_precision=DOT), tl.dot(b_qr, b_kt, input_precision=DOT)


@triton.jit
def _pairwise_scores(b_q, b_e, b_k, b_g, BC: tl.constexpr):
    """A diagonal block token by token: column j of (E Y^T, Q Y^T) is sum_c (row)_ic k_jc 2^(G_ic - G_jc) for
    rows i >= j. Every factor is at most 1, whatever the gates; entries above the diagonal are zero."""
    o_c = tl.arange(0, BC)
    b_l = tl.zeros([BC, BC], dtype=tl.float32)
    b_s = tl.zeros([BC, BC], dtype=tl.float32)
    for j in range(BC):
        b_f = tl.exp2(tl.where(o_c[:, None] >= j, b_g - _row(b_g, j, BC)[None, :], float("-inf")))
        b_kf = _row(b_k, j, BC)[None, :] * b_f                                  # key j seen from each row
        b_l = tl.where(o_c[None, :] == j, tl.sum(b_e * b_kf, axis=1)[:, None], b_l)
        b_s = tl.where(o_c[None, :] == j, tl.sum(b_q * b_kf, axis=1)[:, None], b_s)
    return b_l, b_s


@triton.jit
def _diagonal_scores(b_q, b_e, b_k, b_g, b_first, b_last, PAIRWISE: tl.constexpr, BC: tl.constexpr,
                     DOT: tl.constexpr):
    """A diagonal block (E_a Y_a^T, Q_a Y_a^T), [BC, BC] each, token by token or by one product with the midpoint
    anchor m; and per channel [BK] the largest base-2 exponent the midpoint puts on a factor,
    max(G_first - m, m - G_last) (b_first, b_last: G on the first and last rows), whose maximum decides whether
    that product was safe (0 when PAIRWISE)."""
    if PAIRWISE:
        b_l, b_s = _pairwise_scores(b_q, b_e, b_k, b_g, BC)
        b_x = tl.zeros_like(b_last)
    else:
        b_m = _row(b_g, BC // 2, BC)
        b_qr, b_er = _anchored_rows(b_q, b_e, b_g, b_m)
        b_l, b_s = _scores(b_qr, b_er, b_m, b_k, b_g, DOT)
        b_x = tl.maximum(b_first - b_m, b_m - b_last)
    return b_l, b_s, b_x


@triton.jit
def _row_scores(q, k, g, b, bos, T, t0, i_h, scale, ROW: tl.constexpr, H: tl.constexpr, K: tl.constexpr,
                BC: tl.constexpr, BK: tl.constexpr, PAIRWISE: tl.constexpr, CHECK_OPERANDS: tl.constexpr,
                DOT: tl.constexpr):
    """Row ROW of one chunk's blocks: (ROW, c), c <= ROW, of L_<=(E Y^T) and L_<=(Q Y^T), accumulated over key
    blocks: the diagonal block token by token (PAIRWISE) or on the midpoint anchor, the blocks below with the
    rows of sub-chunk ROW anchored at its first row, where every factor is at most 1. Returns the blocks of L
    for c = 0, 1, 2 (zero from c = ROW on) and the diagonal one, the same of Q Y^T, the row's largest midpoint
    exponent and its largest |k|, |b k|, |scale q| (what a midpoint factor multiplies). The sub-chunks before
    ROW are read again for their keys and G, which the cumulative sum needs from the chunk's first row on."""
    amax = 0.0
    b_x = tl.zeros([BK], dtype=tl.float32)     # the exponents per channel position, maxed over blocks: one
    z = tl.zeros([BC, BC], dtype=tl.float32)   # reduction to a scalar at the end instead of one per block
    b_L0, b_L1, b_L2, b_Ld, b_S0, b_S1, b_S2, b_Sd = z, z, z, z, z, z, z, z
    for i_k in range(tl.cdiv(K, BK)):          # the scores are sums over the key axis: accumulate by blocks
        b_p = tl.zeros([BK], dtype=tl.float32)
        b_g0, b_g1, b_g2 = z, z, z             # G of the sub-chunks before ROW (a constexpr: only those used)
        if ROW > 0:
            b_g0, b_p = _gates(g, bos, T, t0, i_h, i_k, b_p, H, K, BC, BK, DOT)
        if ROW > 1:
            b_g1, b_p = _gates(g, bos, T, t0 + BC, i_h, i_k, b_p, H, K, BC, BK, DOT)
        if ROW > 2:
            b_g2, b_p = _gates(g, bos, T, t0 + 2 * BC, i_h, i_k, b_p, H, K, BC, BK, DOT)
        b_q, b_e, b_k, b_g, b_first, b_last = _sub_chunk(q, k, b, g, bos, T, t0 + ROW * BC, i_h, i_k, b_p,
                                                         H, K, BC, BK, DOT)
        if CHECK_OPERANDS:
            amax = tl.maximum(amax, _largest(b_q, b_e, b_k, scale))
        b_l, b_s, b_xa = _diagonal_scores(b_q, b_e, b_k, b_g, b_first, b_last, PAIRWISE, BC, DOT)
        b_Ld, b_Sd = b_Ld + b_l, b_Sd + b_s
        b_x = tl.maximum(b_x, b_xa)
        if ROW > 0:
            b_qr, b_er = _anchored_rows(b_q, b_e, b_g, b_first)
            b_k0 = _load(k + (bos * H + i_h) * K, t0, i_k * BK, T, K, H * K, BC, BK)
            b_l, b_s = _scores(b_qr, b_er, b_first, b_k0, b_g0, DOT)
            b_L0, b_S0 = b_L0 + b_l, b_S0 + b_s
            if ROW > 1:
                b_k1 = _load(k + (bos * H + i_h) * K, t0 + BC, i_k * BK, T, K, H * K, BC, BK)
                b_l, b_s = _scores(b_qr, b_er, b_first, b_k1, b_g1, DOT)
                b_L1, b_S1 = b_L1 + b_l, b_S1 + b_s
            if ROW > 2:
                b_k2 = _load(k + (bos * H + i_h) * K, t0 + 2 * BC, i_k * BK, T, K, H * K, BC, BK)
                b_l, b_s = _scores(b_qr, b_er, b_first, b_k2, b_g2, DOT)
                b_L2, b_S2 = b_L2 + b_l, b_S2 + b_s
    return b_L0, b_L1, b_L2, b_Ld, b_S0, b_S1, b_S2, b_Sd, tl.max(b_x), amax


@triton.jit
def _largest(b_q, b_e, b_k, scale):
    """The largest of |scale q|, |b k| and |k| on a tile."""
    return tl.max(tl.maximum(tl.maximum(tl.abs(b_q) * scale, tl.abs(b_e)), tl.abs(b_k)))


@triton.jit
def _substitute_row(b_A, b_L, m_i):
    """Row i (mask m_i) of A = (I + L)^{-1}: e_i - sum_j L_ij (row j of A), with rows j < i already final. With
    L and A block-diagonal (sub-blocks of A final above row i), m_i may mark row i of every sub-block, each only
    within its own sub-block's columns: one step then does them all."""
    b_l = tl.sum(tl.where(m_i, b_L, 0.0), axis=0)                              # row i of L: [BC]
    return tl.where(m_i, b_A - tl.sum(b_l[:, None] * b_A, axis=0)[None, :], b_A)


@triton.jit
def _merge_pairs(b_A, b_L, m_off, DOT: tl.constexpr):
    """D - D L_off D: the inverse over pairs of neighbouring sub-blocks from D, the inverse over each, and L_off,
    L on the links m_off that join the two of a pair."""
    return b_A - tl.dot(b_A, tl.dot(tl.where(m_off, b_L, 0.0), b_A, input_precision=DOT), input_precision=DOT)


@triton.jit
def _invert_unit_lower4(b_L0, b_L1, b_L2, b_L3, BC: tl.constexpr, SUB: tl.constexpr, DOT: tl.constexpr):
    """(I + L)^{-1} of four strictly lower-triangular [BC, BC] tiles (BC <= 16): forward substitution on
    sub-blocks of SUB rows, row i of every sub-block in one step (SUB - 1 steps), then merges that pair the
    sub-blocks up to BC rows (_merge_pairs, DOT products). SUB = BC is the substitution row by row. The four
    tiles are independent: one loop lets their dependent chains overlap."""
    tl.static_assert(BC <= 16 and BC % SUB == 0)          # BC = 16: SUB is a power of two, the merges reach BC
    o_c = tl.arange(0, BC)
    b_I = (o_c[:, None] == o_c[None, :]).to(tl.float32)
    b_A0, b_A1, b_A2, b_A3 = b_I, b_I, b_I, b_I
    m_same = (o_c[:, None] // SUB) == (o_c[None, :] // SUB)                      # within one sub-block
    for i in range(1, SUB):
        m_i = ((o_c[:, None] % SUB) == i) & m_same
        b_A0 = _substitute_row(b_A0, b_L0, m_i)
        b_A1 = _substitute_row(b_A1, b_L1, m_i)
        b_A2 = _substitute_row(b_A2, b_L2, m_i)
        b_A3 = _substitute_row(b_A3, b_L3, m_i)
    for d in tl.static_range(4):               # sub-blocks of SUB << d rows, paired while narrower than BC
        if (SUB << d) < BC:
            m_off = (((o_c[:, None] // (SUB << (d + 1))) == (o_c[None, :] // (SUB << (d + 1))))
                     & ((o_c[:, None] // (SUB << d)) != (o_c[None, :] // (SUB << d))))
            b_A0 = _merge_pairs(b_A0, b_L0, m_off, DOT)
            b_A1 = _merge_pairs(b_A1, b_L1, m_off, DOT)
            b_A2 = _merge_pairs(b_A2, b_L2, m_off, DOT)
            b_A3 = _merge_pairs(b_A3, b_L3, m_off, DOT)
    return b_A0, b_A1, b_A2, b_A3


@triton.jit
def _store_block(A, bos, T, i_h, row0, col0, b_x, H: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    p_A, m_A = _tile(A + (bos * H + i_h) * BT, row0, col0, T, BT, H * BT, BC, BC)
    tl.store(p_A, b_x.to(p_A.dtype.element_ty), mask=m_A)


@triton.jit
def _store_row(A, bos, T, i_h, t0, ROW: tl.constexpr, b_x0, b_x1, b_x2, b_xd, H: tl.constexpr, BT: tl.constexpr,
               BC: tl.constexpr):
    """The blocks (ROW, c), c <= ROW, of a chunk's [BT, BT] rows: b_x0, b_x1, b_x2 for c < ROW, b_xd for c = ROW."""
    if ROW > 0:
        _store_block(A, bos, T, i_h, t0 + ROW * BC, 0, b_x0, H, BT, BC)
    if ROW > 1:
        _store_block(A, bos, T, i_h, t0 + ROW * BC, BC, b_x1, H, BT, BC)
    if ROW > 2:
        _store_block(A, bos, T, i_h, t0 + ROW * BC, 2 * BC, b_x2, H, BT, BC)
    _store_block(A, bos, T, i_h, t0 + ROW * BC, ROW * BC, b_xd, H, BT, BC)


@triton.jit
def _store_scores(A, Aqk, bos, T, i_h, t0, scale, ROW: tl.constexpr, b_L0, b_L1, b_L2, b_Ld, b_S0, b_S1, b_S2,
                  b_Sd, H: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    """Row ROW of one chunk's blocks as _row_scores returns them: those of L into A, unmasked, those of
    scale * Q Y^T into Aqk, its diagonal block masked inclusively."""
    o_c = tl.arange(0, BC)
    _store_row(A, bos, T, i_h, t0, ROW, b_L0, b_L1, b_L2, b_Ld, H, BT, BC)
    _store_row(Aqk, bos, T, i_h, t0, ROW, scale * b_S0, scale * b_S1, scale * b_S2,
               scale * tl.where(o_c[:, None] >= o_c[None, :], b_Sd, 0.0), H, BT, BC)


@triton.jit
def _load_block(A, bos, T, i_h, row0, col0, H: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    """A [BC, BC] block of a chunk's [BT, BT] rows, as _store_block wrote it; zero on rows past T."""
    return _load(A + (bos * H + i_h) * BT, row0, col0, T, BT, H * BT, BC, BC)


@triton.jit
def _store_inverse(A, bos, T, i_h, t0, b_L00, b_L11, b_L22, b_L33, b_L10, b_L20, b_L21, b_L30, b_L31, b_L32,
                   H: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, SUB: tl.constexpr, DOT: tl.constexpr):
    """A = (I + L)^{-1} of one chunk from the ten [BC, BC] blocks of L (diagonal ones not yet masked), stored
    as the chunk's [BT, BT] rows of A; SUB: the diagonal blocks' substitution width (_invert_unit_lower4)."""
    o_c = tl.arange(0, BC)
    m_strict = o_c[:, None] > o_c[None, :]
    # the diagonal blocks: invert each 16 x 16 unit-triangular block, substitution on sub-blocks and merges
    b_Ai00, b_Ai11, b_Ai22, b_Ai33 = _invert_unit_lower4(
        tl.where(m_strict, b_L00, 0.0), tl.where(m_strict, b_L11, 0.0),
        tl.where(m_strict, b_L22, 0.0), tl.where(m_strict, b_L33, 0.0), BC, SUB, DOT)
    # the blocks below: A_ac = -A_aa sum_{c <= d < a} L_ad A_dc, one sub-diagonal at a time
    b_Ai10 = -tl.dot(b_Ai11, tl.dot(b_L10, b_Ai00, input_precision=DOT), input_precision=DOT)
    b_Ai21 = -tl.dot(b_Ai22, tl.dot(b_L21, b_Ai11, input_precision=DOT), input_precision=DOT)
    b_Ai32 = -tl.dot(b_Ai33, tl.dot(b_L32, b_Ai22, input_precision=DOT), input_precision=DOT)
    b_Ai20 = -tl.dot(b_Ai22, tl.dot(b_L20, b_Ai00, input_precision=DOT)
                     + tl.dot(b_L21, b_Ai10, input_precision=DOT), input_precision=DOT)
    b_Ai31 = -tl.dot(b_Ai33, tl.dot(b_L31, b_Ai11, input_precision=DOT)
                     + tl.dot(b_L32, b_Ai21, input_precision=DOT), input_precision=DOT)
    b_Ai30 = -tl.dot(b_Ai33, tl.dot(b_L30, b_Ai00, input_precision=DOT)
                     + tl.dot(b_L31, b_Ai10, input_precision=DOT)
                     + tl.dot(b_L32, b_Ai20, input_precision=DOT), input_precision=DOT)
    _store_block(A, bos, T, i_h, t0, 0, b_Ai00, H, BT, BC)
    _store_block(A, bos, T, i_h, t0 + BC, 0, b_Ai10, H, BT, BC)
    _store_block(A, bos, T, i_h, t0 + BC, BC, b_Ai11, H, BT, BC)
    _store_block(A, bos, T, i_h, t0 + 2 * BC, 0, b_Ai20, H, BT, BC)
    _store_block(A, bos, T, i_h, t0 + 2 * BC, BC, b_Ai21, H, BT, BC)
    _store_block(A, bos, T, i_h, t0 + 2 * BC, 2 * BC, b_Ai22, H, BT, BC)
    _store_block(A, bos, T, i_h, t0 + 3 * BC, 0, b_Ai30, H, BT, BC)
    _store_block(A, bos, T, i_h, t0 + 3 * BC, BC, b_Ai31, H, BT, BC)
    _store_block(A, bos, T, i_h, t0 + 3 * BC, 2 * BC, b_Ai32, H, BT, BC)
    _store_block(A, bos, T, i_h, t0 + 3 * BC, 3 * BC, b_Ai33, H, BT, BC)


@triton.jit(noinline=True)
def _redo_rows(q, k, g, b, A, Aqk, bos, T, t0, i_h, scale, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
               BC: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr):
    """A flagged chunk's four rows of blocks formed again, the diagonal blocks token by token, and stored over
    the first pass's. A function Triton does not inline (a call): on an H100 the forward was faster with it
    called than inlined, at no fewer registers (Chapter 9, "One launch for the intra kernel")."""
    for ROW in tl.static_range(4):
        b_L0, b_L1, b_L2, b_Ld, b_S0, b_S1, b_S2, b_Sd, e_row, amax_row = _row_scores(
            q, k, g, b, bos, T, t0, i_h, scale, ROW, H, K, BC, BK, True, False, DOT)
        _store_scores(A, Aqk, bos, T, i_h, t0, scale, ROW, b_L0, b_L1, b_L2, b_Ld, b_S0, b_S1, b_S2, b_Sd,
                      H, BT, BC)


@triton.jit
def chunk_gdn2_fwd_intra_kernel(q, k, g, b, A, Aqk, flags, cu_seqlens, chunk_indices, scale,
                                H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
                                BK: tl.constexpr, SUB: tl.constexpr, MODE: tl.constexpr,
                                MID_LIMIT: tl.constexpr, OPERAND_LIMIT: tl.constexpr, DOT: tl.constexpr,
                                PDL: tl.constexpr = False):
    """One (chunk, head), program i_t * H + i_h: A = (I + L)^{-1} and Aqk = L_<=(Q_g Y^T) (Q_g with the scale in
    it, applied here as a factor on the stored blocks), written as [T, H, BT] rows (Aqk whole, zero above the
    diagonal; A's blocks above it are not written). MODE 0: midpoint anchors on the diagonal blocks, unchecked
    (safe_gate). MODE 1: the same, checked: the chunk's flags [chunks, H] int32 written, bit 0 when a midpoint
    exponent passed MID_LIMIT, bit 1 when bit 0 is set or the exponent passed OPERAND_LIMIT less log2 of the
    largest operand (the backward's test, for float16), and a chunk with bit 0 formed again, its diagonal blocks
    token by token, before its inverse. SUB: the width of the sub-blocks on which the diagonal blocks'
    substitution runs (SUBSTITUTION_WIDTH). PDL: wait first for the launch before (programmatic dependent
    launch)."""
    if PDL:                                     # the earlier launch's writes first
        tl.extra.cuda.gdc_wait()
    i_t, i_h = tl.program_id(0) // H, tl.program_id(0) % H      # a chunk's heads: neighbouring programs
    bos, T, t0 = _chunk_of_program(i_t, cu_seqlens, chunk_indices, BT)
    CHECK_OPERANDS: tl.constexpr = OPERAND_LIMIT < MID_LIMIT
    # phase 1, one row of sub-chunks at a time (unrolled: ROW is a constexpr): its blocks of L go to A unmasked,
    # those of Q Y^T to Aqk; e and amax, maxed over the rows, start at 0, below any midpoint exponent or |operand|
    e, amax = 0.0, 0.0
    for ROW in tl.static_range(4):
        b_L0, b_L1, b_L2, b_Ld, b_S0, b_S1, b_S2, b_Sd, e_row, amax_row = _row_scores(
            q, k, g, b, bos, T, t0, i_h, scale, ROW, H, K, BC, BK, False, CHECK_OPERANDS, DOT)
        e, amax = tl.maximum(e, e_row), tl.maximum(amax, amax_row)
        _store_scores(A, Aqk, bos, T, i_h, t0, scale, ROW, b_L0, b_L1, b_L2, b_Ld, b_S0, b_S1, b_S2, b_Sd, H, BT, BC)
        for c in tl.static_range(ROW + 1, 4):   # Aqk's blocks above the diagonal, zero: its readers take whole
            _store_block(Aqk, bos, T, i_h, t0 + ROW * BC, c * BC, tl.zeros([BC, BC], dtype=tl.float32), H, BT,
                         BC)                    # 64 x 64 tiles straight into their products, unmasked
    if MODE == 1:
        unsafe_here = (e > MID_LIMIT).to(tl.int32)
        unsafe_for_operands = (e + tl.log2(tl.maximum(amax, 1.0)) > OPERAND_LIMIT).to(tl.int32)
        tl.store(flags + i_t * H + i_h, unsafe_here + 2 * tl.maximum(unsafe_here, unsafe_for_operands))
        if e > MID_LIMIT:                       # (the whole program's branch: e is one value) the four rows again,
            tl.debug_barrier()                  # the diagonal blocks token by token, over the first pass's stores
            _redo_rows(q, k, g, b, A, Aqk, bos, T, t0, i_h, scale, H, K, BT, BC, BK, DOT)
    # phase 2: read the ten blocks of L back (the barrier makes every thread's stores visible to all) and
    # overwrite them with A = (I + L)^{-1} (the second barrier: every block is read before any is overwritten)
    tl.debug_barrier()
    b_L00 = _load_block(A, bos, T, i_h, t0, 0, H, BT, BC)
    b_L10 = _load_block(A, bos, T, i_h, t0 + BC, 0, H, BT, BC)
    b_L11 = _load_block(A, bos, T, i_h, t0 + BC, BC, H, BT, BC)
    b_L20 = _load_block(A, bos, T, i_h, t0 + 2 * BC, 0, H, BT, BC)
    b_L21 = _load_block(A, bos, T, i_h, t0 + 2 * BC, BC, H, BT, BC)
    b_L22 = _load_block(A, bos, T, i_h, t0 + 2 * BC, 2 * BC, H, BT, BC)
    b_L30 = _load_block(A, bos, T, i_h, t0 + 3 * BC, 0, H, BT, BC)
    b_L31 = _load_block(A, bos, T, i_h, t0 + 3 * BC, BC, H, BT, BC)
    b_L32 = _load_block(A, bos, T, i_h, t0 + 3 * BC, 2 * BC, H, BT, BC)
    b_L33 = _load_block(A, bos, T, i_h, t0 + 3 * BC, 3 * BC, H, BT, BC)
    tl.debug_barrier()
    _store_inverse(A, bos, T, i_h, t0, b_L00, b_L11, b_L22, b_L33, b_L10, b_L20, b_L21, b_L30, b_L31, b_L32,
                   H, BT, BC, SUB, DOT)


@triton.jit
def chunk_gdn2_fwd_wy_kernel(q, k, v, g, b, w, A, AE, AZ, KG, QG, GN, Gc, cu_seqlens, chunk_indices, scale,
                             H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                             BK: tl.constexpr, BV: tl.constexpr, STORE_G: tl.constexpr, STORE_AZ: tl.constexpr,
                             DOT: tl.constexpr, PDL: tl.constexpr = False):
    """One (chunk, head), program i_t * H + i_h: AE, AZ (only with STORE_AZ), kg = K * gamma_n / gamma,
    Q_g = scale * Q * gamma ([T, H, *] rows) and gamma_n ([chunks, H, K]), from A ([T, H, BT] rows) and the
    inputs; with STORE_G also the base-2 G from the chunk's start (Gc [T, H, K] float32, for the backward of
    Chapter 10). PDL: as in the intra kernel."""
    if PDL:                                     # the earlier launch's writes first
        tl.extra.cuda.gdc_wait()
    i_t, i_h = tl.program_id(0) // H, tl.program_id(0) % H      # a chunk's heads: neighbouring programs
    bos, T, t0 = _chunk_of_program(i_t, cu_seqlens, chunk_indices, BT)
    o_t = tl.arange(0, BT)
    b_A = tl.where(o_t[:, None] >= o_t[None, :], _load(A + (bos * H + i_h) * BT, t0, 0, T, BT, H * BT, BT, BT), 0.0)
    p_qk, p_vw = (bos * H + i_h) * K, (bos * H + i_h) * V
    for i_k in range(tl.cdiv(K, BK)):       # the decay is per key channel: key blocks are independent
        # base-2 G from the chunk's start; rows past T load g = 0, so the last row is G at the chunk's end
        b_G = tl.cumsum(_load(g + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * 1.4426950408889634, axis=0)
        b_Gn = tl.sum(tl.where(o_t[:, None] == BT - 1, b_G, 0.0), axis=0)
        b_k = _load(k + p_qk, t0, i_k * BK, T, K, H * K, BT, BK)
        b_E = _load(b + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * b_k * tl.exp2(b_G)
        p_x, m_x = _tile(AE + p_qk, t0, i_k * BK, T, K, H * K, BT, BK)
        tl.store(p_x, tl.dot(b_A, b_E, input_precision=DOT), mask=m_x)
        p_x, m_x = _tile(KG + p_qk, t0, i_k * BK, T, K, H * K, BT, BK)
        tl.store(p_x, b_k * tl.exp2(b_Gn[None, :] - b_G), mask=m_x)
        p_x, m_x = _tile(QG + p_qk, t0, i_k * BK, T, K, H * K, BT, BK)
        tl.store(p_x, _load(q + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * (scale * tl.exp2(b_G)), mask=m_x)
        o_k = i_k * BK + tl.arange(0, BK)
        tl.store(GN + (i_t * H + i_h) * K + o_k, tl.exp2(b_Gn), mask=o_k < K)
        if STORE_G:
            p_x, m_x = _tile(Gc + p_qk, t0, i_k * BK, T, K, H * K, BT, BK)
            tl.store(p_x, b_G, mask=m_x)
    if STORE_AZ:                            # only the scan reads AZ
        for i_v in range(tl.cdiv(V, BV)):
            b_Z = _load(v + p_vw, t0, i_v * BV, T, V, H * V, BT, BV) * _load(w + p_vw, t0, i_v * BV, T, V, H * V,
                                                                             BT, BV)
            p_x, m_x = _tile(AZ + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
            tl.store(p_x, tl.dot(b_A, b_Z, input_precision=DOT), mask=m_x)


@triton.jit
def _load_tile(base, row0, col0, n_rows, n_cols, stride, BR: tl.constexpr, BCOL: tl.constexpr):
    """The tile in its stored dtype, zero outside the view."""
    p_x, m_x = _tile(base, row0, col0, n_rows, n_cols, stride, BR, BCOL)
    return tl.load(p_x, mask=m_x, other=0.0)


@triton.jit
def _chunk_tile(d_x, base, row, col, n_rows, n_cols, stride, BR: tl.constexpr, BCOL: tl.constexpr,
                BY_DESCRIPTOR: tl.constexpr):
    """A chunk's [BR, BCOL] tile from column ``col``, in its stored dtype: BY_DESCRIPTOR, through the tensor
    descriptor d_x at row ``row`` (rows past its bound arrive as zeros); else masked loads from ``base``, the
    chunk's first row, with n_rows rows left."""
    if BY_DESCRIPTOR:
        x = d_x.load([row, col])
    else:
        x = _load_tile(base, 0, col, n_rows, n_cols, stride, BR, BCOL)
    return x


@triton.jit
def chunk_gdn2_fwd_scan_kernel(AE, AZ, KG, GN, h, R, h0, ht, QG, Aqk, o, cu_seqlens, chunk_offsets,
                               H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                               BK: tl.constexpr, BV: tl.constexpr, USE_INITIAL_STATE: tl.constexpr,
                               STORE_FINAL_STATE: tl.constexpr, STORE_STATES: tl.constexpr,
                               WRITE_OUTPUT: tl.constexpr, DOT: tl.constexpr, BY_DESCRIPTOR: tl.constexpr,
                               PDL: tl.constexpr = False):
    """One (sequence, head, value block): S <- Diag(gamma_n) S + kg^T (AZ - (AE) S) over the chunks; with
    STORE_STATES it writes each chunk's entering state h [chunks, H, K, V] and corrections R [T, H, V], with
    WRITE_OUTPUT each chunk's output O = Q_g h + Aqk R into o [T, H, V] (h and R as rounded for storage).
    BY_DESCRIPTOR: AE, AZ, KG, QG and Aqk arrive through tensor descriptors (needs rows of 16-byte multiples).
    PDL: as in the intra kernel."""
    if PDL:                                     # the earlier launch's writes first
        tl.extra.cuda.gdc_wait()
    i_v, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)      # 64-bit: i_nh * K * V may pass 2^31
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = tl.load(cu_seqlens + i_n).to(tl.int64), tl.load(cu_seqlens + i_n + 1)
    c0 = tl.load(chunk_offsets + i_n).to(tl.int64)
    T = eos - tl.load(cu_seqlens + i_n)                              # 32-bit: the masks compare rows with it
    NT = tl.cdiv(T, BT)
    o_k = tl.arange(0, BK)
    b_S = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_INITIAL_STATE:
        b_S = _load(h0 + i_nh * K * V, 0, i_v * BV, K, V, V, BK, BV)
    # the chunk's first row as 64-bit offsets, advanced a chunk a step, and the rows within it (and their masks
    # against the n_t rows left) in 32 bits: offsets within a sequence pass 2^31 in long ones, within a chunk never
    r_qk, r_vw, r_a = (bos * H + i_h) * K, (bos * H + i_h) * V, (bos * H + i_h) * BT
    b_gn = tl.load(GN + (c0 * H + i_h) * K + o_k, mask=o_k < K, other=0.0)
    if BY_DESCRIPTOR:      # made once a program; the row bound, the sequence's end, zero-fills the last chunk's tail
        d_AE = tl.make_tensor_descriptor(AE + i_h * K, [eos, K], [H * K, 1], [BT, BK])
        d_KG = tl.make_tensor_descriptor(KG + i_h * K, [eos, K], [H * K, 1], [BT, BK])
        d_AZ = tl.make_tensor_descriptor(AZ + i_h * V, [eos, V], [H * V, 1], [BT, BV])
        if WRITE_OUTPUT:
            d_QG = tl.make_tensor_descriptor(QG + i_h * K, [eos, K], [H * K, 1], [BT, BK])
            d_Aqk = tl.make_tensor_descriptor(Aqk + i_h * BT, [eos, BT], [H * BT, 1], [BT, BT])
        else:
            d_QG, d_Aqk = QG, Aqk
    else:                      # not read: the pointers stand in
        d_AE, d_KG, d_AZ, d_QG, d_Aqk = AE, KG, AZ, QG, Aqk
    for i_t in range(NT):
        n_t = T - i_t * BT
        row = (bos + i_t * BT).to(tl.int32)                          # the chunk's first row, for the descriptors
        # gamma_n of the next chunk (of the last one again at the end), issued a step ahead: the update at the
        # end of this step need not wait for its load
        i_next = tl.minimum(i_t + 1, NT - 1)
        b_gn_next = tl.load(GN + ((c0 + i_next) * H + i_h) * K + o_k, mask=o_k < K, other=0.0)
        b_Sq = b_S.to(AE.dtype.element_ty)                         # S as the products (and h) take it
        if STORE_STATES:
            p_h, m_h = _tile(h + ((c0 + i_t) * H + i_h) * K * V, 0, i_v * BV, K, V, V, BK, BV)
            tl.store(p_h, b_Sq, mask=m_h)
        # R = AZ - (AE) S: the corrections against the state entering the chunk
        b_AE = _chunk_tile(d_AE, AE + r_qk, row, 0, n_t, K, H * K, BT, BK, BY_DESCRIPTOR)
        b_AZ = _chunk_tile(d_AZ, AZ + r_vw, row, i_v * BV, n_t, V, H * V, BT, BV, BY_DESCRIPTOR)
        b_R = b_AZ.to(tl.float32) - tl.dot(b_AE, b_Sq, input_precision=DOT)
        b_Rq = b_R.to(KG.dtype.element_ty)                         # R as the products (and R's store) take it
        if STORE_STATES:
            p_r, m_r = _tile(R + r_vw, 0, i_v * BV, n_t, V, H * V, BT, BV)
            tl.store(p_r, b_Rq, mask=m_r)
        if WRITE_OUTPUT:                                            # O = Q_g h + Aqk R, off the state's path
            b_QG = _chunk_tile(d_QG, QG + r_qk, row, 0, n_t, K, H * K, BT, BK, BY_DESCRIPTOR)
            # zero above the diagonal as stored
            b_Aqk = _chunk_tile(d_Aqk, Aqk + r_a, row, 0, n_t, BT, H * BT, BT, BT, BY_DESCRIPTOR)
            b_O = tl.dot(b_QG, b_Sq, input_precision=DOT) + tl.dot(b_Aqk.to(b_Rq.dtype), b_Rq, input_precision=DOT)
            p_o, m_o = _tile(o + r_vw, 0, i_v * BV, n_t, V, H * V, BT, BV)
            tl.store(p_o, b_O.to(p_o.dtype.element_ty), mask=m_o)
        # S <- Diag(gamma_n) S + kg^T R
        b_kg = _chunk_tile(d_KG, KG + r_qk, row, 0, n_t, K, H * K, BT, BK, BY_DESCRIPTOR)
        b_S = b_S * b_gn[:, None] + tl.dot(tl.trans(b_kg), b_Rq, input_precision=DOT)
        b_gn = b_gn_next
        r_qk, r_vw, r_a = r_qk + BT * H * K, r_vw + BT * H * V, r_a + BT * H * BT
    if STORE_FINAL_STATE:
        p_ht, m_ht = _tile(ht + i_nh * K * V, 0, i_v * BV, K, V, V, BK, BV)
        tl.store(p_ht, b_S, mask=m_ht)


@triton.jit
def chunk_gdn2_fwd_output_kernel(QG, h, Aqk, R, o, cu_seqlens, chunk_indices,
                                 H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                                 BK: tl.constexpr, BV: tl.constexpr, DOT: tl.constexpr):
    """One (chunk, head, value block): O = Q_g h + Aqk R, written in o's dtype."""
    i_t, i_h, i_v = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    bos, T, t0 = _chunk_of_program(i_t, cu_seqlens, chunk_indices, BT)
    p_qk, p_vw = (bos * H + i_h) * K, (bos * H + i_h) * V
    b_QG = _load_tile(QG + p_qk, t0, 0, T, K, H * K, BT, BK)
    b_h = _load_tile(h + (i_t.to(tl.int64) * H + i_h) * K * V, 0, i_v * BV, K, V, V, BK, BV)
    b_R = _load_tile(R + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
    b_Aqk = _load_tile(Aqk + (bos * H + i_h) * BT, t0, 0, T, BT, H * BT, BT, BT)
    b_O = tl.dot(b_QG, b_h, input_precision=DOT) + tl.dot(b_Aqk.to(b_R.dtype), b_R, input_precision=DOT)
    p_o, m_o = _tile(o + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
    tl.store(p_o, b_O.to(p_o.dtype.element_ty), mask=m_o)


def _check_cu_seqlens(cu_seqlens, B, T):
    """Validate packed-sequence offsets [N + 1]; return them as a tuple of ints. Reading them makes the host wait
    for a GPU tensor, not for a CPU one (the kernels get a device copy of the program map, _schedule's)."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise ValueError(f"cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"cu_seqlens must be an int32 or int64 tensor, got dtype {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be 1-D [N + 1] with N >= 1, got shape {tuple(cu_seqlens.shape)}")
    if B != 1:
        raise ValueError(f"with cu_seqlens the batch must be 1 (sequences packed along T), got B = {B}")
    offsets = tuple(cu_seqlens.tolist())
    if offsets[0] != 0 or offsets[-1] != T or any(a >= c for a, c in zip(offsets, offsets[1:])):
        raise ValueError(f"cu_seqlens must start at 0, increase strictly and end at T = {T}, got {list(offsets)}")
    return offsets


@functools.lru_cache(maxsize=64)
def _schedule(offsets, BT, device):
    """Device tensors that map programs to work, for sequence offsets (t_0 = 0, ..., t_N) and chunk size BT:
    cu_seqlens int32 [N + 1]; chunk_indices int32 [chunks, 2] = (sequence, chunk within it), all chunks
    of all sequences in order; chunk_offsets int32 [N + 1], the first chunk of each sequence. Cached: a
    training loop calls with the same shapes every step, and building them costs host work and a copy."""
    counts = [triton.cdiv(e - a, BT) for a, e in zip(offsets, offsets[1:])]
    pairs = [(n, c) for n, count in enumerate(counts) for c in range(count)]
    firsts = [0]
    for count in counts:
        firsts.append(firsts[-1] + count)
    as_int32 = dict(dtype=torch.int32, device=device)
    return torch.tensor(offsets, **as_int32), torch.tensor(pairs, **as_int32), torch.tensor(firsts, **as_int32)


# Tiles of the scan kernel (its num_warps only where BK > 64): value-block width, warps and pipeline stages, and
# of the other kernels.
# Set by the recorded sweeps of tools/gpu_forward_sweep.py on an H200 (results/h200_forward_sweep_run*.json;
# Chapter 9 asserts each table is its sweep's winner); module-level tables so that a tuning run can try others.
SCAN_TILES = {"BV": "auto", "num_warps": 4, "num_stages": 4}  # "auto": _one_wave_block, per call
# the WY kernel's key and value blocks, warps and stages
WY_TILES = {"BK": 32, "BV": 64, "num_warps": 2, "num_stages": 3}
OUTPUT_TILES = {"BV": 128, "num_warps": 4}                # the output kernel's value block, warps (FUSE_OUTPUT off)
INTRA_TILES = {"BK": 16, "num_warps": 1, "num_stages": 3}  # the intra kernel's key block, warps, stages
# (a "maxnreg" entry, which a sweep may try, caps its registers per thread: more programs fit an SM, some spill)
# The intra kernel inverts each 16 x 16 diagonal block by substitution on sub-blocks of this many rows, all at
# once, then merges them by products (_invert_unit_lower4; 16: row by row). Of 2, 4, 8 and 16, 4 gave the fastest
# whole forward at both long shapes of the H200's record, with A the same up to rounding (Chapter 11 asserts it
# in "Shorter chains by blocks").
SUBSTITUTION_WIDTH = 4
_SUBSTITUTION_WIDTHS = (1, 2, 4, 8, 16)    # the widths that divide a 16-row block and double back to it
# With 16-bit inputs, store Aqk, AE, AZ, kg, Q_g, h and R in that type (half the traffic, 16-bit tensor-core
# products; the state and every accumulation stay float32). False keeps them in float32.
LOW_PRECISION_INTERMEDIATES = True
# The scan also writes the output, O = Q_g h + Aqk R per chunk, while h and R are in its registers: no output
# kernel, and a forward that no backward follows stores neither. False runs the output kernel after the scan.
FUSE_OUTPUT = True
# The stages of that scan: the most that fit a Hopper block at each value block the scan picks (five 16-bit
# tiles a stage: at BV = 64 three take 208 KiB of 227 by masked loads, more by descriptor, still within it;
# tools/hopper_compile_check.py --aligned prints each form's)
FUSED_SCAN_STAGES = 3
# The scan's five tiles a chunk through tensor descriptors (the Hopper's tensor memory accelerator, TMA) wherever
# they are valid (_scan_by_descriptor): the same values, one thread issuing each tile's copy; False: masked loads
# everywhere. Chapter 11's section "Routes for the forward, and one that pays" times both.
SCAN_BY_DESCRIPTOR = True
# The forward's three launches programmatic and dependent on compute capability 9 or more (_programmatic): each
# may start while the one before finishes, its programs waiting at their first statement until that grid is done
# and its writes visible, so the gap between launches leaves the GPU's path. The same values; False: plain launches.
PROGRAMMATIC_LAUNCH = True
# The input_precision of every product with float32 inputs (16-bit inputs take "tf32", their tensor-core
# products): "ieee" multiplies in float32 on the CUDA cores; "tf32x3" sums three TF32 tensor-core products of
# the operands' high and low parts, close to float32; "tf32" takes one, its operands rounded to a 10-bit
# mantissa. Module-level so that a benchmark run can try the others (python -m gdn2edu.bench --fp32-dot).
# "tf32x3": in the test matrix's float32 cases on an H200 its errors are of IEEE's order and pass, where tf32
# fails one, and it runs several times faster than "ieee", whose products the compiler keeps in local memory
# (Chapter 11 reads both records).
FLOAT32_DOTS = ("ieee", "tf32x3", "tf32")
FLOAT32_DOT = "tf32x3"


@contextlib.contextmanager
def kernel_settings(**overrides):
    """Inside the block the module-level settings named (LOW_PRECISION_INTERMEDIATES and FUSE_OUTPUT: bools,
    FLOAT32_DOT: one of FLOAT32_DOTS) take the given values for the calls made in it (a backward follows the
    plan its forward made); the previous ones are back after it, also after an error. The benchmark and the
    test matrix try the alternatives with it."""
    unknown = sorted(set(overrides) - {"LOW_PRECISION_INTERMEDIATES", "FUSE_OUTPUT", "FLOAT32_DOT"})
    if unknown:
        raise ValueError(f"kernel_settings takes LOW_PRECISION_INTERMEDIATES, FUSE_OUTPUT and FLOAT32_DOT, got "
                         f"{unknown}")
    for name in ("LOW_PRECISION_INTERMEDIATES", "FUSE_OUTPUT"):
        if not isinstance(overrides.get(name, True), bool):
            raise ValueError(f"{name} must be a bool, got {overrides[name]!r}")
    if overrides.get("FLOAT32_DOT", FLOAT32_DOTS[0]) not in FLOAT32_DOTS:
        raise ValueError(f"FLOAT32_DOT must be one of {FLOAT32_DOTS}, got {overrides['FLOAT32_DOT']!r}")
    previous = {name: globals()[name] for name in overrides}
    globals().update(overrides)
    try:
        yield
    finally:
        globals().update(previous)


@contextlib.contextmanager
def tile_table(table, setting):
    """Inside the block the tile table ``table`` (a *_TILES dict, of this module or of Chapter 10's) holds exactly
    the entries of ``setting``, entries it lacks removed; its own are back after it, also after an error. The
    tuning tools try their candidates with it."""
    if not isinstance(table, dict) or not isinstance(setting, dict):
        raise ValueError(f"table and setting must be dicts, got {type(table).__name__} and "
                         f"{type(setting).__name__}")
    previous = dict(table)
    table.clear()
    table.update(setting)
    try:
        yield table
    finally:
        table.clear()
        table.update(previous)


# Cached, as _one_wave_block below: a forward asks for these several times, and in recent Tritons next_power_of_2
# and cdiv are constexpr functions, each call of which costs the host microseconds
@functools.lru_cache(maxsize=None)
def _block_width(dim, widest=None):
    """A block width for a head dim: its next power of two, at least 16 (tl.dot's smallest), at most widest."""
    width = max(16, triton.next_power_of_2(dim))
    return width if widest is None else min(widest, width)


@functools.lru_cache(maxsize=None)
def _one_wave_block(N, H, V, multiprocessors):
    """The narrowest value block of 16, 32, 64 whose N * H * ceil(V / block) scan programs all run at once,
    one per multiprocessor; 64 when none does. A narrower block shortens each chunk's step, but programs
    beyond one per multiprocessor wait for a second wave."""
    return next((bv for bv in (16, 32) if N * H * triton.cdiv(V, bv) <= multiprocessors), 64)


def _scan_value_block(setting, N, H, V, device):
    """A scan's value block: the table's ``setting``, or for "auto" _one_wave_block on the device's
    multiprocessors (on the CPU: 64); at most V rounded up to a power of two."""
    if setting == "auto":
        sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
        setting = _one_wave_block(N, H, V, sms)
    return _block_width(V, setting)


class _Plan(NamedTuple):
    """What the launches of one call share: sizes, the program maps, the dot precision, the storage dtype."""

    B: int
    T: int
    H: int
    K: int
    V: int
    N: int
    scale: float
    cu: torch.Tensor
    chunks: torch.Tensor
    chunk_offsets: torch.Tensor
    DOT: str
    store: torch.dtype
    safe_gate: bool


# The midpoint anchor is used on a sub-chunk only while the largest factor it forms, 2^e, has e <= MID_LIMIT
# (base 2). At 60 a factor times a factor stays below 2^120, inside float32's 2^128 even for the entries that
# are masked out afterwards, and g >= -5 (8 tokens to the midpoint, 5 / ln 2 each: e <= 57.7) always passes.
MID_LIMIT = 60.0


def _operand_limit(store):
    """The limit for midpoint factors that multiply operands stored in ``store`` (the backward's products): a
    float16 operand overflows at 2^16, so 2^e times the largest |k|, |b k| or |scale q| must stay within 2^14;
    other types take MID_LIMIT."""
    return 14.0 if store == torch.float16 else MID_LIMIT


def _check_gate_options(safe_gate, lower_bound):
    """FLA's two keywords: safe_gate a bool; lower_bound None or, with safe_gate, in [-5, 0) as FLA enforces."""
    if not isinstance(safe_gate, bool):
        raise ValueError(f"safe_gate must be a bool, got {safe_gate!r}")
    if lower_bound is not None:
        if isinstance(lower_bound, bool) or not isinstance(lower_bound, (int, float)) or lower_bound != lower_bound:
            raise ValueError(f"lower_bound must be a number or None, got {lower_bound!r}")
        if safe_gate and not -5 <= lower_bound < 0:
            raise ValueError(f"lower_bound must lie in [-5, 0) with safe_gate=True, got {lower_bound!r}")


# float32 inputs run float32 tiles: the output kernel needs up to 160 KiB of shared memory per block at K = 256
# (tools/hopper_compile_check.py), which an H100/H200 (227 KiB) or an A100 (163 KiB) has and an L4 (99 KiB) lacks
FLOAT32_SHARED_MEMORY = 163840


def _shared_memory(device):
    """The shared memory (bytes) that a block may take on ``device`` if it is a GPU; None on the CPU."""
    if device.type != "cuda":
        return None
    return _device_shared_memory(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _device_shared_memory(index):
    """The driver's answer for GPU ``index``, asked once: asked on every call, it made a probe's forward on the
    H200 wait on the host (not recorded: the next probe, with this cache, did not)."""
    return triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"]


def _fused_scan_stages(shared_memory):
    """The pipeline stages of the scan that also writes the output, for blocks of ``shared_memory`` bytes (None:
    no GPU): FUSED_SCAN_STAGES, one fewer below FLOAT32_SHARED_MEMORY, where an L4's 99 KiB cannot hold three
    stages of its five 16-bit tiles (tools/hopper_compile_check.py)."""
    return FUSED_SCAN_STAGES - (shared_memory is not None and shared_memory < FLOAT32_SHARED_MEMORY)


@functools.lru_cache(maxsize=None)
def _device_capability(index):
    """(major, minor) compute capability of GPU ``index``, asked once, as _device_shared_memory."""
    return torch.cuda.get_device_capability(index)


def tensor_descriptors_at(major):
    """Whether kernels can load through tensor descriptors on a GPU of compute capability ``major`` (an int): 9 or
    more (Hopper's TMA), with a Triton that makes descriptors inside kernels. tools/hopper_compile_check.py asks
    it for the targets it compiles for."""
    if isinstance(major, bool) or not isinstance(major, int):
        raise ValueError(f"major must be an int (a compute capability's major number), got {major!r}")
    return major >= 9 and hasattr(tl, "make_tensor_descriptor")


def _major(device):
    """The major number of ``device``'s compute capability if it is a GPU, else None."""
    if device.type != "cuda":
        return None
    return _device_capability(device.index if device.index is not None else torch.cuda.current_device())[0]


def _has_descriptors(device):
    """Whether kernels on ``device`` can load through tensor descriptors: it is a GPU, and tensor_descriptors_at
    holds for its compute capability."""
    major = _major(device)
    return major is not None and tensor_descriptors_at(major)


def _programmatic(device):
    """The options of a forward launch on ``device``: the kernels' PDL switch and Triton's launch_pdl while
    PROGRAMMATIC_LAUNCH, on a GPU of compute capability 9 or more; none elsewhere (the interpreter, older GPUs)."""
    major = _major(device)
    return dict(PDL=True, launch_pdl=True) if PROGRAMMATIC_LAUNCH and major is not None and major >= 9 else {}


def _scan_by_descriptor(p, device):
    """Whether the scan on plan p takes its tiles through tensor descriptors: SCAN_BY_DESCRIPTOR, a device with
    them, and rows of p.store whose K and V columns are multiples of 16 bytes, as a descriptor's strides and
    each head's base must be (K = 60 or 100 in 16 bits are not: masked loads)."""
    width = p.store.itemsize
    return SCAN_BY_DESCRIPTOR and p.K * width % 16 == 0 and p.V * width % 16 == 0 and _has_descriptors(device)


def _with_descriptor_scratch(launch, device):
    """Call ``launch`` with Triton's allocator set to torch tensors on ``device``: a kernel that makes tensor
    descriptors needs global scratch memory for them. Set in a copy of the caller's context, so that the
    allocator a caller set (or none) is theirs again afterwards."""
    def scratch(size, alignment, stream):
        return torch.empty(size, dtype=torch.int8, device=device)

    def with_allocator():
        triton.set_allocator(scratch)
        launch()
    contextvars.copy_context().run(with_allocator)


def _check_shared_memory(q):
    """Refuse float32 inputs on a GPU whose blocks have less shared memory than their tiles need."""
    if q.is_cuda and q.dtype == torch.float32:
        have = _shared_memory(q.device)
        if have < FLOAT32_SHARED_MEMORY:
            raise ValueError(f"q is float32, whose tiles need {FLOAT32_SHARED_MEMORY} bytes of shared memory per "
                             f"block; {torch.cuda.get_device_name(q.device)} has {have}: pass bfloat16 or float16")


def _plan(q, k, v, g, b, w, scale, initial_state, cu_seqlens, safe_gate=False, lower_bound=None):
    """Check the inputs of chunk_gdn2 and build the launch plan (the backward of Chapter 10 shares it)."""
    dims = validate_inputs(q, k, v, g, b, w, scale, None if cu_seqlens is not None else initial_state)
    _check_gate_options(safe_gate, lower_bound)
    _check_kernel_dtypes(dict(q=q, k=k, v=v, g=g, b=b, w=w, initial_state=initial_state),
                         "recurrent_gdn2 and chunk_gdn2_torch")
    _check_shared_memory(q)
    B, T, H, K, V = dims.B, dims.T, dims.H, dims.K, dims.V
    if K > 256 or V > 256:
        raise ValueError(f"head dims must be at most 256 (one tile per head), got K = {K}, V = {V}")
    if q.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"q must be on a CUDA device, got {q.device}; "
                         "set TRITON_INTERPRET=1 before importing gdn2edu to run the kernels on the CPU")
    offsets = tuple(range(0, (B + 1) * T, T)) if cu_seqlens is None else _check_cu_seqlens(cu_seqlens, B, T)
    N = len(offsets) - 1
    if cu_seqlens is not None and initial_state is not None:
        _check_state("initial_state", initial_state, (N, H, K, V), q.device, "[N, H, K, V]")
    if FLOAT32_DOT not in FLOAT32_DOTS:
        raise ValueError(f"chunk_kernels.FLOAT32_DOT must be one of {FLOAT32_DOTS}, got {FLOAT32_DOT!r}")
    if SUBSTITUTION_WIDTH not in _SUBSTITUTION_WIDTHS:
        raise ValueError(f"chunk_kernels.SUBSTITUTION_WIDTH must be one of {_SUBSTITUTION_WIDTHS}, got "
                         f"{SUBSTITUTION_WIDTH!r}")
    DOT = FLOAT32_DOT if q.dtype == torch.float32 else "tf32"      # 16-bit inputs: tensor cores
    # the intermediates the later kernels read: in the inputs' 16-bit type when they have one
    store = q.dtype if q.dtype in (torch.bfloat16, torch.float16) and LOW_PRECISION_INTERMEDIATES else torch.float32
    return _Plan(B, T, H, K, V, N, dims.scale, *_schedule(offsets, 64, q.device), DOT, store, safe_gate)


def _launch_intra(q, k, g, b, A, Aqk, flags, p: _Plan, mode):
    """One launch of the intra kernel in ``mode`` (0 or 1, see its docstring) over every chunk and head, the
    heads of one chunk in neighbouring programs (see "Neighbouring programs" in Chapter 9)."""
    chunk_gdn2_fwd_intra_kernel[(p.chunks.shape[0] * p.H,)](
        q, k, g, b, A, Aqk, flags, p.cu, p.chunks, p.scale, H=p.H, K=p.K, BT=64, BC=16,
        BK=min(_block_width(p.K), INTRA_TILES["BK"]), SUB=SUBSTITUTION_WIDTH, MODE=mode, MID_LIMIT=MID_LIMIT,
        OPERAND_LIMIT=_operand_limit(p.store), DOT=p.DOT, num_warps=INTRA_TILES["num_warps"],
        num_stages=INTRA_TILES["num_stages"], maxnreg=INTRA_TILES.get("maxnreg"), **_programmatic(q.device))


def _intra_buffers(p: _Plan, device, with_flags=True):
    """What the intra launches write, uninitialised: A [B, T, H, 64] float32, Aqk [B, T, H, 64] in p.store (its
    readers round it to that type before their products: storing it so rounds it once, to the same values) and,
    ``with_flags``, the chunks' flags [chunks, H] int32 (else None). The tuning tools time single launches on
    them."""
    A = torch.empty(p.B, p.T, p.H, 64, dtype=torch.float32, device=device)
    Aqk = torch.empty(p.B, p.T, p.H, 64, dtype=p.store, device=device)
    return A, Aqk, torch.empty(p.chunks.shape[0], p.H, dtype=torch.int32, device=device) if with_flags else None


def _intra_states(q, k, g, b, p: _Plan):
    """The intra launch on contiguous inputs: mode 0 with safe_gate, else mode 1 (checked, flagged chunks
    redone). Returns the dict of its results, _intra_buffers' A, Aqk and flags (None with safe_gate)."""
    A, Aqk, flags = _intra_buffers(p, q.device, with_flags=not p.safe_gate)
    _launch_intra(q, k, g, b, A, Aqk, flags, p, 0 if p.safe_gate else 1)
    return dict(A=A, Aqk=Aqk, flags=flags)


def _wy_states(q, k, v, g, b, w, A, p: _Plan, store_G=False, store_AZ=True, tiles=None):
    """The WY launch on contiguous inputs and A [B, T, H, 64], with the tile table ``tiles`` (None: WY_TILES).
    Returns the dict of its results: AE, QG, KG [B, T, H, K] and AZ [B, T, H, V] (None unless store_AZ) in
    p.store; GN [chunks, H, K] float32; G, the base-2 G from each chunk's start [B, T, H, K] float32, if
    store_G (else None)."""
    out = _wy_buffers(p, q.device, store_G, store_AZ)
    _launch_wy(q, k, v, g, b, w, A, out, p, tiles)
    return out


def _wy_buffers(p: _Plan, device, store_G=False, store_AZ=True):
    """What the WY launch writes, uninitialised, as _wy_states returns it: AE, QG, KG [B, T, H, K] and AZ
    [B, T, H, V] (None unless store_AZ) in p.store; GN [chunks, H, K] float32; G [B, T, H, K] float32 if store_G."""
    like = dict(dtype=p.store, device=device)
    AE, KG, QG = (torch.empty(p.B, p.T, p.H, p.K, **like) for _ in range(3))
    return dict(AE=AE, AZ=torch.empty(p.B, p.T, p.H, p.V, **like) if store_AZ else None, KG=KG, QG=QG,
                GN=torch.empty(p.chunks.shape[0], p.H, p.K, dtype=torch.float32, device=device),
                G=torch.empty(p.B, p.T, p.H, p.K, dtype=torch.float32, device=device) if store_G else None)


def _launch_wy(q, k, v, g, b, w, A, out, p: _Plan, tiles=None):
    """One WY launch over the chunks of p's map into ``out`` (the dict of _wy_buffers: AZ and G are written where
    they are not None), with the tile table ``tiles`` (None: WY_TILES); a chunk's heads in neighbouring programs,
    as in _launch_intra."""
    tiles = WY_TILES if tiles is None else tiles
    programmatic = _programmatic(q.device)  # before the launch: an ablation rebinds q to a descriptor there
    chunk_gdn2_fwd_wy_kernel[(p.chunks.shape[0] * p.H,)](
        q, k, v, g, b, w, A, out["AE"], out["AZ"], out["KG"], out["QG"], out["GN"], out["G"], p.cu, p.chunks,
        p.scale, H=p.H, K=p.K, V=p.V, BT=64, BK=min(_block_width(p.K), tiles["BK"]),
        BV=_block_width(p.V, tiles["BV"]), STORE_G=out["G"] is not None, STORE_AZ=out["AZ"] is not None,
        DOT=p.DOT, num_warps=tiles["num_warps"], num_stages=tiles.get("num_stages", 2), **programmatic)


def _scan_states(f, initial_state, output_final_state, p: _Plan, o=None, store_states=True, value_block=None):
    """The scan launch on the WY results f (AE, AZ, KG, GN; with o also QG and Aqk). Returns the dict of its
    results: R [B, T, H, V] and h [chunks, H, K, V] in p.store (None unless store_states), ht [N, H, K, V]
    float32 or None, and o [B, T, H, V] as given: if it is not None, the scan writes the output into it.
    ``value_block``: the scan's value block, None for the one SCAN_TILES picks for p's N sequences."""
    H, K, V = p.H, p.K, p.V
    device = f["AE"].device
    BK = _block_width(K)
    BV = _scan_value_block(SCAN_TILES["BV"], p.N, H, V, device) if value_block is None else value_block
    R = torch.empty(p.B, p.T, H, V, dtype=p.store, device=device) if store_states else None
    h = torch.empty(p.chunks.shape[0], H, K, V, dtype=p.store, device=device) if store_states else None
    h0 = initial_state.to(torch.float32).contiguous() if initial_state is not None else None
    ht = torch.empty(p.N, H, K, V, dtype=torch.float32, device=device) if output_final_state else None
    QG, Aqk = (f["QG"], f["Aqk"]) if o is not None else (None, None)
    stages = SCAN_TILES["num_stages"] if o is None else _fused_scan_stages(_shared_memory(device))
    by_descriptor = _scan_by_descriptor(p, device)
    launch = functools.partial(
        chunk_gdn2_fwd_scan_kernel[(triton.cdiv(V, BV), p.N * H)],
        f["AE"], f["AZ"], f["KG"], f["GN"], h, R, h0, ht, QG, Aqk, o, p.cu, p.chunk_offsets, H=H, K=K, V=V,
        BT=64, BK=BK, BV=BV, USE_INITIAL_STATE=h0 is not None, STORE_FINAL_STATE=ht is not None,
        STORE_STATES=store_states, WRITE_OUTPUT=o is not None, DOT=p.DOT, BY_DESCRIPTOR=by_descriptor,
        num_warps=SCAN_TILES["num_warps"] if BK > 64 else 4,
        # one stage for float32 tiles or K = 256, whose stages fill shared memory (Triton 3.6 asked 288 KiB of an
        # H200's 227 for four)
        num_stages=stages if p.store != torch.float32 and K <= 128 else 1, **_programmatic(device))
    if by_descriptor:
        _with_descriptor_scratch(launch, device)
    else:
        launch()
    return dict(h=h, R=R, ht=ht, o=o)


def _forward_states(q, k, v, g, b, w, initial_state, output_final_state, p: _Plan, store_G=False, intra=None,
                    o=None, store_states=True):
    """The intra (unless their results are given as intra, the dict of _intra_states), WY and scan launches on
    contiguous inputs, o and store_states as _scan_states takes them. Returns one dict of the results of
    _intra_states, _wy_states and _scan_states."""
    f = _intra_states(q, k, g, b, p) if intra is None else intra
    f = dict(f, **_wy_states(q, k, v, g, b, w, f["A"], p, store_G))
    return dict(f, **_scan_states(f, initial_state, output_final_state, p, o, store_states))


def _output_value_block(K, V):
    """The output kernel's value block: OUTPUT_TILES["BV"], halved for every doubling of K past 128, so that its
    [K, BV] state tile and [64, K] query tile fit a Hopper block's shared memory at K = 256."""
    return _block_width(V, OUTPUT_TILES["BV"] * 128 // max(128, _block_width(K)))


def _forward_output(v, f, p: _Plan):
    """The output launch: O = Q_g h + Aqk R from the dict f of _forward_states; o [B, T, H, V] in v's dtype."""
    o = torch.empty_like(v)
    BK = _block_width(p.K)
    BVO = _output_value_block(p.K, p.V)
    chunk_gdn2_fwd_output_kernel[(p.chunks.shape[0], p.H, triton.cdiv(p.V, BVO))](
        f["QG"], f["h"], f["Aqk"], f["R"], o, p.cu, p.chunks, H=p.H, K=p.K, V=p.V, BT=64, BK=BK, BV=BVO,
        DOT=p.DOT, num_warps=OUTPUT_TILES["num_warps"], num_stages=2)
    return o


def _forward_with_output(q, k, v, g, b, w, initial_state, output_final_state, p: _Plan, store_G=False,
                         keep_states=True):
    """_forward_states and the output o [B, T, H, V] in v's dtype, in the dict's "o": formed by the scan while
    FUSE_OUTPUT (which then stores h and R only if keep_states), else by the output kernel after it."""
    if FUSE_OUTPUT:
        return _forward_states(q, k, v, g, b, w, initial_state, output_final_state, p, store_G,
                               o=torch.empty_like(v), store_states=keep_states)
    f = _forward_states(q, k, v, g, b, w, initial_state, output_final_state, p, store_G)
    return dict(f, o=_forward_output(v, f, p))


def chunk_gdn2_fwd(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
                   safe_gate=False, lower_bound=None):
    """Gated DeltaNet-2 forward by chunks of 64 tokens in Triton (FLA's ``chunk_gdn2`` semantics): the intra, WY
    and scan kernels, the scan writing the output (FUSE_OUTPUT), without autograd: ``chunk_gdn2`` of Chapter 10
    is the differentiable entry point.

    q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H, K] natural-log decay (any g <= 0); b: [B, T, H, K] erase
    gate; w: [B, T, H, V] write gate; float32, bfloat16 or float16. scale: None for K ** -0.5. Without
    cu_seqlens, initial_state is [B, H, K, V] or None. With cu_seqlens (int tensor [N + 1]: 0 = t_0 < t_1 < ...
    < t_N = T) B must be 1, the N sequences q[:, t_n:t_{n+1}] run independently and the states are [N, H, K, V].
    safe_gate=True always takes the midpoint anchor on the diagonal blocks, unchecked: it requires every g in
    [-5, 0] (lower_bound, if given, must lie in [-5, 0)). The default checks each chunk and redoes, token by
    token, the diagonal blocks of those whose midpoint factors would leave float32's range. On a GPU of compute
    capability 9 or more the scan reads its tiles through tensor descriptors where K and V allow it (the same
    values; SCAN_BY_DESCRIPTOR); it sets Triton's allocator for them only for its own launch.
    Accumulates in float32; returns (o [B, T, H, V] in v's dtype, final state float32 [B or N, H, K, V] or None).
    """
    p = _plan(q, k, v, g, b, w, scale, initial_state, cu_seqlens, safe_gate, lower_bound)
    q, k, v, g, b, w = (x.contiguous() for x in (q, k, v, g, b, w))
    with torch.no_grad(), _on_device(q):
        f = _forward_with_output(q, k, v, g, b, w, initial_state, output_final_state, p, keep_states=False)
        return f["o"], f["ht"]


def baseline_inputs(B, T, H=16, K=128, V=128, dtype=torch.bfloat16, seed=0, device="cuda"):
    """The inputs of the FLA H200 baseline: q, k [B, T, H, K] L2-normalised per head, v [B, T, H, V] standard
    normal (all in ``dtype``), g float32 logsigmoid(x) / 16, b [B, T, H, K] and w [B, T, H, V] uniform in
    [0.1, 0.9] in ``dtype``. Returns (q, k, v, g, b, w) on ``device``."""
    check_positive_ints(B=B, T=T, H=H, K=K, V=V)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=gen)

    q = torch.nn.functional.normalize(randn(B, T, H, K), dim=-1).to(dtype)
    k = torch.nn.functional.normalize(randn(B, T, H, K), dim=-1).to(dtype)
    v = randn(B, T, H, V).to(dtype)
    g = torch.nn.functional.logsigmoid(randn(B, T, H, K)) / 16
    b = (0.1 + 0.8 * torch.rand(B, T, H, K, device=device, generator=gen)).to(dtype)
    w = (0.1 + 0.8 * torch.rand(B, T, H, V, device=device, generator=gen)).to(dtype)
    return q, k, v, g, b, w
