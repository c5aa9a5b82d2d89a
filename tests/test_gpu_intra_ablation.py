"""tools/gpu_intra_ablation.py: every variant's edits match today's intra kernel exactly once and change it, each
variant loads as a module of its own with its tiles, a stale edit is refused, and without a GPU it stops before
timing (the times need one: results/h200_intra_ablation.json is the H200 record)."""

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_intra_ablation as ablation  # noqa: E402
from gdn2edu import chunk_kernels  # noqa: E402
from gdn2edu.kernel_history import module_kernels  # noqa: E402


def test_every_variant_applies_to_todays_kernel_and_changes_it():
    source = ablation.SOURCE.read_text()
    for name, (_, edits, tiles) in ablation.VARIANTS.items():
        text = ablation.variant_source(name)
        ast.parse(text)                                      # still Python
        assert (text != source) == bool(edits), name         # a variant with edits changes the source ...
        assert bool(edits) != bool(tiles) or name == "baseline", name   # ... or its tiles, not both, not neither
        assert dict(chunk_kernels.INTRA_TILES, **tiles) != chunk_kernels.INTRA_TILES or not tiles, name  # really
    assert ablation.variant_source("baseline") == source
    # the widths other than the shipped one, each a change of the setting alone (16: row by row, no merges)
    widths = {name for name in ablation.VARIANTS if name.startswith("inverse_by_") and name != "inverse_by_squaring"}
    assert {int(ablation.variant_source(name).split("SUBSTITUTION_WIDTH = ")[1].split()[0]) for name in widths} \
        == set(ablation.SUBSTITUTION_WIDTHS.values()) - {chunk_kernels.SUBSTITUTION_WIDTH}
    for name, (_, edits, tiles) in ablation.WY_VARIANTS.items():      # the WY kernel's: edits only
        text = ablation.variant_source(name, variants=ablation.WY_VARIANTS)
        ast.parse(text)
        assert (text != source) == bool(edits) == (name != "baseline") and not tiles, name
        changed = {n for n, s in module_kernels(text).items() if module_kernels(source).get(n) != s}
        assert changed == (set() if name == "baseline" else {"chunk_gdn2_fwd_wy_kernel"}), name  # the WY kernel alone
    for name, (_, edits, tiles) in ablation.SCAN_VARIANTS.items():    # the scan's: edits only, the scan alone
        text = ablation.variant_source(name, variants=ablation.SCAN_VARIANTS)
        ast.parse(text)
        assert (text != source) == bool(edits) == (name != "baseline") and not tiles, name
        changed = {n for n, s in module_kernels(text).items() if module_kernels(source).get(n) != s}
        stages = {"FUSED_SCAN_STAGES"} if "stages" in name else set()       # the scan's settings alone
        masked = {"SCAN_BY_DESCRIPTOR"} if "masked" in name else set()
        chain = {"chunk_gdn2_fwd_scan_kernel"} if "chain" in name else set()
        warps = {"SCAN_TILES"} if "warps" in name else set()
        assert changed == stages | masked | chain | warps and (bool(changed) != (name == "baseline")), name


def test_the_forward_launch_times_the_intra_candidates_as_whole_forwards(tmp_path):
    """--launch forward takes the intra kernel's candidates only (a cut computes wrong values, which a whole forward
    would carry on), and its output function is the module's chunk_gdn2_fwd output."""
    intra = set(ablation.FORWARD_VARIANTS) - {"plain_launches", "redo_inlined", "one_exponent_max"}
    assert intra <= set(ablation.VARIANTS) and "baseline" in intra
    assert all(name == "baseline" or name.startswith(("inverse_by_", "maxnreg_")) for name in intra)
    assert ablation.TIMERS["forward"] is ablation.time_forward
    assert ablation.LAUNCHES["forward"] is ablation.FORWARD_VARIANTS
    module = ablation.load_variant("inverse_by_rows", tmp_path)
    o = ablation.forward_output(module, 1, 70, 2, "cpu")                 # K = V = 128: the tool's baseline inputs
    o_shipped = chunk_kernels.chunk_gdn2_fwd(*chunk_kernels.baseline_inputs(1, 70, 2, device="cpu"))[0]
    assert o.shape == (1, 70, 2, 128) and o.dtype == torch.bfloat16
    torch.testing.assert_close(o, o_shipped, rtol=1e-2, atol=1e-2)     # bf16 outputs, one rounding apart at most


