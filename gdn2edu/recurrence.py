# Generated from chapters/01_token_recurrence.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""The GDN2 token recurrence: the book's float64 oracle and its one-token decoding step."""

import torch

from gdn2edu.inputs import compute_dtype, one_token_as_sequence, validate_inputs


def gdn2_token_update(q, k, v, g, b, w, state):
    """One token of Gated Delta Rule-2 for every (batch, head), scale already in q.

    q, k, g, b: [B, H, K]; v, w: [B, H, V]; state: [B, H, K, V].
    Returns (o [B, H, V], new state [B, H, K, V]); the input state is not modified.
    """
    decayed = state * g.exp().unsqueeze(-1)                     # Diag(exp g) S: decay each key row
    read = torch.einsum("bhk,bhkv->bhv", b * k, decayed)        # (b * k)^T S: what the erase removes
    new_state = decayed + k.unsqueeze(-1) * (w * v - read).unsqueeze(-2)   # rank-one edit
    o = torch.einsum("bhk,bhkv->bhv", q, new_state)             # S_t^T q_t: read after the write
    return o, new_state


def recurrent_gdn2(q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False):
    """Gated DeltaNet-2 by its token recurrence (FLA's ``naive_recurrent_gdn2`` semantics).

    q, k: [B, T, H, K] queries and keys; v: [B, T, H, V] values;
    g: [B, T, H, K] natural-log decay; b: [B, T, H, K] erase gate; w: [B, T, H, V] write gate;
    scale: query scale, None for K ** -0.5; initial_state: [B, H, K, V] or None (zeros).
    Computes in float64 if any input is float64, else in float32.
    Returns (o [B, T, H, V] in v's dtype, final state [B, H, K, V] in the compute dtype or None).
    """
    dims = validate_inputs(q, k, v, g, b, w, scale, initial_state)
    dtype, out_dtype = compute_dtype(q, k, v, g, b, w, initial_state), v.dtype
    q, k, v, g, b, w = (x.to(dtype) for x in (q, k, v, g, b, w))
    q = q * dims.scale
    if initial_state is None:
        state = q.new_zeros(dims.B, dims.H, dims.K, dims.V)
    else:
        state = initial_state.to(dtype)
    outputs = []
    for t in range(dims.T):
        o_t, state = gdn2_token_update(q[:, t], k[:, t], v[:, t], g[:, t], b[:, t], w[:, t], state)
        outputs.append(o_t)
    o = torch.stack(outputs, dim=1).to(out_dtype)
    return o, (state if output_final_state else None)


def recurrent_gdn2_step(q, k, v, g, b, w, state=None, scale=None):
    """One decoding step against a cached state.

    q, k, g, b: [B, H, K]; v, w: [B, H, V]; state: [B, H, K, V] or None (zeros).
    Returns (o [B, H, V] in v's dtype, new state [B, H, K, V] in the compute dtype);
    ``state`` itself is left unchanged.
    """
    o, new_state = recurrent_gdn2(*one_token_as_sequence(q, k, v, g, b, w, state), scale=scale,
                                  initial_state=state, output_final_state=True)
    return o[:, 0], new_state
