"""FLA's kernel options on the two Triton entry points (Chapter 8's apply_kernel_options), in the interpreter.

use_qk_l2norm_in_kernel and use_gate_in_kernel (with A_log, dt_bias, lower_bound) must give what normalising
q, k and gating g by hand, then calling the entry point with the options off, gives: the forward of both entry
points, and for chunk_gdn2 (fused_recurrent_gdn2 is forward only, as FLA's) the gradients that reach the raw
q, k, gate logits, A_log and dt_bias. Bad options raise ValueErrors that name the argument. The layer of
Chapter 12 hands FLA's options to its kernels, and its gate in the kernel equals its gate in the layer.

Tolerance. Both sides run the same kernels on inputs that differ only by float32 rounding of the normalisation
and the gate: the hand-made side divides by sqrt(sum x^2 + 1e-6) where the package multiplies by rsqrt, a
few units of 2^-24 apart. The transitions have eigenvalues in [-1, 1] (unit keys, b <= 2, g <= 0), so those
differences are not amplified: measured 1e-7 to 1e-6 relative. 1e-5 of the reference's largest entry leaves a
margin. An option that is ignored (queries of length 3 and keys of length 0.4 left as they are, raw logits
read as log-decays) moves the results by more than 10%, which every comparison also checks, so it can fail.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import make_inputs

from gdn2edu import chunk_gdn2, fused_recurrent_gdn2, gate_activation, l2_normalize
from gdn2edu.layers import GatedDeltaNet2

TOL = 1e-5
B, T, H, K, V = 1, 20, 2, 16, 32


def rel_max(got, want):
    """Largest entrywise difference relative to the reference's largest entry, in float64."""
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()


def unit(x):
    """FLA's use_qk_l2norm_in_kernel, written out: x / sqrt(sum x^2 + 1e-6)."""
    return x / (x.square().sum(-1, keepdim=True) + 1e-6).sqrt()


def gate_by_hand(f, A_log, dt_bias, lower_bound):
    """FLA's use_gate_in_kernel, written out: with x = f + dt_bias, -exp(A_log) softplus(x), or
    lower_bound * sigmoid(exp(A_log) x)."""
    x = f if dt_bias is None else f + dt_bias.view(H, K)
    rate = A_log.exp()[:, None]
    return -rate * F.softplus(x) if lower_bound is None else lower_bound * torch.sigmoid(rate * x)


def case(seed=0):
    """float32 inputs: q, k far from unit length, raw gate logits f of either sign, A_log [H], dt_bias [H * K],
    b up to 2, and the adjoints of o and of the final state."""
    q, k, v, _, b, w = (x.float() for x in make_inputs(B, T, H, K, V, seed=seed))
    gen = torch.Generator().manual_seed(seed + 1)
    f = torch.randn(B, T, H, K, generator=gen)
    A_log = torch.empty(H).uniform_(0.5, 2.0, generator=gen).log()
    dt_bias = 0.5 * torch.randn(H * K, generator=gen)
    do, dS = torch.randn(B, T, H, V, generator=gen), torch.randn(B, H, K, V, generator=gen)
    return dict(q=3 * q, k=0.4 * k, v=v, f=f, b=b, w=w, A_log=A_log, dt_bias=dt_bias, do=do, dS=dS)


OPTIONS = {                        # name: (use_qk_l2norm_in_kernel, use_gate_in_kernel, dt_bias given, lower_bound)
    "l2norm": (True, False, False, None),
    "gate": (False, True, True, None),
    "gate without dt_bias": (False, True, False, None),
    "both": (True, True, True, None),
    "both, bounded gate": (True, True, True, -3.0),
}


def by_hand_inputs(x, l2, gate, with_bias, lower_bound):
    """What the options compute, done here: (q, k, g) for a call with the options off."""
    q, k = (unit(x["q"]), unit(x["k"])) if l2 else (x["q"], x["k"])
    g = gate_by_hand(x["f"], x["A_log"], x["dt_bias"] if with_bias else None, lower_bound) if gate \
        else gate_by_hand(x["f"], x["A_log"], x["dt_bias"], None)          # a log-decay, given as it is
    return q, k, g