def test_plain_launches_changes_only_the_switch_and_no_value(tmp_path):
    """plain_launches turns PROGRAMMATIC_LAUNCH off and changes nothing else that kernel_history compares; in the
    interpreter (no programmatic launch there) its forward is the shipped one, bit for bit."""
    name, variants = "plain_launches", ablation.FORWARD_VARIANTS
    source, text = ablation.SOURCE.read_text(), ablation.variant_source(name, variants=variants)
    changed = {n for n, s in module_kernels(text).items() if module_kernels(source).get(n) != s}
    assert changed == {"PROGRAMMATIC_LAUNCH"}
    module = ablation.load_variant(name, tmp_path, variants)
    assert module.PROGRAMMATIC_LAUNCH is False and chunk_kernels.PROGRAMMATIC_LAUNCH is True
    x = chunk_kernels.baseline_inputs(1, 100, 2, K=32, V=32, dtype=torch.float32, device="cpu")
    assert torch.equal(module.chunk_gdn2_fwd(*x)[0], chunk_kernels.chunk_gdn2_fwd(*x)[0])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name, kernels", [("redo_inlined", {"_redo_rows"}),
                                           ("one_exponent_max", {"chunk_gdn2_fwd_intra_kernel", "_row_scores"})])
def test_the_redo_and_check_variants_compute_the_shipped_values(tmp_path, name, kernels):
    """redo_inlined (the redo of a flagged chunk inlined, not called) and one_exponent_max (one reduction of the
    midpoint exponents a program) change the functions they name; in the interpreter, on gates that flag chunks
    (-100 on one token, -12 on a run), their flags and the forward's output are the shipped ones, bit for bit."""
    variants = ablation.FORWARD_VARIANTS
    source, text = ablation.SOURCE.read_text(), ablation.variant_source(name, variants=variants)
    changed = {n for n, s in module_kernels(text).items() if module_kernels(source).get(n) != s}
    assert changed == kernels
    module = ablation.load_variant(name, tmp_path, variants)
    x = list(chunk_kernels.baseline_inputs(1, 200, 2, K=32, V=32, dtype=torch.float32, device="cpu"))
    x[3][0, 70, 1], x[3][0, 130:200, 0] = -100.0, -12.0
    p = chunk_kernels._plan(*x, None, None, None)
    flags = chunk_kernels._intra_states(x[0], x[1], x[3], x[4], p)["flags"]
    assert flags.remainder(2).sum() >= 2 and not flags.remainder(2).all()      # chunks redone, and chunks not
    assert torch.equal(module._intra_states(x[0], x[1], x[3], x[4], p)["flags"], flags)
    assert torch.equal(module.chunk_gdn2_fwd(*x)[0], chunk_kernels.chunk_gdn2_fwd(*x)[0])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_check_cuts_change_only_flagged_chunks(tmp_path):
    """no_redo (the redo's branch cut) and no_check (the whole check cut) change the intra kernel alone; in the
    interpreter they write the shipped A and Aqk at ordinary gates, which flag no chunk (what the timing runs on),
    and no_check writes no flags; with a token at -100 their A differs from the shipped one."""
    source = ablation.SOURCE.read_text()
    ordinary = list(chunk_kernels.baseline_inputs(1, 128, 2, K=32, V=32, dtype=torch.float32, device="cpu"))
    flagged = [x.clone() for x in ordinary]
    flagged[3][0, 70, 1] = -100.0

    def intra(module, x):
        p = chunk_kernels._plan(*x, None, None, None)
        A, Aqk, flags = module._intra_buffers(p, "cpu")
        A.zero_(), flags.fill_(7)                  # A's blocks above the diagonal are not written
        module._launch_intra(x[0], x[1], x[3], x[4], A, Aqk, flags, p, 1)
        return A, Aqk, flags

    shipped = {name: intra(chunk_kernels, x) for name, x in (("ordinary", ordinary), ("flagged", flagged))}
    assert not shipped["ordinary"][2].any() and shipped["flagged"][2].remainder(2).any()
    for name in ("no_redo", "no_check"):
        changed = {n for n, s in module_kernels(ablation.variant_source(name)).items()
                   if module_kernels(source).get(n) != s}
        assert changed == {"chunk_gdn2_fwd_intra_kernel"}, name
        module = ablation.load_variant(name, tmp_path)
        A, Aqk, flags = intra(module, ordinary)
        assert torch.equal(A, shipped["ordinary"][0]) and torch.equal(Aqk, shipped["ordinary"][1]), name
        assert torch.equal(flags, shipped["ordinary"][2]) == (name == "no_redo"), name   # no_check: left at 7
        assert not torch.equal(intra(module, flagged)[0], shipped["flagged"][0]), name


