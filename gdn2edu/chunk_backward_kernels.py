# Generated from chapters/10_triton_backward.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""The chunked GDN2 backward in Triton (ReWY): a reverse state scan, the local pullback, the inputs kernel."""

import torch

from gdn2edu.chunk_kernels import (_Plan, _block_width, _chunk_of_program,
                                   _forward_states, _forward_with_output, _load, _load_tile, _on_device, _plan,
                                   _scan_value_block, _tile, _wy_states, chunk_gdn2_fwd)
from gdn2edu.fused_recurrent import apply_kernel_options

import triton                        # after gdn2edu.chunk_kernels, which selects the interpreter without a GPU
import triton.language as tl


@triton.jit
def chunk_gdn2_bwd_scan_kernel(Aqk, QG, AE, KG, GN, do, dR, dh, dht, dh0, cu_seqlens, chunk_offsets,
                               H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                               BK: tl.constexpr, BV: tl.constexpr, USE_FINAL_GRAD: tl.constexpr,
                               STORE_INITIAL_GRAD: tl.constexpr, DOT: tl.constexpr):
    """One (sequence, head, value block), chunks in reverse: R_bar = Aqk^T O_bar + kg S_bar, then
    S_bar <- Q_g^T O_bar + Diag(gamma_n) S_bar - (AE)^T R_bar. Writes R_bar [T, H, V] and the adjoint of each
    chunk's leaving state dh [chunks, H, K, V] in the intermediates' type and, if asked, dh0 [N, H, K, V]
    float32. The products take their operands in the intermediates' type and accumulate in float32."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)      # 64-bit: i_nh * K * V may pass 2^31
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = tl.load(cu_seqlens + i_n).to(tl.int64), tl.load(cu_seqlens + i_n + 1)
    c0 = tl.load(chunk_offsets + i_n).to(tl.int64)
    T = eos - tl.load(cu_seqlens + i_n)                              # 32-bit, as in the forward's scan
    o_k = tl.arange(0, BK)
    b_S = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_FINAL_GRAD:
        b_S = _load(dht + i_nh * K * V, 0, i_v * BV, K, V, V, BK, BV)
    NT = tl.cdiv(T, BT)
    # the last chunk's first row as 64-bit offsets, moved back a chunk a step (32-bit within it, as the forward's)
    r_qk = (bos * H + i_h) * K + (NT - 1).to(tl.int64) * (BT * H * K)
    r_vw = (bos * H + i_h) * V + (NT - 1).to(tl.int64) * (BT * H * V)
    r_a = (bos * H + i_h) * BT + (NT - 1).to(tl.int64) * (BT * H * BT)
    for j in range(NT):
        i_t = NT - 1 - j
        n_t = T - i_t * BT
        p_x, m_x = _tile(dh + ((c0 + i_t) * H + i_h) * K * V, 0, i_v * BV, K, V, V, BK, BV)
        tl.store(p_x, b_S.to(p_x.dtype.element_ty), mask=m_x)
        b_kg = _load_tile(KG + r_qk, 0, 0, n_t, K, H * K, BT, BK)
        b_do = _load_tile(do + r_vw, 0, i_v * BV, n_t, V, H * V, BT, BV).to(b_kg.dtype)
        b_Aqk = _load_tile(Aqk + r_a, 0, 0, n_t, BT, H * BT, BT, BT)   # zero above the diagonal as stored
        b_dR = (tl.dot(tl.trans(b_Aqk), b_do, input_precision=DOT)
                + tl.dot(b_kg, b_S.to(b_kg.dtype), input_precision=DOT)).to(b_kg.dtype)
        p_x, m_x = _tile(dR + r_vw, 0, i_v * BV, n_t, V, H * V, BT, BV)
        tl.store(p_x, b_dR, mask=m_x)
        b_gn = tl.load(GN + ((c0 + i_t) * H + i_h) * K + o_k, mask=o_k < K, other=0.0)
        b_S = b_S * b_gn[:, None] \
            + tl.dot(tl.trans(_load_tile(QG + r_qk, 0, 0, n_t, K, H * K, BT, BK)), b_do, input_precision=DOT) \
            - tl.dot(tl.trans(_load_tile(AE + r_qk, 0, 0, n_t, K, H * K, BT, BK)), b_dR, input_precision=DOT)
        r_qk, r_vw, r_a = r_qk - BT * H * K, r_vw - BT * H * V, r_a - BT * H * BT
    if STORE_INITIAL_GRAD:
        p_x, m_x = _tile(dh0 + i_nh * K * V, 0, i_v * BV, K, V, V, BK, BV)
        tl.store(p_x, b_S, mask=m_x)


# Tiles of the backward kernels: value and key blocks, warps, pipeline stages; module-level tables
# so that a tuning run can try others. The scan's value block "auto" is chosen per call (_scan_value_block,
# Chapter 9's rule for both scans).
# With float32 intermediates, or K > 128, the scan's tiles leave room for one stage only, as in the forward's scan.
BWD_SCAN_TILES = {"BV": "auto", "num_warps": 4, "num_stages": 3}
BWD_LOCAL_TILES = {"BV": 128, "num_warps": 4, "num_stages": 1}
BWD_INPUTS_TILES = {"BK": 128, "BV": 64, "num_warps": 8, "num_stages": 2}
# the forward's WY kernel as the backward's recomputation launches it (writing G, not AZ): its own table,
# since it holds more tiles than the forward's launch and four warps beat the forward's two there
BWD_WY_TILES = {"BK": 64, "BV": 64, "num_warps": 4}
# the tables a backward tuning run sets (tools/gpu_tune_backward.py) and records, by name
BACKWARD_TILE_TABLES = {"BWD_SCAN_TILES": BWD_SCAN_TILES, "BWD_LOCAL_TILES": BWD_LOCAL_TILES,
                        "BWD_INPUTS_TILES": BWD_INPUTS_TILES, "BWD_WY_TILES": BWD_WY_TILES}


def _reverse_scan(f, do, dht, p: _Plan, want_dh0):
    """Launch the reverse scan on the recomputed intermediates f. Returns (R_bar [B, T, H, V] and the leaving
    states' adjoints dh [chunks, H, K, V] in p.store, dh0 [N, H, K, V] float32 or None)."""
    BK = _block_width(p.K)
    BV = _scan_value_block(BWD_SCAN_TILES["BV"], p.N, p.H, p.V, do.device)
    like = dict(dtype=p.store, device=do.device)
    dR = torch.empty(p.B, p.T, p.H, p.V, **like)
    dh = torch.empty(p.chunks.shape[0], p.H, p.K, p.V, **like)
    dh0 = torch.empty(p.N, p.H, p.K, p.V, dtype=torch.float32, device=do.device) if want_dh0 else None
    chunk_gdn2_bwd_scan_kernel[(triton.cdiv(p.V, BV), p.N * p.H)](
        f["Aqk"], f["QG"], f["AE"], f["KG"], f["GN"], do, dR, dh, dht, dh0, p.cu, p.chunk_offsets,
        H=p.H, K=p.K, V=p.V, BT=64, BK=BK, BV=BV, USE_FINAL_GRAD=dht is not None,
        STORE_INITIAL_GRAD=want_dh0, DOT=p.DOT, num_warps=BWD_SCAN_TILES["num_warps"],
        num_stages=BWD_SCAN_TILES["num_stages"] if p.store != torch.float32 and p.K <= 128 else 1)
    return dR, dh, dh0


@triton.jit
def chunk_gdn2_bwd_local_kernel(v, w, A, R, do, dR, P, dv, dw, dA, dAqk, cu_seqlens, chunk_indices,
                                H: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                                DOT: tl.constexpr):
    """One (chunk, head): P = A^T R_bar by value blocks (written in the intermediates' type), dv = P w and
    dw = P v (in v's and w's types), and the two [BT, BT] adjoints D = -L_<(P R^T) (of L = L_<(E Y^T)) and
    C = L_<=(O_bar R^T) (of Aqk), written in the intermediates' type as [T, H, BT] rows."""
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    bos, T, t0 = _chunk_of_program(i_t, cu_seqlens, chunk_indices, BT)
    o_t = tl.arange(0, BT)
    p_vw = (bos * H + i_h) * V
    b_A = tl.where(o_t[:, None] >= o_t[None, :], _load(A + (bos * H + i_h) * BT, t0, 0, T, BT, H * BT, BT, BT), 0.0)
    b_A = b_A.to(P.dtype.element_ty)
    b_D = tl.zeros([BT, BT], dtype=tl.float32)
    b_C = tl.zeros([BT, BT], dtype=tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        b_R = _load_tile(R + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
        b_P = tl.dot(tl.trans(b_A), _load_tile(dR + p_vw, t0, i_v * BV, T, V, H * V, BT, BV), input_precision=DOT)
        b_D += tl.dot(b_P.to(b_R.dtype), tl.trans(b_R), input_precision=DOT)
        b_C += tl.dot(_load_tile(do + p_vw, t0, i_v * BV, T, V, H * V, BT, BV).to(b_R.dtype), tl.trans(b_R),
                      input_precision=DOT)
        p_x, m_x = _tile(P + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
        tl.store(p_x, b_P.to(p_x.dtype.element_ty), mask=m_x)
        p_x, m_x = _tile(dv + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
        tl.store(p_x, (b_P * _load(w + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)).to(p_x.dtype.element_ty), mask=m_x)
        p_x, m_x = _tile(dw + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
        tl.store(p_x, (b_P * _load(v + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)).to(p_x.dtype.element_ty), mask=m_x)
    p_x, m_x = _tile(dA + (bos * H + i_h) * BT, t0, 0, T, BT, H * BT, BT, BT)
    tl.store(p_x, tl.where(o_t[:, None] > o_t[None, :], -b_D, 0.0).to(p_x.dtype.element_ty), mask=m_x)
    p_x, m_x = _tile(dAqk + (bos * H + i_h) * BT, t0, 0, T, BT, H * BT, BT, BT)
    tl.store(p_x, tl.where(o_t[:, None] >= o_t[None, :], b_C, 0.0).to(p_x.dtype.element_ty), mask=m_x)


def _local_pullback(v, w, f, do, dR, p: _Plan):
    """Launch the local kernel. Returns (dv, dw [B, T, H, V] in v's and w's types, D and H_q as [B, T, H, 64]
    rows and P [B, T, H, V], these three in p.store)."""
    BV = _block_width(p.V, BWD_LOCAL_TILES["BV"])
    dA = torch.empty(p.B, p.T, p.H, 64, dtype=p.store, device=v.device)
    dAqk = torch.empty_like(dA)
    dv, dw = torch.empty_like(v), torch.empty_like(w)
    P = torch.empty(p.B, p.T, p.H, p.V, dtype=p.store, device=v.device)
    chunk_gdn2_bwd_local_kernel[(p.chunks.shape[0], p.H)](
        v, w, f["A"], f["R"], do, dR, P, dv, dw, dA, dAqk, p.cu, p.chunks, H=p.H, V=p.V, BT=64, BV=BV, DOT=p.DOT,
        num_warps=BWD_LOCAL_TILES["num_warps"], num_stages=BWD_LOCAL_TILES["num_stages"])
    return dv, dw, dA, dAqk, P


@triton.jit
def _G_tile(Gc, o_r, col0, T, K: tl.constexpr, stride, BCOL: tl.constexpr):
    """Base-2 G at the rows o_r [BR] and the BCOL columns from col0, as a [BR, BCOL] tile. Rows past the
    sequence's end read row T - 1, which is where the forward's zero-padded g leaves G, so every factor is as
    bounded as on the real rows."""
    o_r = tl.minimum(o_r, T - 1)
    o_c = col0 + tl.arange(0, BCOL)
    return tl.load(Gc + o_r[:, None] * stride + o_c[None, :], mask=(o_c < K)[None, :], other=0.0)


@triton.jit
def _G_row(Gc, row, col0, T, K: tl.constexpr, stride, BCOL: tl.constexpr):
    """Row ``row`` of base-2 G (row T - 1 past the end) as a [BCOL] vector: an anchor, or G_n."""
    o_c = col0 + tl.arange(0, BCOL)
    return tl.load(Gc + tl.minimum(row, T - 1) * stride + o_c, mask=o_c < K, other=0.0)


@triton.jit
def _rows_at(base, o_r, col0, T, K: tl.constexpr, stride, BCOL: tl.constexpr):
    """The rows o_r [BR] (any rows of the sequence) of a row-major [T, K] view, BCOL columns from col0, as a
    float32 [BR, BCOL] tile; zero past the sequence's end."""
    o_c = col0 + tl.arange(0, BCOL)
    return tl.load(base + o_r[:, None] * stride + o_c[None, :], mask=(o_r < T)[:, None] & (o_c < K)[None, :],
                   other=0.0).to(tl.float32)


@triton.jit
def _subchunk_pullbacks(b_bk, b_qb, b_rk, q, k, b, Gc, dA, dAqk, b_G, b_aL, b_aR, lo, hi, p_qk, p_A, t0, T, c0, c,
                        scale, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
                        BK: tl.constexpr, CT: tl.constexpr, DOT: tl.constexpr):
    """Sub-chunk c's terms of both sides of eq-k10-anchored, added to the [BT, BK] accumulators: its columns of
    D and H_q against its keys for the rows from lo, on the anchor b_aL [BK], and its rows against the keys
    before hi, on the anchor b_aR [BK]. Returns the three accumulators."""
    o_t, o_c = tl.arange(0, BT), tl.arange(0, BC)
    r0 = t0 + c * BC
    b_Gs = _G_tile(Gc + p_qk, r0 + o_c, c0, T, K, H * K, BK)                    # G on the sub-chunk's rows
    b_ks = _load(k + p_qk, r0, c0, T, K, H * K, BC, BK)                          # the sub-chunk's keys
    b_Y = (b_ks * tl.exp2(b_aL[None, :] - b_Gs)).to(CT)
    b_rho = tl.exp2(tl.where(o_t[:, None] >= lo, b_G - b_aL[None, :], float("-inf")))
    b_bk += b_rho * tl.dot(_load_tile(dA + p_A, t0, c * BC, T, BT, H * BT, BT, BC), b_Y, input_precision=DOT)
    b_qb += b_rho * tl.dot(_load_tile(dAqk + p_A, t0, c * BC, T, BT, H * BT, BT, BC), b_Y, input_precision=DOT)
    b_up = tl.exp2(b_Gs - b_aR[None, :])
    b_E = (_load(b + p_qk, r0, c0, T, K, H * K, BC, BK) * b_ks * b_up).to(CT)
    b_Q = (_load(q + p_qk, r0, c0, T, K, H * K, BC, BK) * (scale * b_up)).to(CT)
    b_sig = tl.exp2(tl.where(o_t[:, None] < hi, b_aR[None, :] - b_G, float("-inf")))
    b_rk += b_sig * (tl.dot(tl.trans(_load_tile(dA + p_A, r0, 0, T, BT, H * BT, BC, BT)), b_E, input_precision=DOT)
                     + tl.dot(tl.trans(_load_tile(dAqk + p_A, r0, 0, T, BT, H * BT, BC, BT)), b_Q,
                              input_precision=DOT))
    return b_bk, b_qb, b_rk


@triton.jit
def chunk_gdn2_bwd_inputs_kernel(q, k, b, Gc, P, R, do, h, ht, dh, dA, dAqk, dq, dk, dg, db, flags,
                                 cu_seqlens, chunk_indices, scale, H: tl.constexpr, K: tl.constexpr,
                                 V: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
                                 BV: tl.constexpr, MODE: tl.constexpr, DOT: tl.constexpr):
    """One (chunk, head, key block), all BT rows at once: the direct terms -P S^T, O_bar S^T, R S_bar'^T and
    the endpoint by value blocks, then both sides of the pairwise pullbacks one sub-chunk at a time (its
    columns of D and H_q against its keys, its rows against every key), then the chain rule. MODE 0: every
    sub-chunk anchored at its midpoint (safe_gate); MODE 1: the same, for the chunks whose flag (from the
    forward's intra kernel) lacks bit 1; MODE 2: only the chunks with bit 1, each sub-chunk anchored at its last
    row (for the rows after it) and its first row (for the keys before it), where every factor is at most 1,
    and the 16 x 16 diagonal blocks token by token. Writes dq, dk, db and dg (the reverse cumulative sum over
    the chunk plus the endpoint), each in the type of its input."""
    i_t, i_h, i_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    if MODE != 0:
        if (tl.load(flags + i_t * H + i_h) // 2 == 1) != (MODE == 2):
            return
    bos, T, t0 = _chunk_of_program(i_t, cu_seqlens, chunk_indices, BT)
    i_n = tl.load(chunk_indices + 2 * i_t).to(tl.int64)
    o_t = tl.arange(0, BT)
    p_qk, p_vw, p_A = (bos * H + i_h) * K, (bos * H + i_h) * V, (bos * H + i_h) * BT
    p_h, c0 = (i_t.to(tl.int64) * H + i_h) * K * V, i_k * BK
    CT: tl.constexpr = P.dtype.element_ty                 # the products' operand type
    # S' (of the endpoint) is the next chunk's h, or the final state after a sequence's last chunk: the
    # other of the two loads below is masked off (zero rows)
    n_next = tl.where(t0 + BT < T, K, 0)
    b_Qb = tl.zeros([BT, BK], dtype=tl.float32)
    b_Pd = tl.zeros([BT, BK], dtype=tl.float32)
    b_Kb = tl.zeros([BT, BK], dtype=tl.float32)
    b_end = tl.zeros([BK], dtype=tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        b_h = _load_tile(h + p_h, c0, i_v * BV, K, V, V, BK, BV)
        b_dh = _load_tile(dh + p_h, c0, i_v * BV, K, V, V, BK, BV)
        b_Qb += tl.dot(_load_tile(do + p_vw, t0, i_v * BV, T, V, H * V, BT, BV).to(CT), tl.trans(b_h),
                       input_precision=DOT)
        b_Pd += tl.dot(_load_tile(P + p_vw, t0, i_v * BV, T, V, H * V, BT, BV), tl.trans(b_h), input_precision=DOT)
        b_Kb += tl.dot(_load_tile(R + p_vw, t0, i_v * BV, T, V, H * V, BT, BV), tl.trans(b_dh), input_precision=DOT)
        b_S1 = _load(h + p_h + H * K * V, c0, i_v * BV, n_next, V, V, BK, BV) \
            + _load(ht + (i_n * H + i_h) * K * V, c0, i_v * BV, K - n_next, V, V, BK, BV)
        b_end += tl.sum(b_S1 * b_dh.to(tl.float32), axis=1)
    b_G = _G_tile(Gc + p_qk, t0 + o_t, c0, T, K, H * K, BK)
    b_gam = tl.exp2(b_G)
    b_bk = -b_Pd * b_gam                                   # adjoint of b * k, direct part
    b_qb = b_Qb * b_gam                                    # adjoint of scale * q, direct part
    b_rk = b_Kb * tl.exp2(_G_row(Gc + p_qk, t0 + BT - 1, c0, T, K, H * K, BK)[None, :] - b_G)  # * gamma_n / gamma
    if MODE != 2:
        for c in range(0, BT // BC):
            b_m = _G_row(Gc + p_qk, t0 + c * BC + BC // 2, c0, T, K, H * K, BK)     # the anchor: its midpoint
            b_bk, b_qb, b_rk = _subchunk_pullbacks(b_bk, b_qb, b_rk, q, k, b, Gc, dA, dAqk, b_G, b_m, b_m,
                                                   c * BC, c * BC + BC, p_qk, p_A, t0, T, c0, c, scale,
                                                   H, K, BT, BC, BK, CT, DOT)
    else:
        for c in range(0, BT // BC):
            r0 = t0 + c * BC
            b_bk, b_qb, b_rk = _subchunk_pullbacks(b_bk, b_qb, b_rk, q, k, b, Gc, dA, dAqk, b_G,
                                                   _G_row(Gc + p_qk, r0 + BC - 1, c0, T, K, H * K, BK),
                                                   _G_row(Gc + p_qk, r0, c0, T, K, H * K, BK),
                                                   c * BC + BC, c * BC, p_qk, p_A, t0, T, c0, c, scale,
                                                   H, K, BT, BC, BK, CT, DOT)
        # the diagonal blocks token by token: step t pairs each row with token t of its own sub-chunk, so every
        # factor is 2^(G_i - G_j) with i >= j, at most 1
        o_sub = (o_t // BC) * BC                                                 # each row's sub-chunk
        for t in range(BC):
            o_j = o_sub + t
            b_Gj = _G_tile(Gc + p_qk, t0 + o_j, c0, T, K, H * K, BK)
            b_kj = _rows_at(k + p_qk, t0 + o_j, c0, T, K, H * K, BK)
            # b * k's and q's adjoints of row i against key o_j <= i
            b_f = tl.exp2(tl.where((o_j <= o_t)[:, None], b_G - b_Gj, float("-inf"))) * b_kj
            d_row = tl.load(dA + p_A + (t0 + o_t) * (H * BT) + o_j, mask=t0 + o_t < T, other=0.0).to(tl.float32)
            h_row = tl.load(dAqk + p_A + (t0 + o_t) * (H * BT) + o_j, mask=t0 + o_t < T, other=0.0).to(tl.float32)
            b_bk += d_row[:, None] * b_f
            b_qb += h_row[:, None] * b_f
            # k's adjoint of key j against row o_j >= j
            b_f = tl.exp2(tl.where((o_j >= o_t)[:, None], b_Gj - b_G, float("-inf")))
            d_col = tl.load(dA + p_A + (t0 + o_j) * (H * BT) + o_t, mask=t0 + o_j < T, other=0.0).to(tl.float32)
            h_col = tl.load(dAqk + p_A + (t0 + o_j) * (H * BT) + o_t, mask=t0 + o_j < T, other=0.0).to(tl.float32)
            b_rk += b_f * (d_col[:, None] * _rows_at(b + p_qk, t0 + o_j, c0, T, K, H * K, BK) * b_kj
                           + h_col[:, None] * scale * _rows_at(q + p_qk, t0 + o_j, c0, T, K, H * K, BK))
    b_k = _load(k + p_qk, t0, c0, T, K, H * K, BT, BK)
    b_b = _load(b + p_qk, t0, c0, T, K, H * K, BT, BK)
    b_Gbar = b_b * b_k * b_bk + _load(q + p_qk, t0, c0, T, K, H * K, BT, BK) * scale * b_qb - b_k * b_rk
    b_dg = tl.sum(b_Gbar, axis=0)[None, :] - tl.cumsum(b_Gbar, axis=0) + b_Gbar + b_end[None, :]
    p_x, m_x = _tile(dq + p_qk, t0, c0, T, K, H * K, BT, BK)
    tl.store(p_x, (scale * b_qb).to(p_x.dtype.element_ty), mask=m_x)
    p_x, m_x = _tile(db + p_qk, t0, c0, T, K, H * K, BT, BK)
    tl.store(p_x, (b_bk * b_k).to(p_x.dtype.element_ty), mask=m_x)
    p_x, m_x = _tile(dk + p_qk, t0, c0, T, K, H * K, BT, BK)
    tl.store(p_x, (b_bk * b_b + b_rk).to(p_x.dtype.element_ty), mask=m_x)
    p_x, m_x = _tile(dg + p_qk, t0, c0, T, K, H * K, BT, BK)
    tl.store(p_x, b_dg.to(p_x.dtype.element_ty), mask=m_x)


def _input_grads(q, k, g, b, f, do, P, dh, dA, dAqk, p: _Plan):
    """Launch the inputs kernel on f (with G and ht). Returns (dq, dk, dg, db), each [B, T, H, K] in the type
    of its input."""
    BKI = _block_width(p.K, BWD_INPUTS_TILES["BK"])
    BV = _block_width(p.V, BWD_INPUTS_TILES["BV"])
    dq, dk, dg, db = (torch.empty_like(x) for x in (q, k, g, b))
    for mode in (0,) if p.safe_gate else (1, 2):    # midpoint anchors, then the flagged chunks token by token
        chunk_gdn2_bwd_inputs_kernel[(p.chunks.shape[0], p.H, triton.cdiv(p.K, BKI))](
            q, k, b, f["G"], P, f["R"], do, f["h"], f["ht"], dh, dA, dAqk, dq, dk, dg, db, f["flags"], p.cu,
            p.chunks, p.scale, H=p.H, K=p.K, V=p.V, BT=64, BC=16, BK=BKI, BV=BV, MODE=mode, DOT=p.DOT,
            num_warps=BWD_INPUTS_TILES["num_warps"], num_stages=BWD_INPUTS_TILES["num_stages"])
    return dq, dk, dg, db


def _backward(q, k, v, g, b, w, initial_state, do, dht, p: _Plan, kept=None):
    """The whole backward on contiguous inputs: recompute the forward's intermediates, then the three launches.
    kept: what the forward saved, a dict with the names of KEPT (only the WY launch runs again, without AZ and
    on BWD_WY_TILES, whose sums may round in another order than the forward's launch did),
    of KEPT_LEAN (WY and scan run again), of SAVED (nothing is recomputed), or None (everything is). Returns
    (dq, dk, dv, dg, db, dw) in their inputs' types and dh0 float32 or None."""
    if kept is None or set(kept) == set(KEPT_LEAN):
        f = _forward_states(q, k, v, g, b, w, initial_state, True, p, store_G=True, intra=kept)
    elif set(kept) == set(SAVED):
        f = kept
    elif set(kept) == set(KEPT):
        f = dict(kept, **_wy_states(q, k, v, g, b, w, kept["A"], p, store_G=True, store_AZ=False,
                                    tiles=BWD_WY_TILES))
    else:
        raise ValueError(f"kept must hold the names of KEPT_LEAN {KEPT_LEAN}, KEPT {KEPT} or SAVED {SAVED}, got "
                         f"{tuple(kept)}")
    dR, dh, dh0 = _reverse_scan(f, do, dht, p, initial_state is not None)
    dv, dw, dA, dAqk, P = _local_pullback(v, w, f, do, dR, p)
    dq, dk, dg, db = _input_grads(q, k, g, b, f, do, P, dh, dA, dAqk, p)
    return dq, dk, dv, dg, db, dw, dh0


def chunk_gdn2_backward_triton(q, k, v, g, b, w, do, scale=None, initial_state=None, dht=None, cu_seqlens=None,
                               safe_gate=False, lower_bound=None):
    """Gradients of ``chunk_gdn2`` by the Triton ReWY backward, without autograd (Chapter 6's algorithm).

    q, k, g, b: [B, T, H, K]; v, w, do: [B, T, H, V] (do: the outputs' adjoint); initial_state, dht:
    [B or N, H, K, V] or None (zeros): the entering state and the final state's adjoint; cu_seqlens,
    safe_gate and lower_bound as in chunk_gdn2. Returns (dq, dk, dv, dg, db, dw) in their inputs' types and
    dh0 float32 (None when initial_state is None).
    """
    p = _plan(q, k, v, g, b, w, scale, initial_state, cu_seqlens, safe_gate, lower_bound)
    if not isinstance(do, torch.Tensor) or do.shape != v.shape:
        raise ValueError(f"do must have v's shape {tuple(v.shape)}, got {getattr(do, 'shape', do)}")
    state_shape = (p.N, p.H, p.K, p.V)
    if dht is not None and (not isinstance(dht, torch.Tensor) or dht.shape != state_shape):
        raise ValueError(f"dht must be None or of shape {state_shape}, got {getattr(dht, 'shape', dht)}")
    q, k, v, g, b, w, do = (x.contiguous() for x in (q, k, v, g, b, w, do))
    with _on_device(q):
        return _backward(q, k, v, g, b, w, initial_state, do, None if dht is None else dht.contiguous(), p)


KEPT_LEAN = ("A", "Aqk", "flags")                # with recompute_states=True: the intra kernel's results
KEPT = KEPT_LEAN + ("h", "R", "ht")              # what the forward keeps by default: the intra and scan results
SAVED = KEPT + ("AE", "KG", "QG", "GN", "G")     # all the backward reads of the forward


class ChunkGDN2TritonFunction(torch.autograd.Function):
    """The Triton forward of Chapter 9 with the Triton backward of this chapter.

    apply(q, k, v, g, b, w, initial_state, plan, kept_names) -> (o, final state float32), plan from
    chunk_kernels._plan, kept_names one of KEPT_LEAN, KEPT, SAVED: what the forward saves besides its
    inputs; the backward recomputes the other intermediates (the same kernels, the same types: the same
    gradients whichever is kept, up to the order in which the WY launches round, see _backward).
    """

    @staticmethod
    def forward(ctx, q, k, v, g, b, w, initial_state, plan, kept_names):
        q, k, v, g, b, w = (x.contiguous() for x in (q, k, v, g, b, w))
        with _on_device(q):
            # h and R are kept unless the backward runs the scan again (recompute_states)
            f = _forward_with_output(q, k, v, g, b, w, initial_state, True, plan, store_G=kept_names == SAVED,
                                     keep_states=kept_names != KEPT_LEAN)
            o = f["o"]
        ctx.kept_names = kept_names
        # ht is also returned: the backward keeps its own copy, so that the caller may change the returned one
        kept = (f[name].clone() if name == "ht" else f[name] for name in kept_names)
        ctx.save_for_backward(q, k, v, g, b, w, initial_state, *kept)
        ctx.plan = plan
        ctx.set_materialize_grads(False)
        return o, f["ht"]

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, g, b, w, initial_state, *kept = ctx.saved_tensors
        do = torch.zeros_like(v) if do is None else do.contiguous()
        with _on_device(q):
            grads = _backward(q, k, v, g, b, w, initial_state, do, None if dht is None else dht.contiguous(),
                              ctx.plan, dict(zip(ctx.kept_names, kept)))
        inputs = (q, k, v, g, b, w, initial_state)
        return (*(None if d is None else d.to(x.dtype) for d, x in zip(grads, inputs)), None, None)


def chunk_gdn2(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
               safe_gate=False, lower_bound=None, disable_recompute=False, *, use_qk_l2norm_in_kernel=False,
               use_gate_in_kernel=False, A_log=None, dt_bias=None, recompute_states=False):
    """Gated DeltaNet-2 by chunks of 64 tokens in Triton, differentiable: FLA's ``chunk_gdn2`` semantics.

    q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H, K] natural-log decay (any g <= 0); b: [B, T, H, K] erase
    gate; w: [B, T, H, V] write gate; float32, bfloat16 or float16. scale: None for K ** -0.5. Without
    cu_seqlens, initial_state is [B, H, K, V] or None; with cu_seqlens (int tensor [N + 1], B = 1) the N packed
    sequences run independently and the states are [N, H, K, V]. safe_gate=True takes the midpoint anchor on
    every sub-chunk unchecked and requires every g in [-5, 0] (lower_bound, if given, must lie in [-5, 0));
    the default checks each chunk and is finite for every g <= 0. The forward keeps A, Aqk and the scan's
    states h and corrections R for the backward, which recomputes the other intermediates; disable_recompute=True
    keeps them all instead, recompute_states=True (ours, not FLA's) keeps only A and Aqk and runs the scan
    again (more or less memory between the passes, the same gradients).
    FLA's options use_qk_l2norm_in_kernel and use_gate_in_kernel (g then holds raw logits; A_log [H], dt_bias
    [H * K], and lower_bound, if given, for the bounded gate; with safe_gate, lower_bound is required) are
    applied before the kernels by Chapter 8's apply_kernel_options (the L2 normalisation with its own kernels
    on a GPU, the gate in PyTorch), so autograd carries their
    gradients to q, k, g, A_log and dt_bias; a fused version is unmeasured.
    Returns (o [B, T, H, V] in v's dtype, final state float32 [B or N, H, K, V] or None). When an input
    requires grad, the forward of Chapter 9 and the backward of this chapter run as one autograd Function;
    otherwise this is ``chunk_gdn2_fwd``.
    """

    for name, flag in (("disable_recompute", disable_recompute), ("recompute_states", recompute_states)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be a bool, got {flag!r}")
    if disable_recompute and recompute_states:
        raise ValueError("disable_recompute=True keeps every intermediate and recompute_states=True drops the "
                         "states: choose one")
    if safe_gate is True and use_gate_in_kernel is True and lower_bound is None:
        raise ValueError("lower_bound must be given with safe_gate=True and use_gate_in_kernel=True: the softplus "
                         "gate is unbounded below, and safe_gate needs every g in [-5, 0]")
    q, k, v, g, b, w = apply_kernel_options(q, k, v, g, b, w, use_qk_l2norm_in_kernel, use_gate_in_kernel, A_log,
                                            dt_bias, lower_bound if use_gate_in_kernel is True else None)
    tensors = (q, k, v, g, b, w) + ((initial_state,) if initial_state is not None else ())
    if not (torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in tensors)):
        return chunk_gdn2_fwd(q, k, v, g, b, w, scale, initial_state, output_final_state, cu_seqlens,
                              safe_gate, lower_bound)
    p = _plan(q, k, v, g, b, w, scale, initial_state, cu_seqlens, safe_gate, lower_bound)
    kept_names = SAVED if disable_recompute else KEPT_LEAN if recompute_states else KEPT
    o, ht = ChunkGDN2TritonFunction.apply(q, k, v, g, b, w, initial_state, p, kept_names)
    return o, (ht if output_final_state else None)
