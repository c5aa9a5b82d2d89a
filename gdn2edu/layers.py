# Generated from chapters/12_gdn2_layer.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""An FLA-compatible Gated DeltaNet-2 layer around the book's kernels, and its decoding cache."""

import math
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from gdn2edu.chunk import chunk_gdn2_torch
from gdn2edu.chunk_backward_kernels import chunk_gdn2
from gdn2edu.family import family_gates
from gdn2edu.fused_recurrent import _check_norm_eps, apply_kernel_options, fused_recurrent_gdn2, gate_activation
from gdn2edu.inputs import check_positive_ints, compute_dtype
from gdn2edu.recurrence import recurrent_gdn2
from gdn2edu.short_conv import _check_conv_inputs, short_conv_triton

LAYER_MEMBERS = ("gdn2", "kda", "gated_deltanet", "deltanet")
LAYER_MODES = ("chunk", "fused_recurrent")
LAYER_BACKENDS = ("auto", "torch", "triton")


class ShortConvolution(nn.Conv1d):
    """Causal depthwise convolution of width W over time, then SiLU. weight: [D, 1, W]; bias: [D] or None."""

    def __init__(self, hidden_size, kernel_size, bias=False):
        super().__init__(hidden_size, hidden_size, kernel_size, groups=hidden_size, bias=bias)

    def forward(self, x, state=None, use_triton=False, output_final_state=True):
        """x: [B, T, D]; state: [B, D, W - 1], the previous W - 1 inputs, or None (zeros); use_triton: the
        kernels above (the layer's choice, _uses_triton), else PyTorch's conv1d on [B, D, T].
        Returns (y [B, T, D], new state [B, D, W - 1]: the last W - 1 inputs, cached ones included; None
        unless output_final_state, which spares the Triton path the launches that build it)."""
        if use_triton:
            return short_conv_triton(x, self.weight, self.bias, state, output_final_state)
        _check_conv_inputs(x, self.weight, state)
        W = self.kernel_size[0]
        xt = x.transpose(1, 2)
        if state is None:
            state = xt.new_zeros(xt.shape[0], xt.shape[1], W - 1)
        full = torch.cat([state.to(xt.dtype), xt], dim=-1)
        y = F.conv1d(full, self.weight, self.bias, groups=self.groups)
        return F.silu(y).transpose(1, 2), full[..., full.shape[-1] - (W - 1):] if output_final_state else None


from gdn2edu.gated_norm import rms_norm_gated_triton


class RMSNormGated(nn.Module):
    """RMSNorm over the last dim times a sigmoid gate: weight * x / rms(x) * sigmoid(gate). weight: [D]."""

    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        _check_norm_eps(eps)
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x, gate, use_triton=False):
        """x, gate: [..., D]; use_triton: rms_norm_gated_triton (the layer's choice, _uses_triton), else PyTorch,
        computing in float32 (float64 for float64 x). Returns x's dtype."""
        if use_triton:
            return rms_norm_gated_triton(x, gate, self.weight, self.eps)
        dtype = compute_dtype(x)
        y = x.to(dtype) * torch.rsqrt(x.to(dtype).square().mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.to(dtype) * torch.sigmoid(gate.to(dtype))).to(x.dtype)


class GDN2Cache:
    """What decoding carries per layer: conv states (q, k, v), each [B, D, W - 1] (or None without short
    convolutions), and the recurrent state [B, num_v_heads, K, V]; B is the number of sequences."""

    def __init__(self):
        self.layers = {}
        self.seen_tokens = {}

    def get(self, layer_idx):
        """The layer's {"conv_state": (q, k, v), "recurrent_state": S}, or None before its first call."""
        return self.layers.get(layer_idx)

    def update(self, layer_idx, conv_state, recurrent_state, num_tokens):
        self.layers[layer_idx] = {"conv_state": conv_state, "recurrent_state": recurrent_state}
        self.seen_tokens[layer_idx] = self.seen_tokens.get(layer_idx, 0) + num_tokens

    def __len__(self):
        return len(self.layers)