def test_a_stale_edit_is_refused_and_unknown_names_too():
    with pytest.raises(ValueError, match="an edit matches 0 times"):
        ablation.variant_source("no_inverse", source="def f():\n    pass\n")
    with pytest.raises(ValueError, match="unknown variant 'fastest'"):
        ablation.variant_source("fastest")


def test_variants_load_apart_with_their_tiles(tmp_path):
    base = ablation.load_variant("baseline", tmp_path)
    staged = ablation.load_variant("stages_4", tmp_path)
    assert base is not chunk_kernels and staged is not base
    assert base.INTRA_TILES == chunk_kernels.INTRA_TILES
    assert staged.INTRA_TILES == dict(chunk_kernels.INTRA_TILES, num_stages=4)
    assert chunk_kernels.INTRA_TILES["num_stages"] != 4          # the package's table is untouched
    cut = ablation.load_variant("no_inverse", tmp_path)
    assert "    return\n    tl.debug_barrier()" in Path(cut.__file__).read_text()


def test_shapes_variants_and_rounds_options():
    for bad in ("1x8192", "0x64x1", "a,b"):                      # the benchmark's parse_shapes refuses them
        with pytest.raises(SystemExit):
            ablation.main(["--out", "unused.json", "--shapes", bad])
    assert ablation.parse_variants("baseline,stages_4") == ["baseline", "stages_4"]
    for bad in ("", ",", "baseline,fastest"):
        with pytest.raises(argparse.ArgumentTypeError):
            ablation.parse_variants(bad)
    assert ablation.parse_variants("no_qg", ablation.WY_VARIANTS) == ["no_qg"]
    with pytest.raises(argparse.ArgumentTypeError):
        ablation.parse_variants("stages_4", ablation.WY_VARIANTS)          # an intra variant is not the WY's
    for launch, bad in (("wy", "stages_4"), ("intra", "no_qg"), ("fastest", "baseline")):
        with pytest.raises(SystemExit):                  # argparse's error, before anything is compiled
            ablation.main(["--out", "unused.json", "--launch", launch, "--variants", bad])
    with pytest.raises(SystemExit):                      # argparse's error, before anything is compiled
        ablation.main(["--out", "unused.json", "--rounds", "0"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_refuses_to_time_without_a_gpu(tmp_path):
    out = tmp_path / "ablation.json"
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_intra_ablation.py"), "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1 and "none is here" in run.stderr and not out.exists()


@pytest.mark.parametrize("name", ["inverse_by_squaring", "inverse_by_rows", "inverse_by_halves",
                                  "inverse_by_eighths"])
def test_the_inverse_candidates_compute_the_shipped_A(tmp_path, name):
    """The inverse_by_* variants are candidates, not cuts: in the interpreter their A and Aqk equal the shipped
    kernel's up to float32 rounding (a chunk and a tail, two heads; the substitution's and the candidates' sums
    differ in order only). Float32 inputs: their products are tf32x3, close to float32's rounding."""
    module = ablation.load_variant(name, tmp_path)
    q, k, v, g, b, w = chunk_kernels.baseline_inputs(1, 100, 2, K=32, V=32, dtype=torch.float32, device="cpu")
    p = chunk_kernels._plan(q, k, v, g, b, w, None, None, None)
    shipped, candidate = (m._intra_states(q, k, g, b, p) for m in (chunk_kernels, module))
    t = torch.arange(100)
    written = (torch.arange(64)[None, :] <= (t % 64)[:, None])[None, :, None, :].expand(1, 100, 2, 64)  # lower rows
    A, A_candidate = shipped["A"][written], candidate["A"][written]
    off_diagonal = A[A != 1].abs()
    assert off_diagonal.max() > 0.05                              # the inverse is not the identity here
    torch.testing.assert_close(A_candidate, A, rtol=1e-5, atol=1e-6)
    assert torch.equal(candidate["Aqk"][written], shipped["Aqk"][written])   # the inverse alone changed


def test_the_fused_wy_candidate_writes_the_wy_kernels_outputs(tmp_path):
    """fused_wy is a candidate: in the interpreter, its intra launches (the default path's two modes, a chunk and a
    tail, two heads, a gate strong enough that mode 2 redoes a chunk) write the WY kernel's AE, AZ, kg, Q_g and
    gamma_n up to float32 rounding, and A and Aqk exactly as the shipped kernel does. The gates' sums run in another
    order (and G on the last row is one sum, not the running one): an exponent near -150 (the gate of -100, in base
    2) moves by some 2^-24 of itself per addition, so the factors 2^(G_n - G) and 2^G of kg, Q_g, gamma_n agree to
    1e-4; AE and AZ, whose large factors come from the gentle rows, to 1e-5."""
    module = ablation.load_variant("fused_wy", tmp_path)
    q, k, v, g, b, w = chunk_kernels.baseline_inputs(1, 100, 2, K=32, V=32, dtype=torch.float32, device="cpu")
    g[0, 70, 1] = -100.0                                         # a midpoint factor past the limit: mode 2 runs
    p = chunk_kernels._plan(q, k, v, g, b, w, None, None, None)
    shipped = chunk_kernels._intra_states(q, k, g, b, p)
    assert shipped["flags"][1, 1] % 2 == 1                       # the second chunk of head 1 is redone
    shipped.update(chunk_kernels._wy_states(q, k, v, g, b, w, shipped["A"], p))
    fused = ablation.fuse_wy_outputs(module, p, v, w)
    fused.update(module._intra_states(q, k, g, b, p))
    t = torch.arange(100)
    written = (torch.arange(64)[None, :] <= (t % 64)[:, None])[None, :, None, :].expand(1, 100, 2, 64)
    for name in ("A", "Aqk"):
        assert torch.equal(fused[name][written], shipped[name][written]), name
    for name in ablation.FUSED_WY_OUTPUTS:
        assert shipped[name].abs().max() > 0.01, name                # not all zero
        rtol = 1e-5 if name in ("AE", "AZ") else 1e-4
        torch.testing.assert_close(fused[name], shipped[name], rtol=rtol, atol=1e-6, msg=name)


def test_the_wy_kernels_16bit_products_round_only_its_products(tmp_path):
    """products_16bit is a candidate: in the interpreter with float16 inputs (its bf16 products are wrong there,
    ../shared/GPU.md), its AE and AZ are the shipped ones but for A, E and Z rounded to float16 before the products:
    relative errors of a few units of float16's roundoff, 2^-11 (the bound, 4 units, allows the sum of three
    roundings and the stores'); kg, Q_g and gamma_n do not pass through a product and are equal. The variant and the
    baseline of the WY launch load apart, beside the intra launch's."""
    module = ablation.load_variant("products_16bit", tmp_path, ablation.WY_VARIANTS)
    assert ablation.load_variant("baseline", tmp_path, ablation.WY_VARIANTS).__file__ != \
        ablation.load_variant("baseline", tmp_path).__file__
    q, k, v, g, b, w = chunk_kernels.baseline_inputs(1, 100, 2, K=32, V=32, dtype=torch.float16, device="cpu")
    p = chunk_kernels._plan(q, k, v, g, b, w, None, None, None)
    A = chunk_kernels._intra_states(q, k, g, b, p)["A"]
    shipped, rounded = (m._wy_states(q, k, v, g, b, w, A, p) for m in (chunk_kernels, module))
    for name in ("AE", "AZ"):
        error = (rounded[name].float() - shipped[name].float()).norm() / shipped[name].float().norm()
        assert 0 < error < 4 * 2.0 ** -11, (name, error)
    for name in ("KG", "QG", "GN"):
        assert torch.equal(rounded[name], shipped[name]), name


def test_the_order_of_the_programs_moves_no_value(tmp_path):
    """The intra and WY launches with a head's chunks neighbouring (chunks_first, the order before Chapter 9's
    "Neighbouring programs") and with a chunk's heads neighbouring (shipped) write the same bits: every program
    computes from its own chunk and head alone. Packed sequences with a tail, two heads, float16, and a gate strong
    enough that mode 2 redoes a chunk, so that the flags are indexed in both orders too."""
    intra_first = ablation.load_variant("chunks_first", tmp_path)
    wy_first = ablation.load_variant("chunks_first", tmp_path, ablation.WY_VARIANTS)
    q, k, v, g, b, w = chunk_kernels.baseline_inputs(1, 150, 2, K=32, V=32, dtype=torch.float16, device="cpu")
    g[0, 90, 1] = -100.0
    cu = torch.tensor([0, 70, 150])
    p = chunk_kernels._plan(q, k, v, g, b, w, None, None, cu)
    shipped = chunk_kernels._intra_states(q, k, g, b, p)
    assert shipped["flags"].remainder(2).sum() >= 1                   # a chunk redone token by token
    before = intra_first._intra_states(q, k, g, b, p)
    row = torch.cat([torch.arange(70) % 64, torch.arange(80) % 64])        # each row's place in its chunk
    lower = (torch.arange(64)[None, :] <= row[:, None])[None, :, None, :].expand(1, 150, 2, 64)  # A's written part
    assert torch.equal(before["A"][lower], shipped["A"][lower])
    assert torch.equal(before["Aqk"], shipped["Aqk"]) and torch.equal(before["flags"], shipped["flags"])
    wy_shipped, wy_before = (m._wy_states(q, k, v, g, b, w, shipped["A"], p) for m in (chunk_kernels, wy_first))
    for name in ("AE", "AZ", "KG", "QG", "GN"):
        assert torch.equal(wy_before[name], wy_shipped[name]), name


def test_the_kept_gates_candidates_compute_the_shipped_values(tmp_path):
    """gates_kept and reads_kept_gates are candidates: in the interpreter (float32, packed sequences with tails, two
    heads, a gate strong enough that mode 2 redoes a chunk) the intra launches write A, Aqk and the flags as the
    shipped kernel does, up to the order of the gates' sums, and keep G and Q_g as the shipped WY launch writes
    them; the WY partner, on that kept G, writes the shipped AE, AZ, kg and gamma_n. The sums differ in order only
    (the running sum by products against tl.cumsum, Q_g through the first row's anchor): an exponent near -150
    moves by some 2^-24 of itself per addition, so factors of 2^G agree to 1e-4, as in the fused_wy test."""
    intra = ablation.load_variant("gates_kept", tmp_path)
    wy = ablation.load_variant("reads_kept_gates", tmp_path, ablation.WY_VARIANTS)
    q, k, v, g, b, w = chunk_kernels.baseline_inputs(1, 150, 2, K=32, V=32, dtype=torch.float32, device="cpu")
    g[0, 90, 1] = -100.0                                              # a midpoint factor past the limit
    cu = torch.tensor([0, 70, 150])
    p = chunk_kernels._plan(q, k, v, g, b, w, None, None, cu)
    shipped = chunk_kernels._intra_states(q, k, g, b, p)
    assert shipped["flags"].remainder(2).sum() >= 1                   # a chunk redone token by token
    shipped.update(chunk_kernels._wy_states(q, k, v, g, b, w, shipped["A"], p, store_G=True))
    kept = ablation.keep_gates(intra, p, "cpu")
    kept.update(intra._intra_states(q, k, g, b, p))
    row = torch.cat([torch.arange(70) % 64, torch.arange(80) % 64])
    lower = (torch.arange(64)[None, :] <= row[:, None])[None, :, None, :].expand(1, 150, 2, 64)
    torch.testing.assert_close(kept["A"][lower], shipped["A"][lower], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(kept["Aqk"], shipped["Aqk"], rtol=1e-5, atol=1e-6)
    assert torch.equal(kept["flags"], shipped["flags"])
    for name in ("G", "QG"):
        assert shipped[name].abs().max() > 0.01, name
        torch.testing.assert_close(kept[name], shipped[name], rtol=1e-4, atol=1e-6, msg=name)
    wy._KEPT_G = kept["G"]
    partner = wy._wy_states(q, k, v, g, b, w, kept["A"], p)
    for name in ("AE", "AZ", "KG", "GN"):
        torch.testing.assert_close(partner[name], shipped[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_masked_scan_writes_the_shipped_output(tmp_path, dtype):
    """masked_loads against the shipped scan made to take descriptors in the interpreter (the package's own
    test, tests/test_chunk_kernels.py, does the same through chunk_gdn2): two packed sequences whose second ends
    in a tail, the output bit for bit, and the states the backward's scan launch keeps too (STORE_STATES)."""
    base = ablation.load_variant("baseline", tmp_path, ablation.SCAN_VARIANTS)
    masked = ablation.load_variant("masked_loads", tmp_path, ablation.SCAN_VARIANTS)
    base._has_descriptors = masked._has_descriptors = lambda device: True     # as on a Hopper
    q, k, v, g, b, w = chunk_kernels.baseline_inputs(1, 300, 2, K=32, V=32, dtype=dtype, device="cpu")
    cu = torch.tensor([0, 100, 300], dtype=torch.int32)
    p = base._plan(q, k, v, g, b, w, None, None, cu)
    assert base._scan_by_descriptor(p, q.device) and not masked._scan_by_descriptor(p, q.device)
    f = base._forward_states(q, k, v, g, b, w, None, False, p, o=torch.empty_like(v), store_states=False)
    o = torch.empty_like(v)
    masked._scan_states(f, None, False, p, o=o, store_states=False)
    assert torch.equal(o, f["o"]) and o.abs().max() > 0.01
    kept, kept_masked = (m._scan_states(f, None, True, p) for m in (base, masked))
    for name in ("h", "R", "ht"):
        assert torch.equal(kept[name], kept_masked[name]), name


@pytest.mark.parametrize("name", ["one_product_chain_16bit", "one_product_chain_16bit_8_warps"])
def test_the_scans_with_one_product_on_the_chain_compute_the_shipped_output(tmp_path, name):
    """The one-product-chain candidates in the interpreter, float32 inputs (their products close to float32's, where
    16-bit inputs would round kg^T AE): two packed sequences whose second ends in a tail, a random initial state; the
    output and the final state equal the shipped scan's up to float32 rounding, and the states the backward keeps
    too."""
    base = ablation.load_variant("baseline", tmp_path, ablation.SCAN_VARIANTS)
    chain = ablation.load_variant(name, tmp_path, ablation.SCAN_VARIANTS)
    q, k, v, g, b, w = chunk_kernels.baseline_inputs(1, 300, 2, K=32, V=32, dtype=torch.float32, device="cpu")
    cu = torch.tensor([0, 100, 300], dtype=torch.int32)
    h0 = torch.randn(2, 2, 32, 32, generator=torch.Generator().manual_seed(3))
    p = base._plan(q, k, v, g, b, w, None, h0, cu)
    f = base._forward_states(q, k, v, g, b, w, h0, True, p, o=torch.empty_like(v), store_states=False)
    o = torch.empty_like(v)
    out = chain._scan_states(f, h0, True, p, o=o, store_states=False)
    assert o.abs().max() > 0.01 and not torch.equal(o, f["o"])          # another order of the sums
    torch.testing.assert_close(o, f["o"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out["ht"], f["ht"], rtol=1e-4, atol=1e-5)
    kept, kept_chain = (m._scan_states(f, h0, True, p) for m in (base, chain))
    for key in ("h", "R", "ht"):
        torch.testing.assert_close(kept_chain[key], kept[key], rtol=1e-4, atol=1e-5)


def test_the_wy_launch_by_host_descriptors_writes_the_shipped_outputs(tmp_path):
    """The two host-descriptor candidates of the WY launch, in the interpreter: two sequences of 100 tokens (the
    second chunk of each ends in a tail, where a descriptor's bound at T must zero the rows read and drop the rows
    stored past it), float16 inputs and outputs: AE, AZ, kg, Q_g and gamma_n bit for bit those of the shipped
    launch. Packed sequences are refused: the descriptors' bound is one length for all."""
    q, k, v, g, b, w = chunk_kernels.baseline_inputs(2, 100, 2, K=32, V=32, dtype=torch.float16, device="cpu")
    p = chunk_kernels._plan(q, k, v, g, b, w, None, None, None)
    A = chunk_kernels._intra_states(q, k, g, b, p)["A"]
    shipped = chunk_kernels._wy_states(q, k, v, g, b, w, A, p)
    one_row = [x.view(1, 200, 2, 32) for x in (q, k, v, g, b, w)]
    packed = chunk_kernels._plan(*one_row, None, None, torch.tensor([0, 100, 200]))
    for name in ("by_host_descriptor", "by_host_descriptor_stores"):
        module = ablation.load_variant(name, tmp_path, ablation.WY_VARIANTS)
        out = module._wy_states(q, k, v, g, b, w, A, p)
        for key in ("AE", "AZ", "KG", "QG", "GN"):
            assert torch.equal(out[key], shipped[key]), (name, key)
        assert module._wy_states(q, k, v, g, b, w, A, p, store_AZ=False)["AZ"] is None     # as the backward asks
        with pytest.raises(ValueError, match="one length"):
            module._wy_states(*one_row, A.view(1, 200, 2, 64), packed)