def option_call(entry, x, l2, gate, with_bias, lower_bound, **kwargs):
    """The entry point with the options on: raw q, k, and raw logits as g when the gate is on."""
    g = x["f"] if gate else by_hand_inputs(x, False, False, with_bias, None)[2]
    extra = dict(A_log=x["A_log"], dt_bias=x["dt_bias"] if with_bias else None, lower_bound=lower_bound) \
        if gate else {}
    return entry(x["q"], x["k"], x["v"], g, x["b"], x["w"], output_final_state=True,
                 use_qk_l2norm_in_kernel=l2, use_gate_in_kernel=gate, **extra, **kwargs)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_fused_recurrent_options_equal_the_work_by_hand(name):
    l2, gate, with_bias, lower_bound = OPTIONS[name]
    x = case(seed=1)
    o, S = option_call(fused_recurrent_gdn2, x, l2, gate, with_bias, lower_bound)
    q, k, g = by_hand_inputs(x, l2, gate, with_bias, lower_bound)
    o_ref, S_ref = fused_recurrent_gdn2(q, k, x["v"], g, x["b"], x["w"], output_final_state=True)
    assert rel_max(o, o_ref) < TOL and rel_max(S, S_ref) < TOL
    q_raw, k_raw = (x["q"], x["k"]) if l2 else (q, k)
    o_ignored, _ = fused_recurrent_gdn2(q_raw, k_raw, x["v"], x["f"] if gate else g, x["b"], x["w"])
    assert rel_max(o_ignored, o_ref) > 0.1                                # an ignored option would be seen
    assert not o.requires_grad                                            # forward only, as the docstring says


@pytest.mark.parametrize("name, safe_gate", [(n, False) for n in OPTIONS] + [("both, bounded gate", True)])
def test_chunk_options_equal_the_work_by_hand_with_gradients(name, safe_gate):
    l2, gate, with_bias, lower_bound = OPTIONS[name]
    x = case(seed=2)
    leaves = ("q", "k", "f", "A_log", "dt_bias")
    mine = {**x, **{n: x[n].clone().requires_grad_() for n in leaves}}
    hand = {**x, **{n: x[n].clone().requires_grad_() for n in leaves}}
    extra = dict(safe_gate=True) if safe_gate else {}
    o, S = option_call(chunk_gdn2, mine, l2, gate, with_bias, lower_bound, **extra)
    q, k, g = by_hand_inputs(hand, l2, gate, with_bias, lower_bound)
    o_ref, S_ref = chunk_gdn2(q, k, x["v"], g, x["b"], x["w"], output_final_state=True, **extra)
    assert rel_max(o, o_ref) < TOL and rel_max(S, S_ref) < TOL
    for side, (o_side, S_side) in ((mine, (o, S)), (hand, (o_ref, S_ref))):
        ((o_side * x["do"]).sum() + (S_side * x["dS"]).sum()).backward()
    used = [n for n in leaves if hand[n].grad is not None]
    assert {"q", "k", "f", "A_log"} <= set(used) and ("dt_bias" in used) == (with_bias or not gate)
    for n in used:
        assert mine[n].grad is not None and hand[n].grad.abs().max() > 0, n
        assert rel_max(mine[n].grad, hand[n].grad) < TOL, n
    q_raw, k_raw = (x["q"], x["k"]) if l2 else (q.detach(), k.detach())
    o_ignored, _ = chunk_gdn2(q_raw, k_raw, x["v"], x["f"] if gate else g.detach(), x["b"], x["w"], **extra)
    assert rel_max(o_ignored, o_ref.detach()) > 0.1                       # an ignored option would be seen


BAD = [  # (entry points, keywords, the word the message must name)
    ("both", dict(use_gate_in_kernel=True), "A_log"),
    ("both", dict(use_gate_in_kernel=True, A_log="A_log [H + 1]"), "A_log"),
    ("both", dict(use_gate_in_kernel=True, A_log="A_log [1, H]"), "A_log"),
    ("both", dict(use_gate_in_kernel=True, A_log="A_log int"), "A_log"),
    ("both", dict(use_gate_in_kernel=True, A_log="A_log", dt_bias="dt_bias [H]"), "dt_bias"),
    ("both", dict(A_log="A_log"), "A_log"),
    ("both", dict(dt_bias="dt_bias"), "dt_bias"),
    ("both", dict(use_qk_l2norm_in_kernel=1), "use_qk_l2norm_in_kernel"),
    ("both", dict(use_gate_in_kernel="yes", A_log="A_log"), "use_gate_in_kernel"),
    ("both", dict(use_gate_in_kernel=True, A_log="A_log", lower_bound=0.5), "lower_bound"),
    ("both", dict(use_gate_in_kernel=True, A_log="A_log", lower_bound=float("nan")), "lower_bound"),
    ("fused_recurrent", dict(lower_bound=-3.0), "lower_bound"),
    ("chunk", dict(use_gate_in_kernel=True, A_log="A_log", safe_gate=True), "lower_bound"),
]