class GatedDeltaNet2(nn.Module):
    """Gated DeltaNet-2 token mixing, with FLA's ``fla.layers.gdn2.GatedDeltaNet2`` arguments, parameter
    names and shapes: an FLA state_dict loads into it with strict=True.

    hidden_size d; head_dim K; num_heads H (query-key heads); num_v_heads H_v (a multiple of H, default H);
    expand_v: V = K * expand_v; mode "chunk" or "fused_recurrent" (inference on at most 64 tokens always
    takes the recurrent kernel, training always the chunked one); conv_size W; safe_gate with
    gate_lower_bound in [-5, 0): g = lower_bound * sigmoid(e^A (f + dt_bias)) instead of the softplus gate.
    Ours: member in LAYER_MEMBERS ("gdn2"; "kda", "gated_deltanet", "deltanet" tie b = w = beta per head,
    with beta = sigmoid of b_proj's per-head mean, and tie the decay as Chapter 1's family_gates does);
    backend "auto" (Triton kernels on CUDA, PyTorch ones elsewhere), "torch" or "triton".
    """

    def __init__(self, hidden_size=2048, expand_v=1.0, head_dim=128, num_heads=16, num_v_heads=None,
                 mode="chunk", use_short_conv=True, allow_neg_eigval=False, conv_size=4, conv_bias=False,
                 layer_idx=None, norm_eps=1e-5, safe_gate=False, gate_lower_bound=-5.0, member="gdn2",
                 backend="auto"):
        super().__init__()
        num_v_heads = num_heads if num_v_heads is None else num_v_heads
        check_positive_ints(hidden_size=hidden_size, head_dim=head_dim, num_heads=num_heads, conv_size=conv_size,
                            num_v_heads=num_v_heads)
        if num_v_heads % num_heads:
            raise ValueError(f"num_v_heads must be a multiple of num_heads = {num_heads}, got {num_v_heads}")
        head_v_dim = head_dim * expand_v
        if isinstance(expand_v, bool) or not isinstance(expand_v, (int, float)) or head_v_dim <= 0 \
                or not math.isclose(head_v_dim, round(head_v_dim), rel_tol=1e-5):
            raise ValueError(f"expand_v must make head_dim * expand_v a positive int, got expand_v={expand_v!r} "
                             f"with head_dim={head_dim}")
        for name, value, allowed in (("mode", mode, LAYER_MODES), ("member", member, LAYER_MEMBERS),
                                     ("backend", backend, LAYER_BACKENDS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if isinstance(gate_lower_bound, bool) or not isinstance(gate_lower_bound, (int, float)) \
                or not -5 <= gate_lower_bound < 0:
            raise ValueError(f"gate_lower_bound must lie in [-5, 0), got {gate_lower_bound!r}")
        if layer_idx is not None and (isinstance(layer_idx, bool) or not isinstance(layer_idx, int)):
            raise ValueError(f"layer_idx must be an int or None, got {layer_idx!r}")
        self.hidden_size, self.expand_v, self.mode = hidden_size, expand_v, mode
        self.use_short_conv, self.allow_neg_eigval, self.conv_size = use_short_conv, allow_neg_eigval, conv_size
        self.layer_idx, self.safe_gate, self.gate_lower_bound = layer_idx, safe_gate, float(gate_lower_bound)
        self.member, self.backend = member, backend
        self.num_heads, self.num_v_heads = num_heads, num_v_heads
        self.head_k_dim, self.head_v_dim = head_dim, int(round(head_v_dim))
        self.key_dim, self.value_dim = num_heads * head_dim, num_v_heads * self.head_v_dim

        self.q_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, self.value_dim, bias=False)
        if use_short_conv:
            self.q_conv1d = ShortConvolution(self.key_dim, conv_size, bias=conv_bias)
            self.k_conv1d = ShortConvolution(self.key_dim, conv_size, bias=conv_bias)
            self.v_conv1d = ShortConvolution(self.value_dim, conv_size, bias=conv_bias)
        self.f_proj = nn.Sequential(nn.Linear(hidden_size, self.head_v_dim, bias=False),
                                    nn.Linear(self.head_v_dim, self.key_dim, bias=False))
        self.b_proj = nn.Linear(hidden_size, self.key_dim, bias=False)
        self.w_proj = nn.Linear(hidden_size, self.value_dim, bias=False)
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(1, 16).log())
        dt = torch.exp(torch.empty(self.key_dim).uniform_(math.log(1e-3), math.log(1e-1))).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))       # softplus(dt_bias) = dt
        self.A_log._no_weight_decay = self.dt_bias._no_weight_decay = True
        self.g_proj = nn.Sequential(nn.Linear(hidden_size, self.head_v_dim, bias=False),
                                    nn.Linear(self.head_v_dim, self.value_dim, bias=True))
        self.o_norm = RMSNormGated(self.head_v_dim, eps=norm_eps)
        self.o_proj = nn.Linear(self.value_dim, hidden_size, bias=False)

    def state_size(self):
        """Numbers in the recurrent state of one sequence: num_v_heads * K * V."""
        return self.num_v_heads * self.head_k_dim * self.head_v_dim


