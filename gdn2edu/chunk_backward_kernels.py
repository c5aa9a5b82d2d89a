# Generated from chapters/10_triton_backward.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""The chunked GDN2 backward in Triton (ReWY): a reverse state scan, the local pullback, the chain rule to the inputs."""

import torch

from gdn2edu.chunk_kernels import _Plan, _chunk_of_program, _forward_output, _forward_states, _load, _plan, _tile

import triton                        # after gdn2edu.chunk_kernels, which selects the interpreter without a GPU
import triton.language as tl


@triton.jit
def chunk_gdn2_bwd_scan_kernel(Aqk, QG, AE, KG, GN, do, dR, dh, dht, dh0, cu_seqlens, chunk_offsets,
                               H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                               BK: tl.constexpr, BV: tl.constexpr, USE_FINAL_GRAD: tl.constexpr,
                               STORE_INITIAL_GRAD: tl.constexpr, DOT: tl.constexpr):
    """One (sequence, head, value block), chunks in reverse: R_bar = Aqk^T O_bar + kg S_bar, then
    S_bar <- Q_g^T O_bar + Diag(gamma_n) S_bar - (AE)^T R_bar. Writes R_bar [T, H, V], the adjoint of each
    chunk's leaving state dh [chunks, H, K, V] and, if asked, dh0 [N, H, K, V]."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = tl.load(cu_seqlens + i_n), tl.load(cu_seqlens + i_n + 1)
    c0 = tl.load(chunk_offsets + i_n)
    T = eos - bos
    o_k, o_t = tl.arange(0, BK), tl.arange(0, BT)
    b_S = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_FINAL_GRAD:
        b_S = _load(dht + i_nh * K * V, 0, i_v * BV, K, V, V, BK, BV)
    p_qk, p_vw = (bos * H + i_h) * K, (bos * H + i_h) * V
    NT = tl.cdiv(T, BT)
    for j in range(NT):
        i_t = NT - 1 - j
        t0 = i_t * BT
        p_x, m_x = _tile(dh + ((c0 + i_t) * H + i_h) * K * V, 0, i_v * BV, K, V, V, BK, BV)
        tl.store(p_x, b_S, mask=m_x)
        b_Aqk = tl.where(o_t[:, None] >= o_t[None, :],
                         _load(Aqk + (bos * H + i_h) * BT, t0, 0, T, BT, H * BT, BT, BT), 0.0)
        b_do = _load(do + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
        b_dR = tl.dot(tl.trans(b_Aqk), b_do, input_precision=DOT) \
            + tl.dot(_load(KG + p_qk, t0, 0, T, K, H * K, BT, BK), b_S, input_precision=DOT)
        p_x, m_x = _tile(dR + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
        tl.store(p_x, b_dR, mask=m_x)
        b_gn = tl.load(GN + ((c0 + i_t) * H + i_h) * K + o_k, mask=o_k < K, other=0.0)
        b_S = b_S * b_gn[:, None] \
            + tl.dot(tl.trans(_load(QG + p_qk, t0, 0, T, K, H * K, BT, BK)), b_do, input_precision=DOT) \
            - tl.dot(tl.trans(_load(AE + p_qk, t0, 0, T, K, H * K, BT, BK)), b_dR, input_precision=DOT)
    if STORE_INITIAL_GRAD:
        p_x, m_x = _tile(dh0 + i_nh * K * V, 0, i_v * BV, K, V, V, BK, BV)
        tl.store(p_x, b_S, mask=m_x)


BWD_TILES = {"BV": 32, "BK": 32,    # value block of the three kernels, key block of the inputs kernel
             "num_stages": 1}     # float32 full-K tiles: more stages overflow the H200's shared memory


def _reverse_scan(f, do, dht, p: _Plan, want_dh0):
    """Launch the reverse scan on the recomputed intermediates f. Returns float32 (R_bar [B, T, H, V],
    the leaving states' adjoints dh [chunks, H, K, V], dh0 [N, H, K, V] or None)."""
    BK = max(16, triton.next_power_of_2(p.K))
    BV = min(BWD_TILES["BV"], max(16, triton.next_power_of_2(p.V)))
    f32 = dict(dtype=torch.float32, device=do.device)
    dR = torch.empty(p.B, p.T, p.H, p.V, **f32)
    dh = torch.empty(p.chunks.shape[0], p.H, p.K, p.V, **f32)
    dh0 = torch.empty(p.N, p.H, p.K, p.V, **f32) if want_dh0 else None
    chunk_gdn2_bwd_scan_kernel[(triton.cdiv(p.V, BV), p.N * p.H)](
        f["Aqk"], f["QG"], f["AE"], f["KG"], f["GN"], do, dR, dh, dht, dh0, p.cu, p.chunk_offsets,
        H=p.H, K=p.K, V=p.V, BT=64, BK=BK, BV=BV, USE_FINAL_GRAD=dht is not None,
        STORE_INITIAL_GRAD=want_dh0, DOT=p.DOT, num_stages=BWD_TILES["num_stages"])
    return dR, dh, dh0


@triton.jit
def chunk_gdn2_bwd_local_kernel(v, w, A, R, do, dR, dv, dw, dA, dAqk, cu_seqlens, chunk_indices,
                                H: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                                DOT: tl.constexpr):
    """One (chunk, head): P = A^T R_bar by value blocks, dv = P w and dw = P v, and the two [BT, BT]
    adjoints D = -L_<(P R^T) (of L = L_<(E Y^T)) and C = L_<=(O_bar R^T) (of Aqk), written as [T, H, BT] rows."""
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    bos, T, t0 = _chunk_of_program(i_t, cu_seqlens, chunk_indices, BT)
    o_t = tl.arange(0, BT)
    p_vw = (bos * H + i_h) * V
    b_A = tl.where(o_t[:, None] >= o_t[None, :], _load(A + (bos * H + i_h) * BT, t0, 0, T, BT, H * BT, BT, BT), 0.0)
    b_D = tl.zeros([BT, BT], dtype=tl.float32)
    b_C = tl.zeros([BT, BT], dtype=tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        b_P = tl.dot(tl.trans(b_A), _load(dR + p_vw, t0, i_v * BV, T, V, H * V, BT, BV), input_precision=DOT)
        b_R = _load(R + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
        b_D += tl.dot(b_P, tl.trans(b_R), input_precision=DOT)
        b_C += tl.dot(_load(do + p_vw, t0, i_v * BV, T, V, H * V, BT, BV), tl.trans(b_R), input_precision=DOT)
        p_x, m_x = _tile(dv + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
        tl.store(p_x, b_P * _load(w + p_vw, t0, i_v * BV, T, V, H * V, BT, BV), mask=m_x)
        p_x, m_x = _tile(dw + p_vw, t0, i_v * BV, T, V, H * V, BT, BV)
        tl.store(p_x, b_P * _load(v + p_vw, t0, i_v * BV, T, V, H * V, BT, BV), mask=m_x)
    p_x, m_x = _tile(dA + (bos * H + i_h) * BT, t0, 0, T, BT, H * BT, BT, BT)
    tl.store(p_x, tl.where(o_t[:, None] > o_t[None, :], -b_D, 0.0), mask=m_x)
    p_x, m_x = _tile(dAqk + (bos * H + i_h) * BT, t0, 0, T, BT, H * BT, BT, BT)
    tl.store(p_x, tl.where(o_t[:, None] >= o_t[None, :], b_C, 0.0), mask=m_x)


def _local_pullback(v, w, f, do, dR, p: _Plan):
    """Launch the local kernel. Returns float32 (dv, dw [B, T, H, V], D and H_q as [B, T, H, 64] rows)."""
    BV = min(BWD_TILES["BV"], max(16, triton.next_power_of_2(p.V)))
    f32 = dict(dtype=torch.float32, device=v.device)
    dA, dAqk = torch.empty(p.B, p.T, p.H, 64, **f32), torch.empty(p.B, p.T, p.H, 64, **f32)
    dv, dw = torch.empty(p.B, p.T, p.H, p.V, **f32), torch.empty(p.B, p.T, p.H, p.V, **f32)
    chunk_gdn2_bwd_local_kernel[(p.chunks.shape[0], p.H)](
        v, w, f["A"], f["R"], do, dR, dv, dw, dA, dAqk, p.cu, p.chunks, H=p.H, V=p.V, BT=64, BV=BV, DOT=p.DOT, num_stages=BWD_TILES["num_stages"])
    return dv, dw, dA, dAqk


@triton.jit
def _G_block(g, p_qk, T, t0, blk: tl.constexpr, i_k, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
             BC: tl.constexpr, BK: tl.constexpr):
    """Base-2 G of sub-chunk blk (rows t0 + blk*BC ...) from the chunk's start, and its anchor (G at the midpoint)."""
    prefix = tl.sum(_load(g + p_qk, t0, i_k * BK, tl.minimum(T, t0 + blk * BC), K, H * K, BT, BK), axis=0)
    b_G = tl.cumsum(_load(g + p_qk, t0 + blk * BC, i_k * BK, T, K, H * K, BC, BK), axis=0) + prefix[None, :]
    b_G = b_G * 1.4426950408889634
    o_c = tl.arange(0, BC)
    return b_G, tl.sum(tl.where(o_c[:, None] == BC // 2, b_G, 0.0), axis=0)


@triton.jit
def chunk_gdn2_bwd_inputs_kernel(q, k, g, b, A, R, do, dR, h, dh, dA, dAqk, dq, dk, dg, db,
                                 cu_seqlens, chunk_indices, scale, H: tl.constexpr, K: tl.constexpr,
                                 V: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
                                 BV: tl.constexpr, DOT: tl.constexpr):
    """One (chunk, head, key block), sub-chunk by sub-chunk from the last: the pairwise pullbacks of D and C
    (anchored like the forward), the direct terms E_dir = -P S^T, Q_g_bar = O_bar S^T, kg_bar = R S_bar_out^T,
    and the chain rule to dq, dk, db and dg (a reverse cumulative sum carried across sub-chunks)."""
    i_t, i_h, i_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    bos, T, t0 = _chunk_of_program(i_t, cu_seqlens, chunk_indices, BT)
    o_t, o_c = tl.arange(0, BT), tl.arange(0, BC)
    p_qk, p_vw, p_A = (bos * H + i_h) * K, (bos * H + i_h) * V, (bos * H + i_h) * BT
    p_h = (i_t * H + i_h) * K * V
    NB: tl.constexpr = BT // BC
    # the endpoint: G_n's adjoint is the row sum of S_out * S_bar_out, S_out = Diag(gamma_n) S + kg^T R
    b_G = tl.cumsum(_load(g + p_qk, t0, i_k * BK, T, K, H * K, BT, BK), axis=0) * 1.4426950408889634
    b_Gn = tl.sum(tl.where(o_t[:, None] == BT - 1, b_G, 0.0), axis=0)
    b_kg = _load(k + p_qk, t0, i_k * BK, T, K, H * K, BT, BK) * tl.exp2(b_Gn[None, :] - b_G)
    b_end = tl.zeros([BK], dtype=tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        b_S_out = tl.exp2(b_Gn)[:, None] * _load(h + p_h, i_k * BK, i_v * BV, K, V, V, BK, BV) \
            + tl.dot(tl.trans(b_kg), _load(R + p_vw, t0, i_v * BV, T, V, H * V, BT, BV), input_precision=DOT)
        b_end += tl.sum(b_S_out * _load(dh + p_h, i_k * BK, i_v * BV, K, V, V, BK, BV), axis=1)
    b_carry = tl.zeros([BK], dtype=tl.float32)          # sum of G_bar over the later sub-chunks
    for a in tl.static_range(NB - 1, -1, -1):          # sub-chunks from the last to the first
        r0 = t0 + a * BC
        b_Ga, b_ma = _G_block(g, p_qk, T, t0, a, i_k, H, K, BT, BC, BK)
        b_ra = tl.exp2(b_Ga - b_ma[None, :])
        b_qa = _load(q + p_qk, r0, i_k * BK, T, K, H * K, BC, BK) * scale
        b_ka = _load(k + p_qk, r0, i_k * BK, T, K, H * K, BC, BK)
        b_ba = _load(b + p_qk, r0, i_k * BK, T, K, H * K, BC, BK)
        # left adjoints: the rows of sub-chunk a against the keys of sub-chunks c <= a, anchored at a's midpoint
        b_lD = tl.zeros([BC, BK], dtype=tl.float32)
        b_lQ = tl.zeros([BC, BK], dtype=tl.float32)
        for c in tl.static_range(a + 1):
            b_Gc, b_mc = _G_block(g, p_qk, T, t0, c, i_k, H, K, BT, BC, BK)
            b_Yc = _load(k + p_qk, t0 + c * BC, i_k * BK, T, K, H * K, BC, BK) * tl.exp2(b_ma[None, :] - b_Gc)
            b_lD += tl.dot(_load(dA + p_A, r0, c * BC, T, BT, H * BT, BC, BC), b_Yc, input_precision=DOT)
            b_lQ += tl.dot(_load(dAqk + p_A, r0, c * BC, T, BT, H * BT, BC, BC), b_Yc, input_precision=DOT)
        b_lD, b_lQ = b_lD * b_ra, b_lQ * b_ra
        # right adjoints: the keys of sub-chunk a against the rows of sub-chunks d >= a, anchored at d's midpoint
        b_rk = tl.zeros([BC, BK], dtype=tl.float32)
        for d in tl.static_range(a, NB):
            b_Gd, b_md = _G_block(g, p_qk, T, t0, d, i_k, H, K, BT, BC, BK)
            b_rd = tl.exp2(b_Gd - b_md[None, :])
            b_kd = _load(k + p_qk, t0 + d * BC, i_k * BK, T, K, H * K, BC, BK)
            b_Ed = _load(b + p_qk, t0 + d * BC, i_k * BK, T, K, H * K, BC, BK) * b_kd * b_rd
            b_Qd = _load(q + p_qk, t0 + d * BC, i_k * BK, T, K, H * K, BC, BK) * (scale * b_rd)
            b_x = tl.dot(tl.trans(_load(dA + p_A, t0 + d * BC, a * BC, T, BT, H * BT, BC, BC)), b_Ed,
                         input_precision=DOT) \
                + tl.dot(tl.trans(_load(dAqk + p_A, t0 + d * BC, a * BC, T, BT, H * BT, BC, BC)), b_Qd,
                         input_precision=DOT)
            b_rk += tl.exp2(b_md[None, :] - b_Ga) * b_x
        # the direct terms, by value blocks: P_a = (A^T R_bar) rows of a, E_dir, Q_g_bar, kg_bar
        b_Ed = tl.zeros([BC, BK], dtype=tl.float32)
        b_Qb = tl.zeros([BC, BK], dtype=tl.float32)
        b_kb = tl.zeros([BC, BK], dtype=tl.float32)
        b_Acol = tl.where(o_t[:, None] >= (a * BC + o_c)[None, :],
                          _load(A + p_A, t0, a * BC, T, BT, H * BT, BT, BC), 0.0)
        for i_v in range(tl.cdiv(V, BV)):
            b_h = _load(h + p_h, i_k * BK, i_v * BV, K, V, V, BK, BV)
            b_P = tl.dot(tl.trans(b_Acol), _load(dR + p_vw, t0, i_v * BV, T, V, H * V, BT, BV), input_precision=DOT)
            b_Ed -= tl.dot(b_P, tl.trans(b_h), input_precision=DOT)
            b_Qb += tl.dot(_load(do + p_vw, r0, i_v * BV, T, V, H * V, BC, BV), tl.trans(b_h), input_precision=DOT)
            b_kb += tl.dot(_load(R + p_vw, r0, i_v * BV, T, V, H * V, BC, BV),
                           tl.trans(_load(dh + p_h, i_k * BK, i_v * BV, K, V, V, BK, BV)), input_precision=DOT)
        # the chain rule to the inputs of sub-chunk a
        b_gam = tl.exp2(b_Ga)
        b_kga = b_ka * tl.exp2(b_Gn[None, :] - b_Ga)
        b_bk = b_lD + b_Ed * b_gam                                   # adjoint of b * k
        b_Gbar = b_ba * b_ka * b_bk + b_qa * (b_lQ + b_Qb * b_gam) - b_ka * b_rk - b_kb * b_kga
        b_sum = tl.sum(b_Gbar, axis=0)
        b_dg = b_sum[None, :] - tl.cumsum(b_Gbar, axis=0) + b_Gbar + (b_carry + b_end)[None, :]
        b_carry += b_sum
        p_x, m_x = _tile(dg + p_qk, r0, i_k * BK, T, K, H * K, BC, BK)
        tl.store(p_x, b_dg, mask=m_x)
        p_x, m_x = _tile(dq + p_qk, r0, i_k * BK, T, K, H * K, BC, BK)
        tl.store(p_x, scale * (b_lQ + b_Qb * b_gam), mask=m_x)
        p_x, m_x = _tile(db + p_qk, r0, i_k * BK, T, K, H * K, BC, BK)
        tl.store(p_x, b_bk * b_ka, mask=m_x)
        p_x, m_x = _tile(dk + p_qk, r0, i_k * BK, T, K, H * K, BC, BK)
        tl.store(p_x, b_rk + b_kb * tl.exp2(b_Gn[None, :] - b_Ga) + b_bk * b_ba, mask=m_x)


def _input_grads(q, k, g, b, f, do, dR, dh, dA, dAqk, p: _Plan):
    """Launch the inputs kernel. Returns float32 (dq, dk, dg, db), each [B, T, H, K]."""
    BKI = min(BWD_TILES["BK"], max(16, triton.next_power_of_2(p.K)))
    BV = min(BWD_TILES["BV"], max(16, triton.next_power_of_2(p.V)))
    dq, dk, dg, db = (torch.empty(p.B, p.T, p.H, p.K, dtype=torch.float32, device=q.device) for _ in range(4))
    chunk_gdn2_bwd_inputs_kernel[(p.chunks.shape[0], p.H, triton.cdiv(p.K, BKI))](
        q, k, g, b, f["A"], f["R"], do, dR, f["h"], dh, dA, dAqk, dq, dk, dg, db, p.cu, p.chunks, p.scale,
        H=p.H, K=p.K, V=p.V, BT=64, BC=16, BK=BKI, BV=BV, DOT=p.DOT, num_stages=BWD_TILES["num_stages"])
    return dq, dk, dg, db


def _backward(q, k, v, g, b, w, initial_state, do, dht, p: _Plan, f=None):
    """The whole backward on contiguous inputs: recompute the forward's intermediates in float32 (unless
    given as f), then the three launches. Returns float32 (dq, dk, dv, dg, db, dw, dh0 or None)."""
    if f is None:
        f = _forward_states(q, k, v, g, b, w, initial_state, False, p._replace(store=torch.float32))
    dR, dh, dh0 = _reverse_scan(f, do, dht, p, initial_state is not None)
    dv, dw, dA, dAqk = _local_pullback(v, w, f, do, dR, p)
    dq, dk, dg, db = _input_grads(q, k, g, b, f, do, dR, dh, dA, dAqk, p)
    return dq, dk, dv, dg, db, dw, dh0


def chunk_gdn2_backward_triton(q, k, v, g, b, w, do, scale=None, initial_state=None, dht=None, cu_seqlens=None):
    """Gradients of ``chunk_gdn2`` by the Triton ReWY backward, without autograd (Chapter 6's algorithm).

    q, k, g, b: [B, T, H, K]; v, w, do: [B, T, H, V] (do: the outputs' adjoint); initial_state, dht:
    [B or N, H, K, V] or None (zeros): the entering state and the final state's adjoint; cu_seqlens as in
    chunk_gdn2. Returns float32 (dq, dk, dv, dg, db, dw, dh0); dh0 is None when initial_state is None.
    """
    p = _plan(q, k, v, g, b, w, scale, initial_state, cu_seqlens)
    if not isinstance(do, torch.Tensor) or do.shape != v.shape:
        raise ValueError(f"do must have v's shape {tuple(v.shape)}, got {getattr(do, 'shape', do)}")
    state_shape = (p.N, p.H, p.K, p.V)
    if dht is not None and (not isinstance(dht, torch.Tensor) or dht.shape != state_shape):
        raise ValueError(f"dht must be None or of shape {state_shape}, got {getattr(dht, 'shape', dht)}")
    q, k, v, g, b, w, do = (x.contiguous() for x in (q, k, v, g, b, w, do))
    return _backward(q, k, v, g, b, w, initial_state, do, None if dht is None else dht.contiguous(), p)


SAVED = ("A", "Aqk", "AE", "AZ", "KG", "QG", "GN", "h", "R")     # what the backward reads of the forward


class ChunkGDN2TritonFunction(torch.autograd.Function):
    """The Triton forward of Chapter 9 with the Triton backward of this chapter.

    apply(q, k, v, g, b, w, initial_state, plan, save_intermediates) -> (o, final state float32), plan from
    chunk_kernels._plan. By default the forward saves only its inputs and the backward recomputes the
    intermediates; save_intermediates=True keeps them (float32) from the forward instead.
    """

    @staticmethod
    def forward(ctx, q, k, v, g, b, w, initial_state, plan, save_intermediates):
        q, k, v, g, b, w = (x.contiguous() for x in (q, k, v, g, b, w))
        run = plan._replace(store=torch.float32) if save_intermediates else plan
        f = _forward_states(q, k, v, g, b, w, initial_state, True, run)
        kept = tuple(f[name] for name in SAVED) if save_intermediates else ()
        ctx.save_for_backward(q, k, v, g, b, w, initial_state, *kept)
        ctx.plan = plan
        ctx.set_materialize_grads(False)
        return _forward_output(v, f, run), f["ht"]

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, g, b, w, initial_state, *kept = ctx.saved_tensors
        do = torch.zeros_like(v) if do is None else do.contiguous()
        f = dict(zip(SAVED, kept)) if kept else None
        grads = _backward(q, k, v, g, b, w, initial_state, do, None if dht is None else dht.contiguous(),
                          ctx.plan, f)
        inputs = (q, k, v, g, b, w, initial_state)
        return (*(None if d is None else d.to(x.dtype) for d, x in zip(grads, inputs)), None, None)
