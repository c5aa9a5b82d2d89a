"""chunk_gdn2 (Chapter 9) against the float64 token recurrence, in the Triton interpreter on the CPU.

Tolerance: float32 inputs, float32 accumulation; each output is a few 64-token products and one 64-row
triangular solve, whose rounding is a few 1e-7 relative. 1e-4 leaves a wide margin; any wrong mask, decay,
block or offset gives errors of order 1.
"""

import pytest
import torch
from conftest import make_inputs

from gdn2edu import baseline_inputs, chunk_gdn2, chunk_kernels, recurrent_gdn2

TOL = 1e-4


def rel(x, ref):
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("T, K, V", [(1, 16, 16), (17, 32, 16), (64, 16, 32), (100, 64, 16), (130, 16, 64)])
def test_matches_recurrence_with_tails_and_state(T, K, V):
    x = make_inputs(2, T, 2, K, V, seed=T + K)
    S0 = torch.randn(2, 2, K, V, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    o_ref, S_ref = recurrent_gdn2(*x, initial_state=S0, output_final_state=True)
    o, S = chunk_gdn2(*(t.float() for t in x), initial_state=S0.float(), output_final_state=True)
    assert o.dtype == torch.float32 and S.dtype == torch.float32 and o.shape == o_ref.shape
    assert torch.isfinite(o).all() and torch.isfinite(S).all()
    assert rel(o, o_ref) < TOL and rel(S, S_ref) < TOL


def test_no_state_and_custom_scale():
    x = make_inputs(1, 70, 3, 32, 32, seed=5)
    o_ref, _ = recurrent_gdn2(*x, scale=0.3)
    o, S = chunk_gdn2(*(t.float() for t in x), scale=0.3)
    assert S is None and rel(o, o_ref) < TOL


def test_packed_sequences_strong_decay():
    offsets = [0, 5, 70, 133]
    q, k, v, g, b, w = make_inputs(1, offsets[-1], 2, 32, 16, seed=9)
    g = -5.0 * torch.rand(g.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    S0 = torch.randn(3, 2, 32, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    x = (q, k, v, g, b, w)
    o, S = chunk_gdn2(*(t.float() for t in x), initial_state=S0.float(), output_final_state=True,
                      cu_seqlens=torch.tensor(offsets, dtype=torch.int64))
    assert torch.isfinite(o).all() and torch.isfinite(S).all() and S.shape == (3, 2, 32, 16)
    for i, (t0, t1) in enumerate(zip(offsets, offsets[1:])):
        o_ref, S_ref = recurrent_gdn2(*(t[:, t0:t1] for t in x), initial_state=S0[i:i + 1],
                                      output_final_state=True)
        assert rel(o[:, t0:t1], o_ref) < TOL and rel(S[i:i + 1], S_ref) < TOL


def test_fp16_inputs_output_dtype():
    """fp16 inputs: o in fp16, state float32. The intermediates (Aqk, AE, AZ, kg, Q_g, h, R) are stored in fp16
    too, so both o and the state carry a few units of fp16 rounding (2^-11 ~ 4.9e-4): 2e-3 for both."""
    x = make_inputs(1, 40, 1, 16, 16, seed=3)
    x16 = tuple(t.half() for t in x)
    o_ref, S_ref = recurrent_gdn2(*(t.double() for t in x16), output_final_state=True)
    o, S = chunk_gdn2(*x16, output_final_state=True)
    assert o.dtype == torch.float16 and S.dtype == torch.float32
    assert rel(o, o_ref) < 2e-3 and rel(S, S_ref) < 2e-3


def test_inverse_stays_accurate_when_L_is_near_ones():
    """Keys all alike, beta = 1 and no decay: every entry below L's diagonal is k.k = 1, so (I + L)^{-1} is
    small while the powers of L reach binomial sizes. The substitution stays at float32's rounding (7e-7 of o's
    largest entry, measured); an inverse as the product (I - L)(I + L^2)(I + L^4)(I + L^8), tried and rejected,
    cancels and lands near 2e-4. 1e-5 keeps a margin of ten over the first and fails the second."""
    gen = torch.Generator().manual_seed(0)
    T, K, V = 64, 16, 16
    k = torch.nn.functional.normalize(torch.rand(1, 1, 1, K, generator=gen), dim=-1).expand(1, T, 1, K).contiguous()
    q = torch.nn.functional.normalize(torch.rand(1, T, 1, K, generator=gen), dim=-1)
    v = torch.randn(1, T, 1, V, generator=gen)
    x = [q, k, v, torch.zeros(1, T, 1, K), torch.ones(1, T, 1, K), torch.ones(1, T, 1, V)]
    want = recurrent_gdn2(*(t.double() for t in x))[0]
    got = chunk_gdn2(*x)[0]
    assert ((got.double() - want).abs().max() / want.abs().max()).item() < 1e-5


# the interpreter's numpy warns of the infinities that the midpoint pass forms on flagged chunks, which the
# intra kernel then redoes (as in test_gate_paths.py)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_aqk_stored_in_16_bits_changes_no_value():
    """Aqk is stored in the intermediates' type: its reader, the output kernel, rounds it to that type before its
    product anyway, so o equals, bit for bit, the o of an Aqk stored in float32 (fp16 inputs, strong gates)."""
    x16 = [t.half().contiguous() for t in make_inputs(1, 130, 2, 32, 16, seed=5)]
    x16[3] = x16[3] * 8                                       # some chunks take the token-by-token path
    p = chunk_kernels._plan(*x16, None, None, None, False, None)
    f = chunk_kernels._forward_states(*x16, None, False, p)
    wide = chunk_kernels._intra_states(x16[0], x16[1], x16[3], x16[4], p._replace(store=torch.float32))
    assert f["Aqk"].dtype == torch.float16 and wide["Aqk"].dtype == torch.float32 and f["A"].dtype == torch.float32
    assert (f["flags"] % 2).any() and not (f["flags"] % 2).all()         # both paths of the intra kernel ran
    o16 = chunk_kernels._forward_output(x16[2], f, p)
    o32 = chunk_kernels._forward_output(x16[2], dict(f, Aqk=wide["Aqk"]), p)
    assert torch.equal(o16, o32)


def _inputs():
    return [t.float() for t in make_inputs(1, 20, 1, 16, 16)]


@pytest.mark.parametrize("kwargs, match", [
    (dict(cu_seqlens=torch.tensor([0.0, 20.0])), "int32 or int64"),
    (dict(cu_seqlens=torch.tensor([[0, 20]])), "1-D"),
    (dict(cu_seqlens=torch.tensor([1, 20])), "start at 0"),
    (dict(cu_seqlens=torch.tensor([0, 12, 12, 20])), "increase strictly"),
    (dict(cu_seqlens=torch.tensor([0, 19])), "end at T"),
    (dict(cu_seqlens=torch.tensor([0, 7, 20]), initial_state=torch.randn(1, 1, 16, 16)), r"\[N, H, K, V\]"),
    (dict(initial_state=torch.randn(2, 1, 16, 16)), "initial_state"),
    (dict(scale=-1.0), "scale"),
])
def test_bad_input_is_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        chunk_gdn2(*_inputs(), **kwargs)


def test_batch_with_cu_seqlens_and_large_head_dim():
    x = _inputs()
    with pytest.raises(ValueError, match="batch must be 1"):
        chunk_gdn2(*(torch.cat([t, t]) for t in x), cu_seqlens=torch.tensor([0, 20]))
    q, k, v, g, b, w = (torch.randn(1, 2, 1, 300) for _ in range(6))
    with pytest.raises(ValueError, match="at most 256"):
        chunk_gdn2(q, k, v, g, b, w)


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        chunk_gdn2(*_inputs())


def test_shipped_kernel_settings():
    """The module settings as shipped, which the chapters describe: with 16-bit inputs the intermediates are
    stored in that type (Chapter 9, as FLA does; the benchmark's --fp32-intermediates help says "shipped: on"),
    and float32 products are "tf32x3", which the H200's records found as accurate as "ieee" and faster
    (Chapter 9's comment on FLOAT32_DOT, Chapter 11's cells). Changing either is a decision for the chapters, not
    a side effect: the one test that pins them. The tests of the switches compare with the value found before
    they ran."""
    assert chunk_kernels.LOW_PRECISION_INTERMEDIATES is True
    assert chunk_kernels.FLOAT32_DOT == "tf32x3"
    assert chunk_kernels.FUSE_OUTPUT is True


def test_float32_dot_setting_reaches_the_plan_and_is_checked(monkeypatch):
    """chunk_kernels.FLOAT32_DOT is the precision of float32 inputs' products (the backward shares the plan);
    16-bit inputs keep tf32; a value Triton does not offer is refused by name before any launch."""
    x = _inputs()
    for dot in chunk_kernels.FLOAT32_DOTS:
        monkeypatch.setattr(chunk_kernels, "FLOAT32_DOT", dot)
        assert chunk_kernels._plan(*x, None, None, None).DOT == dot
        for half in (torch.float16, torch.bfloat16):
            assert chunk_kernels._plan(*(t.to(half) for t in x), None, None, None).DOT == "tf32"
    monkeypatch.setattr(chunk_kernels, "FLOAT32_DOT", "fp32")
    with pytest.raises(ValueError, match="FLOAT32_DOT must be one of"):
        chunk_gdn2(*x)


@pytest.mark.parametrize("width", [3, 32, "4"])
def test_substitution_width_setting_is_checked(monkeypatch, width):
    """chunk_kernels.SUBSTITUTION_WIDTH must split the 16-row diagonal blocks into sub-blocks that merges double
    back to 16; another value is refused by name before any launch."""
    monkeypatch.setattr(chunk_kernels, "SUBSTITUTION_WIDTH", width)
    with pytest.raises(ValueError, match="SUBSTITUTION_WIDTH must be one of"):
        chunk_gdn2(*_inputs())


@pytest.mark.parametrize("kwargs, name", [(dict(B=0), "B"), (dict(T=2.5), "T"), (dict(H=True), "H"),
                                          (dict(dtype=torch.int32), "dtype")])
def test_baseline_inputs_names_bad_arguments(kwargs, name):
    args = dict(B=1, T=4, H=2, K=8, V=8, device="cpu") | kwargs
    with pytest.raises(ValueError, match=name):
        baseline_inputs(**args)


@pytest.mark.parametrize("overrides, message", [(dict(FLOAT32_DOT="tf16"), "FLOAT32_DOT must be one of"),
                                                (dict(LOW_PRECISION_INTERMEDIATES=1), "must be a bool"),
                                                (dict(FUSE_OUTPUT="yes"), "FUSE_OUTPUT must be a bool"),
                                                (dict(TILES=1), "kernel_settings takes")])
def test_kernel_settings_refuses_bad_values_by_name(overrides, message):
    from gdn2edu import chunk_kernels
    before = (chunk_kernels.FLOAT32_DOT, chunk_kernels.LOW_PRECISION_INTERMEDIATES)
    with pytest.raises(ValueError, match=message):
        with chunk_kernels.kernel_settings(**overrides):
            pass
    assert (chunk_kernels.FLOAT32_DOT, chunk_kernels.LOW_PRECISION_INTERMEDIATES) == before


def test_tile_table_holds_exactly_the_setting_inside_and_the_table_comes_back_whole():
    ck = chunk_kernels
    shipped = dict(ck.INTRA_TILES)
    capped = dict(shipped, maxnreg=168, BK=32)
    with ck.tile_table(ck.INTRA_TILES, capped) as table:
        assert table is ck.INTRA_TILES and ck.INTRA_TILES == capped
        with ck.tile_table(ck.INTRA_TILES, {k: v for k, v in capped.items() if k != "maxnreg"}):
            assert "maxnreg" not in ck.INTRA_TILES                            # entries the setting lacks: gone
        assert ck.INTRA_TILES == capped                                        # nested: the outer one back
    assert ck.INTRA_TILES == shipped and "maxnreg" not in ck.INTRA_TILES
    with pytest.raises(RuntimeError, match="inside"):
        with ck.tile_table(ck.INTRA_TILES, capped):
            raise RuntimeError("inside")
    assert ck.INTRA_TILES == shipped                                           # also after an error
    with pytest.raises(ValueError, match="table and setting must be dicts, got dict and list"):
        with ck.tile_table(ck.INTRA_TILES, [("BK", 16)]):
            pass


def test_intra_launch_passes_a_register_cap_only_when_the_table_has_one(monkeypatch):
    """INTRA_TILES may carry "maxnreg" (a sweep tries it): the launch hands it to Triton, and None without it.
    The interpreter ignores the option, so a fake kernel records what the launch passes."""
    ck = chunk_kernels
    seen = []

    class FakeKernel:
        def __getitem__(self, grid):
            return lambda *args, **options: seen.append(options)

    q, k, v, g, b, w = (x.float() for x in make_inputs(1, 70, 2, 16, 16, seed=3))
    p = ck._plan(q, k, v, g, b, w, None, None, None)
    monkeypatch.setattr(ck, "chunk_gdn2_fwd_intra_kernel", FakeKernel())
    for table in (dict(ck.INTRA_TILES), dict(ck.INTRA_TILES, maxnreg=168)):
        monkeypatch.setattr(ck, "INTRA_TILES", table)
        ck._launch_intra(q, k, g, b, None, None, None, p, 1)
    assert [s["maxnreg"] for s in seen] == [None, 168]
    assert all(s["num_warps"] == ck.INTRA_TILES["num_warps"] for s in seen)


@pytest.mark.parametrize("dtype, offsets", [(torch.float32, None), (torch.float16, None),
                                            (torch.float16, [0, 5, 70, 190])])
def test_the_scan_that_writes_the_output_changes_no_value(dtype, offsets):
    """FUSE_OUTPUT: the scan forms O = Q_g h + Aqk R from h and R rounded as the output kernel would read them,
    so the output, the final state, the states kept for the backward and the gradients are bit for bit those
    of the four-kernel forward, with tails, packed sequences and an initial state."""
    from gdn2edu.chunk_backward_kernels import chunk_gdn2 as chunk_gdn2_autograd
    x = [t.to(dtype) if i not in (3,) else t.float() for i, t in enumerate(make_inputs(1, 190, 2, 32, 16, seed=9))]
    cu = None if offsets is None else torch.tensor(offsets)
    S0 = torch.randn(1 if cu is None else 3, 2, 32, 16)
    results = {}
    for fuse in (False, True):
        with chunk_kernels.kernel_settings(FUSE_OUTPUT=fuse):
            o, S = chunk_gdn2(*x, initial_state=S0, output_final_state=True, cu_seqlens=cu)
            leaves = [t.clone().requires_grad_() for t in x]
            o_grad, _ = chunk_gdn2_autograd(*leaves, initial_state=S0, cu_seqlens=cu)
            grads = torch.autograd.grad((o_grad.float() * torch.linspace(-1, 1, o_grad.numel()).view_as(o_grad)).sum(),
                                        leaves)
        results[fuse] = (o, S, o_grad, *grads)
    assert all(torch.equal(a, b) for a, b in zip(results[False], results[True]))
    assert torch.isfinite(results[True][0]).all()


def test_an_inference_forward_stores_no_states(monkeypatch):
    """Without a backward to follow, the scan writes o and neither h nor R; the forward of an autograd call
    keeps them (KEPT), and recompute_states=True (KEPT_LEAN) lets its backward run the scan again instead."""
    from gdn2edu.chunk_backward_kernels import chunk_gdn2 as chunk_gdn2_autograd
    seen = []
    scan_states = chunk_kernels._scan_states
    monkeypatch.setattr(chunk_kernels, "_scan_states",
                        lambda *a, **kw: seen.append(scan_states(*a, **kw)) or seen[-1])
    x = _inputs()
    chunk_gdn2(*x)
    leaves = [t.clone().requires_grad_() for t in x]
    chunk_gdn2_autograd(*leaves)
    chunk_gdn2_autograd(*leaves, recompute_states=True)
    stored = [(f["h"] is not None, f["R"] is not None, f["o"] is not None) for f in seen]
    assert stored == [(False, False, True), (True, True, True), (False, False, True)], stored


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_intra_kernel_writes_aqk_whole():
    """The scans and the output kernel read Aqk's 64 x 64 tiles unmasked: the intra kernel must write every block
    of a chunk's rows, those above the diagonal as exact zeros, also in a sequence's tail chunk, in packed
    sequences and in chunks redone token by token (mode 1's second pass). Its buffer starts as NaN, so a block
    left unwritten shows; rows past a sequence's end belong to the next sequence's chunks and are written there."""
    x = [t.float().contiguous() for t in make_inputs(1, 200, 2, 32, 16, seed=3)]
    x[3] = x[3] * 4                                           # strong gates: some chunks go token by token
    cu = torch.tensor([0, 37, 150, 200], dtype=torch.int32)   # three sequences, each ending inside a chunk
    p = chunk_kernels._plan(*x, None, None, cu, False, None)
    A, Aqk, flags = chunk_kernels._intra_buffers(p, x[0].device)
    Aqk.fill_(float("nan"))
    chunk_kernels._launch_intra(x[0], x[1], x[3], x[4], A, Aqk, flags, p, 1)
    assert (flags % 2).any() and not (flags % 2).all()        # both paths of the kernel ran
    starts = torch.repeat_interleave(cu[:-1], (cu[1:] - cu[:-1]).long())
    local = (torch.arange(200) - starts) % 64                 # each row's index within its chunk
    above = torch.arange(64)[None, :] > local[:, None]        # [T, 64]: the columns above the row's diagonal
    assert torch.isfinite(Aqk).all()                          # every row of every chunk written
    assert (Aqk[0][above[:, None, :].expand(-1, 2, -1)] == 0).all()
    assert (Aqk[0][~above[:, None, :].expand(-1, 2, -1)] != 0).any()


@pytest.mark.parametrize("dtype, recompute_states", [(torch.float32, False), (torch.float16, True)])
def test_the_scan_by_descriptors_changes_no_value(monkeypatch, dtype, recompute_states):
    """SCAN_BY_DESCRIPTOR, made to apply on the CPU (the interpreter makes descriptors; _has_descriptors says no
    GPU here): the output, final state and gradients are bit for bit those of masked loads, for packed sequences
    whose last chunks end in tails (the descriptors' row bound at each sequence's end must zero the rows past
    it, as the masks do), with an initial state; with recompute_states the backward's scan launch (states, no
    output) takes descriptors too. Each call's caller keeps its own Triton allocator."""
    import triton.runtime._allocation as allocation

    from gdn2edu.chunk_backward_kernels import chunk_gdn2 as chunk_gdn2_autograd
    x = [t.to(dtype) if i != 3 else t.float() for i, t in enumerate(make_inputs(1, 190, 2, 32, 16, seed=4))]
    cu, S0 = torch.tensor([0, 5, 70, 190]), torch.randn(3, 2, 32, 16)
    launches = []
    scratch = chunk_kernels._with_descriptor_scratch
    monkeypatch.setattr(chunk_kernels, "_has_descriptors", lambda device: True)
    monkeypatch.setattr(chunk_kernels, "_with_descriptor_scratch",
                        lambda launch, device: launches.append(device) or scratch(launch, device))
    results = {}
    for by_descriptor in (False, True):
        monkeypatch.setattr(chunk_kernels, "SCAN_BY_DESCRIPTOR", by_descriptor)
        o, S = chunk_gdn2(*x, initial_state=S0, output_final_state=True, cu_seqlens=cu)
        leaves = [t.clone().requires_grad_() for t in x]
        o_grad, _ = chunk_gdn2_autograd(*leaves, initial_state=S0, cu_seqlens=cu, recompute_states=recompute_states)
        grads = torch.autograd.grad((o_grad.float() * torch.linspace(-1, 1, o_grad.numel()).view_as(o_grad)).sum(),
                                    leaves)
        results[by_descriptor] = (o, S, o_grad, *grads)
    assert len(launches) == 2 + recompute_states   # the forward, the autograd one, and the backward's recomputation
    assert all(torch.equal(a, b) for a, b in zip(results[False], results[True]))
    assert torch.isfinite(results[True][0]).all() and results[True][0].abs().max() > 0.01
    assert allocation._allocator.get() is allocation._NULL_ALLOCATOR     # the allocator was set in a copy only


@pytest.mark.parametrize("dtype, K, V, by_descriptor", [
    (torch.float16, 64, 128, True), (torch.bfloat16, 128, 128, True), (torch.float32, 60, 100, True),
    (torch.float16, 60, 64, False), (torch.bfloat16, 64, 100, False)])
def test_the_scan_takes_descriptors_only_where_rows_are_16_byte_multiples(monkeypatch, dtype, K, V, by_descriptor):
    """A descriptor's strides and each head's base offset must be multiples of 16 bytes: K and V columns of the
    stored type. K = 60 or V = 100 in 16 bits are not, and take masked loads; float32 (4 bytes) needs only
    multiples of 4. Without a device that has descriptors, or with SCAN_BY_DESCRIPTOR off, none does."""
    x = make_inputs(1, 8, 1, K, V)
    p = chunk_kernels._plan(*(t.to(dtype) for t in x), None, None, None)
    assert chunk_kernels._scan_by_descriptor(p, torch.device("cpu")) is False
    monkeypatch.setattr(chunk_kernels, "_has_descriptors", lambda device: True)
    assert chunk_kernels._scan_by_descriptor(p, torch.device("cpu")) is by_descriptor
    monkeypatch.setattr(chunk_kernels, "SCAN_BY_DESCRIPTOR", False)
    assert chunk_kernels._scan_by_descriptor(p, torch.device("cpu")) is False


def test_tensor_descriptors_need_a_hopper_and_a_triton_that_makes_them(monkeypatch):
    """Capability 9 or more (TMA) and tl.make_tensor_descriptor: an A100 (8) or an L4 (8.9) takes masked loads, and
    so does a Hopper under a Triton without the call; hopper_compile_check asks the same for its targets."""
    assert chunk_kernels.tensor_descriptors_at(9) and chunk_kernels.tensor_descriptors_at(10)
    assert not chunk_kernels.tensor_descriptors_at(8)
    monkeypatch.delattr(chunk_kernels.tl, "make_tensor_descriptor")
    assert not chunk_kernels.tensor_descriptors_at(9)


@pytest.mark.parametrize("major", [9.0, "9", True, None])
def test_tensor_descriptors_at_names_a_major_that_is_not_an_int(major):
    with pytest.raises(ValueError, match="major must be an int"):
        chunk_kernels.tensor_descriptors_at(major)


@pytest.mark.parametrize("capability, wanted", [((9, 0), dict(PDL=True, launch_pdl=True)), ((10, 0),
                                                 dict(PDL=True, launch_pdl=True)), ((8, 9), {}), ((8, 0), {})])
def test_programmatic_launch_is_asked_for_on_compute_capability_9_and_up(monkeypatch, capability, wanted):
    """_programmatic gives the forward's launches PDL (the kernels' wait and Triton's launch_pdl) on a GPU of
    compute capability 9 or more, while PROGRAMMATIC_LAUNCH is on; nothing on older GPUs, on the CPU, or with
    the switch off (the capability is mocked: this machine has no GPU)."""
    asked = []
    monkeypatch.setattr(chunk_kernels, "_device_capability", lambda index: asked.append(index) or capability)
    assert chunk_kernels._programmatic(torch.device("cuda", 1)) == wanted and asked == [1]
    assert chunk_kernels._programmatic(torch.device("cpu")) == {}
    monkeypatch.setattr(chunk_kernels, "PROGRAMMATIC_LAUNCH", False)
    assert chunk_kernels._programmatic(torch.device("cuda", 1)) == {}