def _gates(self, x, raw_decay=False):
    """x: [B, T, d]. Returns g, b [B, T, H, K] per query-key head (before grouping) and w [B, T, H_v, V] per
    value head. g is the log-decay, by Chapter 8's gate_activation (bounded
    with safe_gate); with raw_decay (member "gdn2") it is the logits f(x), for the kernel's use_gate_in_kernel."""
    H, K, V, Hv = self.num_heads, self.head_k_dim, self.head_v_dim, self.num_v_heads
    dtype = compute_dtype(x)
    f = self.f_proj(x).to(dtype).unflatten(-1, (H, K))
    g = f if raw_decay else gate_activation(f, self.A_log, self.dt_bias,
                                            self.gate_lower_bound if self.safe_gate else None)
    b_logit = self.b_proj(x).to(dtype).unflatten(-1, (H, K))
    if self.member == "gdn2":
        b = torch.sigmoid(b_logit) * (2.0 if self.allow_neg_eigval else 1.0)
        w = torch.sigmoid(self.w_proj(x).to(dtype)).unflatten(-1, (Hv, V))
        return g, b, w
    beta = torch.sigmoid(b_logit.mean(-1)) * (2.0 if self.allow_neg_eigval else 1.0)      # [B, T, H]
    log_decay = {"deltanet": None, "gated_deltanet": g.mean(-1), "kda": g}[self.member]
    g, b, w = family_gates(self.member, beta, K, V, log_decay)
    return g, b, w.repeat_interleave(Hv // H, dim=2)


GatedDeltaNet2._gates = _gates


def _uses_triton(self, device):
    return self.backend == "triton" or (self.backend == "auto" and device.type == "cuda")


def _kernel(self, mode, device, T):
    """The operator for this call: Triton's on CUDA (or when asked), else PyTorch's, whose chunks shrink to
    the next power of two >= T for short inputs (a chunk of 64 would be mostly padding). With safe_gate, every
    g lies in [gate_lower_bound, 0) and the Triton chunk kernel takes its unchecked midpoint path (Chapter 9).
    Each takes the keywords of _kernel_options."""
    triton = self._uses_triton(device)
    if mode == "chunk" and triton:
        return partial(chunk_gdn2, safe_gate=True, lower_bound=self.gate_lower_bound) if self.safe_gate \
            else chunk_gdn2
    if mode == "chunk":
        return partial(_options_first, partial(chunk_gdn2_torch, chunk_size=min(64, 1 << (T - 1).bit_length())))
    return fused_recurrent_gdn2 if triton else partial(_options_first, recurrent_gdn2)


def _options_first(kernel, q, k, v, g, b, w, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, A_log=None,
                   dt_bias=None, lower_bound=None, **kwargs):
    """A PyTorch operator, given the Triton entry points' kernel options: applied as they apply them."""
    return kernel(*apply_kernel_options(q, k, v, g, b, w, use_qk_l2norm_in_kernel, use_gate_in_kernel, A_log,
                                        dt_bias, lower_bound), **kwargs)


def _gate_in_kernel(self):
    """Whether the kernel computes the gate: with safe_gate, as in FLA's layer (member "gdn2", FLA's)."""
    return self.safe_gate and self.member == "gdn2"


def _kernel_options(self):
    """The keywords of every kernel call: FLA's layer's use_qk_l2norm_in_kernel=True, and with safe_gate its
    use_gate_in_kernel, with A_log [H_v] and dt_bias [H_v * K] repeated for grouped value heads."""
    options = dict(use_qk_l2norm_in_kernel=True)
    if self._gate_in_kernel():
        H, K, groups = self.num_heads, self.head_k_dim, self.num_v_heads // self.num_heads
        options.update(use_gate_in_kernel=True, lower_bound=self.gate_lower_bound,
                       A_log=self.A_log.repeat_interleave(groups),
                       dt_bias=self.dt_bias.view(H, K).repeat_interleave(groups, dim=0).flatten())
    return options


def _prepare(self, q, k, v, g, b, w, conv_state, keep_states=True):
    """Kernel inputs of a batch of sequences of equal length. q, k: [B, T, H*K]; v: [B, T, H_v*V] projected
    inputs; g, b: [B, T, H, K]; w: [B, T, H_v, V]; conv_state: (q, k, v) states or None.
    Returns ((q, k, v, g, b, w) with q, k, g, b: [B, T, H_v, K] and v, w: [B, T, H_v, V], new conv states,
    None unless keep_states); q and k are not yet of unit length: the kernel call's options normalise them (_kernel_options)."""
    if self.use_short_conv:
        cq, ck, cv = conv_state if conv_state is not None else (None, None, None)
        triton = self._uses_triton(q.device)
        q, cq = self.q_conv1d(q, cq, triton, keep_states)
        k, ck = self.k_conv1d(k, ck, triton, keep_states)
        v, cv = self.v_conv1d(v, cv, triton, keep_states)
        conv_state = (cq, ck, cv) if keep_states else None
    else:
        q, k, v = F.silu(q), F.silu(k), F.silu(v)
    H, K, V, groups = self.num_heads, self.head_k_dim, self.head_v_dim, self.num_v_heads // self.num_heads
    q, k = (x.unflatten(-1, (H, K)) for x in (q, k))
    v = v.unflatten(-1, (self.num_v_heads, V))
    if groups > 1:
        q, k, g, b = (x.repeat_interleave(groups, dim=2) for x in (q, k, g, b))
    return (q, k, v, g, b.to(v.dtype), w.to(v.dtype)), conv_state      # g stays float32: FLA's convention


def _mix(self, q, k, v, g, b, w, conv_state, recurrent_state, mode, keep_states=True):
    """_prepare, then one kernel call with recurrent_state [B, H_v, K, V] or None.
    Returns (o [B, T, H_v, V], new conv states, new recurrent state), the states None unless keep_states."""
    inputs, conv_state = self._prepare(q, k, v, g, b, w, conv_state, keep_states)
    o, state = self._kernel(mode, q.device, q.shape[1])(*inputs, initial_state=recurrent_state,
                                                        output_final_state=keep_states, **self._kernel_options())
    return o, conv_state, state


GatedDeltaNet2._uses_triton = _uses_triton
GatedDeltaNet2._kernel = _kernel
GatedDeltaNet2._gate_in_kernel = _gate_in_kernel
GatedDeltaNet2._kernel_options = _kernel_options
GatedDeltaNet2._prepare = _prepare
GatedDeltaNet2._mix = _mix


def _segments(attention_mask, cu_seqlens, B, T):
    """The token positions of each sequence: a list of (row, index tensor), or None for the plain batch."""
    if cu_seqlens is not None:
        if attention_mask is not None:
            raise ValueError("pass either cu_seqlens or attention_mask, not both")
        if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.is_floating_point() \
                or len(cu_seqlens) < 2:
            raise ValueError(f"cu_seqlens must be a 1-dim integer tensor [N + 1], got {cu_seqlens!r}")
        bounds = cu_seqlens.tolist()
        if B != 1 or bounds[0] != 0 or bounds[-1] != T or any(e < s for s, e in zip(bounds, bounds[1:])):
            raise ValueError(f"cu_seqlens must rise from 0 to T = {T} with hidden_states of batch 1, "
                             f"got {bounds} with batch {B}")
        return [(0, torch.arange(s, e)) for s, e in zip(bounds, bounds[1:])]
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2 \
            or attention_mask.shape[0] != B or attention_mask.shape[1] < T:
        shape = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else attention_mask
        raise ValueError(f"attention_mask must be a [B, T] 0/1 padding mask with B = {B}, T >= {T}, got {shape}")
    mask = attention_mask[:, -T:]
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (token)")
    return [(r, mask[r].nonzero().flatten().cpu()) for r in range(B)]


def _forward(self, hidden_states, attention_mask=None, past_key_values=None, use_cache=False, cu_seqlens=None):
    """hidden_states: [B, T, hidden_size]; attention_mask: [B, T'] (T' >= T, its last T columns are these
    tokens) or None; cu_seqlens: [N + 1] int offsets of N packed sequences (B = 1) or None;
    past_key_values: a GDN2Cache or None; use_cache: store this call's states in the cache (a new one if
    None). Returns (o [B, T, hidden_size], None, past_key_values), FLA's triple."""
    x = hidden_states
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.hidden_size \
            or not x.is_floating_point() or x.shape[1] == 0:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"hidden_states must be a float tensor [B, T, hidden_size = {self.hidden_size}] "
                         f"with T >= 1, got {shape}")
    if past_key_values is not None and not isinstance(past_key_values, GDN2Cache):
        raise ValueError(f"past_key_values must be a GDN2Cache or None, got {type(past_key_values).__name__}")
    if (use_cache or past_key_values is not None) and self.layer_idx is None:
        raise ValueError("layer_idx must be set (an int) for the layer to use a cache")
    B, T, _ = x.shape
    segments = _segments(attention_mask, cu_seqlens, B, T)
    mode = "fused_recurrent" if (T <= 64 and not self.training) else self.mode
    if self.training and mode != "chunk":
        raise ValueError(f"mode must be 'chunk' in training, got {self.mode!r}")
    last = past_key_values.get(self.layer_idx) if past_key_values is not None else None
    conv_state = last["conv_state"] if last is not None else None
    state = last["recurrent_state"] if last is not None else None
    n_seq = B if segments is None else len(segments)
    if state is not None and state.shape[0] != n_seq:
        raise ValueError(f"past_key_values holds states for {state.shape[0]} sequences, this call has {n_seq}")

    q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
    g, b, w = self._gates(x, raw_decay=self._gate_in_kernel())
    if segments is None:
        o, conv_state, state = self._mix(q, k, v, g, b, w, conv_state, state, mode, keep_states=bool(use_cache))
    elif mode == "chunk" and self._uses_triton(x.device):
        o, conv_state, state = self._packed_chunk(segments, (q, k, v, g, b, w), conv_state, state, x)
    else:
        o = v.new_zeros(B, T, self.num_v_heads, self.head_v_dim)
        conv_out, state_out = [], []
        for n, (row, idx) in enumerate(segments):
            cs = None if conv_state is None else tuple(c[n:n + 1] for c in conv_state)
            s = None if state is None else state[n:n + 1]
            if len(idx):
                o_n, cs, s = self._mix(*(t[row, idx][None] for t in (q, k, v, g, b, w)), cs, s, mode)
                o[row, idx] = o_n[0].to(o.dtype)
            conv_out.append(cs if cs is not None else self._empty_conv(x))
            state_out.append(s if s is not None else self._empty_state(x))
        conv_state = tuple(torch.cat(c) for c in zip(*conv_out)) if self.use_short_conv else None
        state = torch.cat(state_out)
    if use_cache:
        past_key_values = past_key_values if past_key_values is not None else GDN2Cache()
        past_key_values.update(self.layer_idx, conv_state if self.use_short_conv else None, state, T)
    gate = self.g_proj(x).unflatten(-1, (self.num_v_heads, self.head_v_dim))
    o = self.o_norm(o.to(x.dtype), gate, self._uses_triton(x.device)).flatten(-2)
    return self.o_proj(o), None, past_key_values


