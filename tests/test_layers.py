"""Chapter 12: the FLA-compatible GatedDeltaNet2 layer, its cache, the tiny LM, MQAR and the family."""

import argparse
import json
import math
import re

import pytest
import torch

from gdn2edu import chunk_gdn2, fused_recurrent_gdn2
from gdn2edu.layers import GDN2Cache, GatedDeltaNet2, ShortConvolution
from gdn2edu.lm import GDN2LM
from gdn2edu.mqar import IGNORE, lr_factor, mqar_batch, train_mqar

MEMBERS = ("gdn2", "kda", "gated_deltanet", "deltanet")


@pytest.fixture(autouse=True)
def one_thread():
    """These tensors are tiny; on a shared 2-core machine a second thread only adds contention."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def fla_parameter_shapes(hidden, head_dim, H, Hv, expand_v=1.0, W=4):
    """Names and shapes of fla.layers.gdn2.GatedDeltaNet2's parameters (fla-org/flash-linear-attention,
    fla/layers/gdn2.py at commit 0c4a361), with use_short_conv=True and conv_bias=False."""
    K, V = head_dim, int(head_dim * expand_v)
    return {
        "A_log": (H,), "dt_bias": (H * K,),
        "q_proj.weight": (H * K, hidden), "k_proj.weight": (H * K, hidden), "v_proj.weight": (Hv * V, hidden),
        "q_conv1d.weight": (H * K, 1, W), "k_conv1d.weight": (H * K, 1, W), "v_conv1d.weight": (Hv * V, 1, W),
        "f_proj.0.weight": (V, hidden), "f_proj.1.weight": (H * K, V),
        "b_proj.weight": (H * K, hidden), "w_proj.weight": (Hv * V, hidden),
        "g_proj.0.weight": (V, hidden), "g_proj.1.weight": (Hv * V, V), "g_proj.1.bias": (Hv * V,),
        "o_norm.weight": (V,), "o_proj.weight": (hidden, Hv * V),
    }


def small_layer(dtype=torch.float64, seed=0, **kwargs):
    torch.manual_seed(seed)
    args = dict(hidden_size=32, head_dim=8, num_heads=2, num_v_heads=4, layer_idx=0)
    return GatedDeltaNet2(**{**args, **kwargs}).to(dtype)


@pytest.mark.parametrize("expand_v, Hv", [(1.0, 4), (2.0, 2), (0.5, 6)])
def test_parameters_have_fla_names_and_shapes(expand_v, Hv):
    layer = GatedDeltaNet2(hidden_size=48, head_dim=8, num_heads=2, num_v_heads=Hv, expand_v=expand_v)
    shapes = {name: tuple(p.shape) for name, p in layer.state_dict().items()}
    assert shapes == fla_parameter_shapes(48, 8, 2, Hv, expand_v)


def test_initialisation_ranges():
    layer = GatedDeltaNet2(hidden_size=64, head_dim=16, num_heads=8)
    rate = layer.A_log.exp()
    assert (rate >= 1).all() and (rate <= 16).all()
    dt = torch.nn.functional.softplus(layer.dt_bias.double())
    assert (dt >= 1e-3 * (1 - 1e-5)).all() and (dt <= 1e-1 * (1 + 1e-5)).all()
    assert layer.A_log._no_weight_decay and layer.dt_bias._no_weight_decay
    assert torch.equal(layer.o_norm.weight, torch.ones(16))


def test_state_dict_loads_strictly_and_reproduces_the_output():
    source, target = small_layer(seed=0), small_layer(seed=1)
    x = torch.randn(2, 20, 32, dtype=torch.float64)
    assert not torch.allclose(source(x)[0], target(x)[0])
    target.load_state_dict(source.state_dict(), strict=True)
    assert torch.equal(source(x)[0], target(x)[0])


@pytest.mark.parametrize("kwargs, word", [
    (dict(num_v_heads=3), "num_v_heads"), (dict(expand_v=0.3), "expand_v"), (dict(mode="parallel"), "mode"),
    (dict(member="mamba"), "member"), (dict(backend="cuda"), "backend"), (dict(gate_lower_bound=-6.0),
                                                                          "gate_lower_bound"),
    (dict(gate_lower_bound=0.0), "gate_lower_bound"), (dict(head_dim=0), "head_dim"),
    (dict(layer_idx="0"), "layer_idx"), (dict(conv_size=True), "conv_size"),
])
def test_constructor_errors_name_the_argument(kwargs, word):
    with pytest.raises(ValueError, match=word):
        GatedDeltaNet2(**{**dict(hidden_size=32, head_dim=8, num_heads=2), **kwargs})


def test_forward_errors_name_the_argument():
    layer = small_layer()
    x = torch.randn(2, 10, 32, dtype=torch.float64)
    with pytest.raises(ValueError, match="hidden_states"):
        layer(torch.randn(2, 10, 31, dtype=torch.float64))
    with pytest.raises(ValueError, match="hidden_states"):
        layer(torch.randn(10, 32, dtype=torch.float64))
    with pytest.raises(ValueError, match="attention_mask"):
        layer(x, attention_mask=torch.ones(3, 10))
    with pytest.raises(ValueError, match="attention_mask"):
        layer(x, attention_mask=torch.full((2, 10), 2))
    with pytest.raises(ValueError, match="cu_seqlens"):
        layer(x[:1], cu_seqlens=torch.tensor([0, 4, 9]))                 # does not end at T
    with pytest.raises(ValueError, match="cu_seqlens"):
        layer(x, cu_seqlens=torch.tensor([0, 10]))                       # batch 2
    with pytest.raises(ValueError, match="cu_seqlens"):
        layer(x[:1], cu_seqlens=torch.tensor([0.0, 10.0]))
    with pytest.raises(ValueError, match="either cu_seqlens or attention_mask"):
        layer(x[:1], cu_seqlens=torch.tensor([0, 10]), attention_mask=torch.ones(1, 10))
    with pytest.raises(ValueError, match="past_key_values"):
        layer(x, past_key_values={})
    with pytest.raises(ValueError, match="layer_idx"):
        small_layer(layer_idx=None)(x, use_cache=True)
    with pytest.raises(ValueError, match="mode"):
        small_layer(mode="fused_recurrent").train()(x)
    cache = GDN2Cache()
    layer(x, past_key_values=cache, use_cache=True)
    with pytest.raises(ValueError, match="past_key_values holds states for 2"):
        layer(x[:1], past_key_values=cache)
    with pytest.raises(ValueError, match="state"):
        ShortConvolution(4, 3)(torch.randn(1, 5, 4), torch.zeros(1, 4, 3))


def decode_all(layer, x, T, mask=None):
    cache = GDN2Cache()
    outs = [layer(x[:, :T], attention_mask=None if mask is None else mask[:, :T], past_key_values=cache,
                  use_cache=True)[0]]
    for t in range(T, x.shape[1]):
        outs.append(layer(x[:, t:t + 1], attention_mask=None if mask is None else mask[:, :t + 1],
                          past_key_values=cache, use_cache=True)[0])
    return torch.cat(outs, 1), cache


@pytest.mark.parametrize("member", MEMBERS)
@pytest.mark.parametrize("T", [5, 70])       # prefill on the recurrent path (<= 64 tokens) and the chunked one
def test_prefill_then_decode_equals_full_forward_float64(member, T):
    layer = small_layer(member=member, allow_neg_eigval=member == "gdn2").eval()
    x = torch.randn(2, T + 6, 32, dtype=torch.float64)
    with torch.no_grad():
        full = layer(x)[0]
        decoded, cache = decode_all(layer, x, T)
    assert (decoded - full).abs().max() < 1e-12
    assert cache.seen_tokens[0] == T + 6 and len(cache) == 1
    cq, ck, cv = cache.get(0)["conv_state"]
    assert cq.shape == ck.shape == (2, 16, 3) and cv.shape == (2, 32, 3)
    assert torch.allclose(cv, layer.v_proj(x[:, -3:]).transpose(1, 2), atol=1e-14)   # the last W - 1 inputs


def test_prefill_then_decode_float32_and_without_conv():
    """float32 against the full forward: relative errors measured here 3e-7 to 5e-7 (float32 rounding over
    75 tokens, chunked prefill against token steps); the bound leaves a factor 20."""
    for kwargs in (dict(), dict(use_short_conv=False), dict(safe_gate=True, gate_lower_bound=-3.0)):
        layer = small_layer(dtype=torch.float32, **kwargs).eval()
        x = torch.randn(2, 75, 32)
        with torch.no_grad():
            full = layer(x)[0]
            decoded, cache = decode_all(layer, x, 66)
        assert (decoded - full).abs().max() < 1e-5 * full.abs().max()
        assert (cache.get(0)["conv_state"] is None) == (not layer.use_short_conv)


def test_packed_and_padded_sequences_equal_each_sequence_alone():
    layer = small_layer().eval()
    seqs = [torch.randn(1, n, 32, dtype=torch.float64) for n in (7, 1, 30)]
    with torch.no_grad():
        alone = [layer(s)[0] for s in seqs]
        packed = layer(torch.cat(seqs, 1), cu_seqlens=torch.tensor([0, 7, 8, 38]))[0]
        x = torch.zeros(3, 30, 32, dtype=torch.float64)
        mask = torch.zeros(3, 30, dtype=torch.bool)
        for r, s in enumerate(seqs):                       # left padding, as in batched generation
            x[r, 30 - s.shape[1]:], mask[r, 30 - s.shape[1]:] = s[0], True
        padded = layer(x, attention_mask=mask)[0]
    assert torch.allclose(packed, torch.cat(alone, 1), atol=1e-12)
    for r, s in enumerate(seqs):
        assert torch.allclose(padded[r, 30 - s.shape[1]:], alone[r][0], atol=1e-12)
        assert (padded[r, :30 - s.shape[1]] == 0).all()


def test_padded_prefill_then_decode_keeps_each_row_state():
    """Right-padded prompts, then one new token per row: each row continues its own sequence."""
    layer = small_layer().eval()
    a, b = torch.randn(1, 9, 32, dtype=torch.float64), torch.randn(1, 4, 32, dtype=torch.float64)
    nxt = torch.randn(2, 1, 32, dtype=torch.float64)
    x = torch.zeros(2, 9, 32, dtype=torch.float64)
    x[0], x[1, :4] = a[0], b[0]
    mask = torch.tensor([[1] * 9, [1] * 4 + [0] * 5])
    with torch.no_grad():
        cache = GDN2Cache()
        layer(x, attention_mask=mask, past_key_values=cache, use_cache=True)
        step = layer(nxt, attention_mask=torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], 1),
                     past_key_values=cache, use_cache=True)[0]
        want_a = layer(torch.cat([a, nxt[:1]], 1))[0][:, -1]
        want_b = layer(torch.cat([b, nxt[1:]], 1))[0][:, -1]
    assert torch.allclose(step[0, 0], want_a[0], atol=1e-12) and torch.allclose(step[1, 0], want_b[0], atol=1e-12)


@pytest.mark.parametrize("member", MEMBERS)
def test_gradients_reach_every_parameter_the_member_uses(member):
    layer = small_layer(dtype=torch.float32, member=member).train()
    x = torch.randn(2, 20, 32, requires_grad=True)
    out = layer(x)[0]
    out.square().mean().backward()
    unused = {"gdn2": set(), "kda": {"w_proj.weight"}, "gated_deltanet": {"w_proj.weight"},
              "deltanet": {"w_proj.weight", "f_proj.0.weight", "f_proj.1.weight", "A_log", "dt_bias"}}[member]
    for name, p in layer.named_parameters():
        if name in unused:
            assert p.grad is None or (p.grad == 0).all(), name
        else:
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_gate_ranges_and_family_choices():
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    g, b, w = small_layer()._gates(x)
    assert (g < 0).all() and (b > 0).all() and (b < 1).all() and (w > 0).all() and (w < 1).all()
    assert g.shape == b.shape == (2, 6, 2, 8) and w.shape == (2, 6, 4, 8)
    _, b2, _ = small_layer(allow_neg_eigval=True)._gates(x)
    assert torch.allclose(b2, 2 * b)
    g_safe, _, _ = small_layer(safe_gate=True, gate_lower_bound=-2.0)._gates(x)
    assert (g_safe >= -2.0).all() and (g_safe < 0).all()
    gates = {m: small_layer(member=m)._gates(x) for m in MEMBERS}        # same seed: same parameters
    g_d, b_d, w_d = gates["deltanet"]
    assert (g_d == 0).all() and torch.equal(b_d[..., 0], w_d[:, :, ::2, 0])     # w per value head: 2 per head
    assert torch.allclose(gates["gated_deltanet"][0], g.mean(-1, keepdim=True).expand_as(g))
    assert torch.equal(gates["kda"][0], g)
    for m in MEMBERS[1:]:
        _, b_m, w_m = gates[m]
        assert (b_m == b_m[..., :1]).all() and (w_m == w_m[..., :1]).all()
        assert torch.equal(w_m[:, :, ::2, 0], b_m[..., 0]) and torch.equal(w_m[:, :, 1::2, 0], b_m[..., 0])
    sizes = {m: small_layer(member=m).state_size() for m in MEMBERS}
    assert set(sizes.values()) == {4 * 8 * 8}


@pytest.mark.parametrize("safe_gate", [False, True])
def test_triton_backend_in_the_interpreter_matches_torch(safe_gate):
    """The Triton kernels (interpreter on CPU) against the PyTorch ones through the whole layer, float32:
    within the book's float32 kernel tolerances (relative 1e-4 of the output's size)."""
    torch.manual_seed(0)
    args = dict(hidden_size=32, head_dim=16, num_heads=2, num_v_heads=2, layer_idx=0, safe_gate=safe_gate)
    ours = GatedDeltaNet2(**args, backend="torch").eval()
    tri = GatedDeltaNet2(**args, backend="triton").eval()
    tri.load_state_dict(ours.state_dict(), strict=True)
    x = torch.randn(1, 20, 32)
    chunk_kernel = tri._kernel("chunk", x.device, 20)
    assert getattr(chunk_kernel, "func", chunk_kernel) is chunk_gdn2
    assert getattr(chunk_kernel, "keywords", {}).get("safe_gate", False) == safe_gate
    assert tri._kernel("fused_recurrent", x.device, 20) is fused_recurrent_gdn2
    with torch.no_grad():
        want = ours.train()(x)[0]
        got = tri.train()(x)[0]                      # training: the chunked kernel
        want_rec = ours.eval()(x)[0]
        got_rec = tri.eval()(x)[0]                   # inference on <= 64 tokens: the recurrent kernel
    for a, b in ((got, want), (got_rec, want_rec)):
        assert (a - b).abs().max() < 1e-4 * b.abs().max()
    grads = []
    for layer in (ours.train(), tri.train()):                    # the backward of Chapter 10 through the layer
        x_in = x.clone().requires_grad_()
        layer(x_in)[0].square().sum().backward()
        grads.append((x_in.grad, layer.b_proj.weight.grad, layer.A_log.grad))
    for a, b in zip(*grads):
        assert (a - b).abs().max() < 1e-3 * b.abs().max()


def test_lm_shapes_errors_and_cached_decoding():
    torch.manual_seed(0)
    lm = GDN2LM(vocab_size=20, hidden_size=32, num_layers=2, head_dim=8, num_heads=2).double().eval()
    ids = torch.randint(0, 20, (2, 15))
    with torch.no_grad():
        logits, cache = lm(ids)
        assert logits.shape == (2, 15, 20) and cache is None
        prefix, cache = lm(ids[:, :10], use_cache=True)
        steps = [lm(ids[:, t:t + 1], past_key_values=cache, use_cache=True)[0] for t in range(10, 15)]
    assert (torch.cat([prefix, *steps], 1) - logits).abs().max() < 1e-12
    assert len(cache) == 2
    # tied head: the embedding is the only parameter with a vocabulary axis, and the logits are its products
    assert [name for name, p in lm.named_parameters() if 20 in p.shape] == ["embed.weight"]
    with torch.no_grad():
        lm.embed.weight[3] += 1.0                        # moves token 3's logit at every position, not others'
        moved = (lm(ids)[0] - logits).abs().amax(dim=(0, 1))
    assert moved[3] > 1e-3 and moved[3] > 10 * moved[torch.arange(20) != 3].min()
    with pytest.raises(ValueError, match="input_ids"):
        lm(ids.double())
    with pytest.raises(ValueError, match="input_ids"):
        lm(ids + 20)
    with pytest.raises(ValueError, match="vocab_size"):
        GDN2LM(vocab_size=0)


@pytest.mark.parametrize("P, O, Q, num_keys, num_values", [
    (5, 2, 5, 10, 6), (5, 0, 3, 5, 2), (6, 4, 2, 6, 3), (16, 8, 16, 128, 128), (1, 1, 1, 1, 2),
])
def test_mqar_batch_properties(P, O, Q, num_keys, num_values):
    """Every row keeps the generator's promises; the batch is a function of the generator's state."""
    inputs, labels = mqar_batch(200, num_pairs=P, num_queries=Q, num_keys=num_keys, num_values=num_values,
                                overwrites=O, generator=torch.Generator().manual_seed(5))
    assert inputs.shape == labels.shape == (200, 2 * (P + O + Q)) and inputs.dtype == labels.dtype == torch.long
    start = 2 * (P + O)
    for row, lab in zip(inputs.tolist(), labels.tolist()):
        keys, values = row[0:2 * P:2], row[1:2 * P:2]
        assert len(set(keys)) == P and all(0 <= k < num_keys for k in keys)
        assert all(num_keys <= v < num_keys + num_values for v in row[1::2])
        over_k, over_v = row[2 * P:start:2], row[2 * P + 1:start:2]
        assert len(set(over_k)) == O and set(over_k) <= set(keys)
        first = dict(zip(keys, values))
        assert all(first[k] != v for k, v in zip(over_k, over_v))              # an overwrite changes the value
        latest = {**first, **dict(zip(over_k, over_v))}
        asked = row[start::2]
        assert len(set(asked)) == Q and set(asked) <= set(keys)
        assert set(over_k) <= set(asked) if O <= Q else set(asked) <= set(over_k)   # overwritten keys asked first
        assert row[start + 1::2] == [latest[k] for k in asked] == lab[start::2]
        assert all(x == IGNORE for i, x in enumerate(lab) if i < start or (i - start) % 2)
    again = mqar_batch(200, num_pairs=P, num_queries=Q, num_keys=num_keys, num_values=num_values, overwrites=O,
                       generator=torch.Generator().manual_seed(5))
    assert torch.equal(again[0], inputs) and torch.equal(again[1], labels)


def test_mqar_batch_default_generator():
    plain, _ = mqar_batch(4, num_pairs=3, num_queries=2, num_keys=5, num_values=5)
    assert plain.shape == (4, 10) and torch.equal(plain, mqar_batch(4, 3, 2, 5, 5)[0])


@pytest.mark.parametrize("kwargs, word", [
    (dict(num_pairs=11), "num_pairs"), (dict(overwrites=6), "overwrites"), (dict(num_queries=0), "num_queries"),
    (dict(num_values=1), "num_values"), (dict(batch_size=0), "batch_size"), (dict(num_queries=6), "num_queries"),
])
def test_mqar_batch_errors_name_the_argument(kwargs, word):
    args = dict(batch_size=2, num_pairs=5, num_queries=3, num_keys=10, num_values=6, overwrites=1)
    with pytest.raises(ValueError, match=word):
        mqar_batch(**{**args, **kwargs})


def test_tiny_training_lowers_the_loss():
    torch.manual_seed(0)
    model = GDN2LM(vocab_size=16, hidden_size=32, num_layers=1, head_dim=8, num_heads=2, mlp_ratio=2)
    task = dict(num_pairs=4, num_queries=4, num_keys=8, num_values=8, overwrites=2)
    run = train_mqar(model, task, steps=30, batch_size=16, lr=1e-2, eval_batch=64)
    assert len(run["loss"]) == 30 and all(math.isfinite(v) for v in run["loss"])
    assert sum(run["loss"][-5:]) / 5 < 0.8 * run["loss"][0]
    assert 0 <= run["accuracy"] <= 1


def test_lr_schedule():
    assert [lr_factor(s, 10) for s in (0, 9)] == [1.0, 1.0]
    assert [lr_factor(s, 10, warmup=4) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    cosine = [lr_factor(s, 10, warmup=2, cosine=True) for s in range(10)]
    assert cosine[:3] == [0.5, 1.0, 1.0] and all(a > b for a, b in zip(cosine[2:], cosine[3:]))
    assert cosine[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 7 / 8)))
    model = GDN2LM(vocab_size=16, hidden_size=16, num_layers=1, head_dim=8, num_heads=2, mlp_ratio=2)
    task = dict(num_pairs=2, num_queries=2, num_keys=8, num_values=8)
    for kwargs, word in ((dict(steps=0), "steps"), (dict(steps=4, warmup=5), "warmup"),
                         (dict(steps=4, cosine="yes"), "cosine")):
        with pytest.raises(ValueError, match=word):
            train_mqar(model, task, **kwargs)


@pytest.mark.parametrize("args, message", [
    ((0, 10, 20), "warmup must be an int in [0, 10], got 20"),          # would never reach the peak
    ((0, 10, -1), "warmup must be an int in [0, 10], got -1"),
    ((0, 0), "steps must be an int in [1, 1073741824], got 0"),
    ((0, 10.0), "steps must be an int in [1, 1073741824], got 10.0"),
    ((0, True), "steps must be an int in [1, 1073741824], got True"),
    ((-1, 10), "step must be an int in [0, 10], got -1"),
    ((11, 10), "step must be an int in [0, 10], got 11"),
    ((2.5, 10), "step must be an int in [0, 10], got 2.5"),
    ((0, 10, 2, 1), "cosine must be a bool, got 1"),
    ((0, 10, 2, None), "cosine must be a bool, got None"),
])
def test_lr_factor_names_bad_arguments(args, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        lr_factor(*args)


def test_lr_factor_at_the_ends():
    """The scheduler asks for step = steps after the last step: the cosine is 0 there; a warm-up as long as the
    run reaches the peak on its last step."""
    assert lr_factor(10, 10, 2, True) == pytest.approx(0.0, abs=1e-15)
    assert lr_factor(9, 10, 10) == 1.0


def load_tool(root, name):
    """tools/NAME.py as a module (tools/ on sys.path once, for the tools' imports of each other)."""
    import importlib.util
    import sys
    if str(root / "tools") not in sys.path:
        sys.path.insert(0, str(root / "tools"))
    spec = importlib.util.spec_from_file_location(name, root / "tools" / f"{name}.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_gpu_experiment_settings_are_valid(root):
    """tools/gpu_train_mqar.py (run on a GPU only): its tasks generate, its members share one state size, and
    its settings are those the CPU pilot chose (results/cpu_mqar_pilot.json)."""
    tool = load_tool(root, "gpu_train_mqar")
    args = tool.build_parser().parse_args(["--out", "x.json", "--seeds", "0", "1"])
    assert args.seeds == [0, 1] and args.members == list(tool.MEMBERS) and args.tasks == list(tool.TASKS)
    assert (args.steps, args.batch_size, args.lr, args.warmup, args.cosine) == tuple(tool.TRAINING.values())
    pilot = json.loads((root / "results" / "cpu_mqar_pilot.json").read_text())
    chosen = [r for r in pilot["runs"] if r["model"] == tool.MODEL and r["training"] == tool.TRAINING
              and r["task"] == tool.TASKS[r["task_name"]]]
    assert {r["task_name"] for r in chosen} == set(tool.TASKS) and all(r["accuracy"] > 0.8 for r in chosen)
    for task in tool.TASKS.values():
        inputs, labels = mqar_batch(2, **task)
        assert inputs.max() < task["num_keys"] + task["num_values"] and (labels != IGNORE).sum() == 2 * task[
            "num_queries"]
    sizes = {m: GatedDeltaNet2(hidden_size=tool.MODEL["hidden_size"], head_dim=tool.MODEL["head_dim"],
                               num_heads=tool.MODEL["num_heads"], member=m).state_size() for m in tool.MEMBERS}
    assert len(set(sizes.values())) == 1


def test_mqar_pilot_settings_and_chunk_cap(root, monkeypatch):
    """tools/mqar_pilot.py: its grid overrides gpu_train_mqar's settings (overwrites only where a task has
    them), and its chunk cap changes the layer's function by float32 rounding only."""
    pilot = load_tool(root, "mqar_pilot")
    fixed = pilot.parse_pairs(["num_pairs=6", "overwrites=3", "cosine=true"], many=False)
    varied = pilot.parse_pairs(["lr=1e-3,1e-2"], many=True)
    runs = list(pilot.configurations(fixed, varied, list(pilot.TASKS)))
    assert len(runs) == 2 * len(pilot.TASKS) and {r[3]["lr"] for r in runs} == {1e-3, 1e-2}
    assert all(task["num_pairs"] == 6 and training["cosine"] is True for _, task, _, training in runs)
    assert {name: task["overwrites"] for name, task, _, _ in runs} == {
        name: 3 if pilot.TASKS[name]["overwrites"] else 0 for name in pilot.TASKS}
    with pytest.raises(ValueError, match="KEY"):
        pilot.parse_pairs(["pairs=6"], many=False)
    torch.manual_seed(0)
    lm = GDN2LM(vocab_size=16, hidden_size=16, num_layers=1, head_dim=8, num_heads=2, member="gdn2")
    ids = torch.randint(0, 16, (2, 40))
    with torch.no_grad():
        full = lm(ids)[0]
        monkeypatch.setattr("gdn2edu.layers.chunk_gdn2_torch", pilot.capped_chunk(8))
        capped = lm(ids)[0]
    assert (capped - full).abs().max() < 1e-5


def test_gpu_layer_check_dry_run(root, tmp_path):
    """tools/gpu_layer_check.py with our own layer (PyTorch kernels) as the reference, on the CPU: the
    plumbing of the FLA comparison. The same weights give identical outputs and gradients; prefill +
    decoding in float32 agrees to float32 rounding (relative RMS measured ~2e-7)."""
    tool = load_tool(root, "gpu_layer_check")
    out = tmp_path / "layer.json"
    tool.main(["--cpu", "--reference", "ours", "--check-T", "20", "--check-size", "32,16,2",
               "--out", str(out)])
    result = json.loads(out.read_text())
    assert set(result["compare"]) == {f"{c}/{d}" for c in tool.CONFIGS for d in ("bf16", "fp32")}
    for row in result["compare"].values():
        assert row["o"]["max_abs"] == 0 and row["dx"]["max_abs"] == 0
    assert result["decode"]["fp32"]["rel_rms"] < 1e-5 and result["decode"]["bf16"]["rel_rms"] < 2e-2
    assert result["provenance"]["device_type"] == "cpu" and result["provenance"]["command"].startswith("python tools/")
    assert result["complete"] is True


def test_packed_sequences_take_one_triton_launch_and_match_torch():
    """cu_seqlens (with an empty sequence) and a padding mask (with a row of padding only) on the Triton
    path, where the chunk kernel takes every sequence in one launch, against the PyTorch path: outputs,
    input gradients, final states and a gate parameter's gradient, float32 in the interpreter (relative
    errors measured 3e-7 to 2e-6)."""
    torch.manual_seed(0)
    args = dict(hidden_size=32, head_dim=16, num_heads=2, num_v_heads=4, layer_idx=0)
    ours = GatedDeltaNet2(**args, backend="torch").train()
    tri = GatedDeltaNet2(**args, backend="triton").train()
    tri.load_state_dict(ours.state_dict(), strict=True)
    launches = []
    original = tri._packed_chunk
    tri._packed_chunk = lambda *a: launches.append(1) or original(*a)
    x = torch.randn(1, 45, 32)
    results = []
    for layer in (ours, tri):
        xi = x.clone().requires_grad_()
        cache = GDN2Cache()
        o = layer(xi, cu_seqlens=torch.tensor([0, 7, 7, 45]), past_key_values=cache, use_cache=True)[0]
        o.square().sum().backward()
        results.append((o.detach(), xi.grad, cache.get(0)["recurrent_state"].detach(), layer.A_log.grad))
    for got, want in zip(results[1], results[0]):
        assert (got - want).abs().max() < 1e-4 * want.abs().max()
    assert results[1][2].shape == (3, 4, 16, 16) and (results[1][2][1] == 0).all()     # the empty sequence
    mask = torch.tensor([[0] * 5 + [1] * 40, [1] * 45, [0] * 45])
    x3 = torch.randn(3, 45, 32)
    with torch.no_grad():
        want, got = ours(x3, attention_mask=mask)[0], tri(x3, attention_mask=mask)[0]
    assert (got - want).abs().max() < 1e-4 * want.abs().max() and (got[2] == 0).all()
    assert len(launches) == 2


def test_layer_profile_rows(root):
    """tools/gpu_layer_profile.py's summary of a phase: the total, the book's kernels apart from PyTorch's, the
    longest kernels first with their shares."""
    tool = load_tool(root, "gpu_layer_profile")
    times = {"sm90_gemm_bf16": 3.0, "chunk_gdn2_fwd_intra_kernel": 1.0, "fused_recurrent_gdn2_kernel": 0.5,
             "elementwise_kernel": 0.5}
    rows = tool.phase_rows(times, top=2)
    assert rows["total_ms"] == 5.0 and rows["ours_ms"] == 1.5 and rows["kernel_count"] == 4
    assert [r["kernel"] for r in rows["kernels"]] == ["sm90_gemm_bf16", "chunk_gdn2_fwd_intra_kernel"]
    assert rows["kernels"][0]["share"] == 0.6
    assert tool.layer_size("8,2048,2048,128,16") == dict(B=8, T=2048, hidden_size=2048, head_dim=128, num_heads=16)
    for bad in ("1,2,3,4,5,6", "1,2,3,4", "0,1,1,1,1", "a"):
        with pytest.raises(argparse.ArgumentTypeError):
            tool.layer_size(bad)


@pytest.mark.parametrize("eps", [0, 0.0, 1e-50, float("nan"), -1e-5, True])
def test_gated_norm_refuses_an_eps_that_makes_a_zero_row_nan(eps):
    """weight * x * rsqrt(mean(x^2) + eps): with eps = 0 (or one that rounds to 0 in float32) a zero row is
    0 * inf = NaN, on the Triton path and in RMSNormGated alike; both refuse such an eps by name."""
    from gdn2edu.gated_norm import rms_norm_gated_triton
    from gdn2edu.layers import RMSNormGated
    x = torch.zeros(2, 8)
    with pytest.raises(ValueError, match="eps must be"):
        rms_norm_gated_triton(x, x.clone(), torch.ones(8), eps=eps)
    with pytest.raises(ValueError, match="eps must be"):
        RMSNormGated(8, eps=eps)


def test_gated_norm_at_the_smallest_eps_keeps_a_zero_row_zero():
    from gdn2edu.fused_recurrent import L2NORM_MIN_EPS
    from gdn2edu.gated_norm import rms_norm_gated_triton
    from gdn2edu.layers import RMSNormGated
    x = torch.zeros(2, 8)
    assert torch.equal(rms_norm_gated_triton(x, x.clone(), torch.ones(8), eps=L2NORM_MIN_EPS), x)
    assert torch.equal(RMSNormGated(8, eps=L2NORM_MIN_EPS)(x, x.clone()), x)