@pytest.mark.parametrize("entries, kwargs, word", BAD)
def test_bad_options_raise_value_errors_naming_the_argument(entries, kwargs, word):
    x = case(seed=3)
    tensors = {"A_log": x["A_log"], "A_log [H + 1]": torch.zeros(H + 1), "A_log [1, H]": x["A_log"][None],
               "A_log int": torch.zeros(H, dtype=torch.int64), "dt_bias": x["dt_bias"], "dt_bias [H]": torch.zeros(H)}
    kwargs = {key: tensors[value] if isinstance(value, str) and value in tensors else value
              for key, value in kwargs.items()}
    calls = {"fused_recurrent": fused_recurrent_gdn2, "chunk": chunk_gdn2}
    for entry in calls.values() if entries == "both" else [calls[entries]]:
        with pytest.raises(ValueError, match=word):
            entry(x["q"], x["k"], x["v"], x["f"], x["b"], x["w"], **kwargs)


def spied_layer(safe_gate, backend):
    """A layer with grouped value heads, decays well below 1, and kernel calls that record their keywords in
    layer.calls."""
    torch.manual_seed(4)
    layer = GatedDeltaNet2(hidden_size=32, head_dim=16, num_heads=2, num_v_heads=4, safe_gate=safe_gate,
                           gate_lower_bound=-3.0, backend=backend)
    with torch.no_grad():          # a fresh layer's gate is exp(g) = 1 to float32: make every gate matter
        layer.A_log.uniform_(-1.0, 1.0)
        layer.dt_bias.normal_()
    layer.calls = []
    original = layer._kernel

    def kernel(mode, device, T):
        call = original(mode, device, T)
        return lambda *args, **kwargs: layer.calls.append(kwargs) or call(*args, **kwargs)

    layer._kernel = kernel
    return layer


@pytest.mark.parametrize("safe_gate", [False, True])
def test_layer_hands_its_kernels_flas_options(safe_gate):
    layer = spied_layer(safe_gate, "torch").double()
    layer(torch.randn(1, 9, 32, dtype=torch.float64))
    (options,) = layer.calls
    assert options["use_qk_l2norm_in_kernel"] is True
    assert options.get("use_gate_in_kernel", False) is safe_gate          # FLA's layer: the gate only with safe_gate
    if safe_gate:
        assert options["lower_bound"] == -3.0
        assert torch.equal(options["A_log"], layer.A_log[[0, 0, 1, 1]])      # each head's rate for its value heads
        assert torch.equal(options["dt_bias"].view(4, 16), layer.dt_bias.view(2, 16)[[0, 0, 1, 1]])


@pytest.mark.parametrize("backend, dtype, tol", [("torch", torch.float64, 1e-12), ("triton", torch.float32, TOL)])
def test_layer_gate_in_the_kernel_equals_the_gate_in_the_layer(backend, dtype, tol):
    """safe_gate with grouped value heads: raw logits with use_gate_in_kernel (A_log, dt_bias repeated per group)
    against the same layer computing the bounded gate itself; training (the chunk kernel) and inference on 9
    tokens (the recurrent kernel), forward and the gradients of A_log and dt_bias."""
    layer = spied_layer(True, backend).to(dtype)
    x = torch.randn(1, 9, 32, dtype=dtype)
    results = []
    for in_kernel in (True, False):
        layer._gate_in_kernel = lambda in_kernel=in_kernel: in_kernel
        layer.zero_grad()
        y = layer.train()(x)[0]
        y.square().sum().backward()
        with torch.no_grad():
            y_rec = layer.eval()(x)[0]
        results.append((y.detach(), y_rec, layer.A_log.grad.clone(), layer.dt_bias.grad.clone()))
    assert [c.get("use_gate_in_kernel", False) for c in layer.calls] == [True, True, False, False]
    for got, want in zip(*results):
        assert rel_max(got, want) < tol
    bound = layer.gate_lower_bound
    layer._gate_in_kernel = lambda: False
    layer.gate_lower_bound = bound / 2                          # a different gate must show
    assert rel_max(layer.train()(x)[0].detach(), results[1][0]) > 10 * tol