def _packed_chunk(self, segments, projected, conv_state, state, x):
    """Sequences of different lengths in one launch of the Triton chunk kernel, as FLA does: the short
    convolutions run per sequence, then the kernel inputs are packed along T and chunk_gdn2 takes cu_seqlens
    (sequences without tokens keep their states). Returns (o [B, T, H_v, V], conv states, recurrent states)."""
    B, T = x.shape[:2]
    parts, conv_out, live = [], [], []
    for n, (row, idx) in enumerate(segments):
        cs = None if conv_state is None else tuple(c[n:n + 1] for c in conv_state)
        if len(idx):
            inputs, cs = self._prepare(*(t[row, idx][None] for t in projected), cs)
            parts.append(inputs)
            live.append(n)
        conv_out.append(cs if cs is not None else self._empty_conv(x))
    o = x.new_zeros(B, T, self.num_v_heads, self.head_v_dim)
    new_state = torch.cat([self._empty_state(x)] * len(segments)) if state is None else state.clone()
    conv_state = tuple(torch.cat(c) for c in zip(*conv_out)) if self.use_short_conv else None
    if not live:                                              # only padding: nothing changes
        return o, conv_state, new_state
    offsets = [0]
    for n in live:
        offsets.append(offsets[-1] + len(segments[n][1]))
    packed = [torch.cat(p, dim=1) for p in zip(*parts)]
    h0 = None if state is None else state[live]
    o_packed, h_live = self._kernel("chunk", x.device, T)(
        *packed, initial_state=h0, output_final_state=True,
        cu_seqlens=torch.tensor(offsets, dtype=torch.int32, device=x.device), **self._kernel_options())
    for j, n in enumerate(live):
        row, idx = segments[n]
        o[row, idx] = o_packed[0, offsets[j]:offsets[j + 1]].to(o.dtype)
    new_state = new_state.to(h_live.dtype)
    new_state[live] = h_live
    return o, conv_state, new_state


def _empty_conv(self, x):
    """Zero conv states for one sequence that has no token yet."""
    W = self.conv_size - 1
    return tuple(x.new_zeros(1, D, W) for D in (self.key_dim, self.key_dim, self.value_dim))


def _empty_state(self, x):
    dtype = compute_dtype(x)
    return x.new_zeros(1, self.num_v_heads, self.head_k_dim, self.head_v_dim, dtype=dtype)


GatedDeltaNet2.forward = _forward
GatedDeltaNet2._packed_chunk = _packed_chunk
GatedDeltaNet2._empty_conv = _empty_conv
GatedDeltaNet2._empty_state = _empty_state