# gate_activation and l2_normalize are exported on their own (gdn2edu.gate_activation, gdn2edu.l2_normalize), so
# they check their arguments themselves; each bad call names the argument at fault.
G_BAD = [  # (argument named, call on a case's tensors x)
    ("g", lambda x: gate_activation(x["f"].long(), x["A_log"])),
    ("g", lambda x: gate_activation(x["f"].tolist(), x["A_log"])),
    ("g", lambda x: gate_activation(x["f"][0, 0, 0], x["A_log"])),                    # [K]: no head axis
    ("A_log", lambda x: gate_activation(x["f"], None)),
    ("A_log", lambda x: gate_activation(x["f"], x["A_log"][:1])),                     # [1], not [H]
    ("A_log", lambda x: gate_activation(x["f"], x["A_log"][None])),                   # [1, H]
    ("A_log", lambda x: gate_activation(x["f"], torch.zeros(H, dtype=torch.int64))),
    ("A_log", lambda x: gate_activation(x["f"], x["A_log"].to("meta"))),              # not on g's device
    ("dt_bias", lambda x: gate_activation(x["f"], x["A_log"], x["dt_bias"][:K])),      # [K], not [H * K]
    ("dt_bias", lambda x: gate_activation(x["f"], x["A_log"], x["dt_bias"].view(H, K))),
    ("dt_bias", lambda x: gate_activation(x["f"], x["A_log"], x["dt_bias"].long())),
    ("dt_bias", lambda x: gate_activation(x["f"], x["A_log"], x["dt_bias"].to("meta"))),
    ("lower_bound", lambda x: gate_activation(x["f"], x["A_log"], lower_bound=0.0)),
    ("lower_bound", lambda x: gate_activation(x["f"], x["A_log"], lower_bound=0.5)),
    ("lower_bound", lambda x: gate_activation(x["f"], x["A_log"], lower_bound=-float("inf"))),
    ("lower_bound", lambda x: gate_activation(x["f"], x["A_log"], lower_bound=float("nan"))),
    ("lower_bound", lambda x: gate_activation(x["f"], x["A_log"], lower_bound=True)),
    ("lower_bound", lambda x: gate_activation(x["f"], x["A_log"], lower_bound=torch.tensor(-3.0))),
    ("x", lambda x: l2_normalize(x["q"].long())),
    ("x", lambda x: l2_normalize(x["q"].numpy())),
    ("x", lambda x: l2_normalize(torch.tensor(2.0))),                                  # 0-dim: no last axis
    ("eps", lambda x: l2_normalize(x["q"], eps=-1e-6)),
    ("eps", lambda x: l2_normalize(x["q"], eps=float("inf"))),
    ("eps", lambda x: l2_normalize(x["q"], eps="1e-6")),
]


@pytest.mark.parametrize("word, call", G_BAD)
def test_gate_activation_and_l2_normalize_name_a_bad_argument(word, call):
    with pytest.raises(ValueError, match=f"^{word} "):
        call(case(seed=5))


@pytest.mark.parametrize("dtype, out", [(torch.bfloat16, torch.float32), (torch.float32, torch.float32),
                                        (torch.float64, torch.float64)])
@pytest.mark.parametrize("lower_bound, with_bias", [(None, True), (None, False), (-3.0, True), (-1, False)])
def test_gate_activation_alone_equals_the_gate_by_hand(dtype, out, lower_bound, with_bias):
    """Valid calls pass the checks and give FLA's gate in float32 (float64 for float64 logits); an int bound too."""
    x = case(seed=6)
    f, A_log, dt_bias = x["f"].to(dtype), x["A_log"].to(dtype), x["dt_bias"].to(dtype) if with_bias else None
    g = gate_activation(f, A_log, dt_bias, lower_bound)
    want = gate_by_hand(f.to(out), A_log.to(out), None if dt_bias is None else dt_bias.to(out), lower_bound)
    assert g.dtype == out and g.shape == f.shape
    assert rel_max(g, want) < (1e-12 if out == torch.float64 else 1e-6)    # the same formula, one rounding apart


def test_l2_normalize_alone_gives_unit_rows_in_the_input_dtype():
    """Row lengths |x| / sqrt(|x|^2 + 1e-6), just below 1, computed in float64: float32 and float64 results
    match them to a few units of their rounding (1e-6, 1e-12); a bfloat16 result is rounded once more (each
    entry off by at most 2^-8 of itself, so the length too; 2^-7 leaves room)."""
    x = case(seed=7)["q"]
    length = x.double().norm(dim=-1)
    want = length / (length.square() + 1e-6).sqrt()
    for dtype, tol in ((torch.float32, 1e-6), (torch.float64, 1e-12), (torch.bfloat16, 2.0 ** -7)):
        y = l2_normalize(x.to(dtype))
        assert y.dtype == dtype and y.shape == x.shape
        assert (y.double().norm(dim=-1) - want).abs().max() < tol


def test_gate_checks_read_no_values():
    """The checks look at shapes, dtypes and devices only: on the meta device, where a tensor has no values
    (reading one raises), both functions run and return the right shapes, so no check waits for a GPU."""
    x = {name: t.to("meta") for name, t in case(seed=8).items()}
    assert gate_activation(x["f"], x["A_log"], x["dt_bias"], -3.0).shape == x["f"].shape
    assert gate_activation(x["f"], x["A_log"]).shape == x["f"].shape
    assert l2_normalize(x["q"]).shape == x["q"].shape
    with pytest.raises(Exception):
        bool(x["f"].sum() > 0)                                     # a value read does fail on meta tensors
