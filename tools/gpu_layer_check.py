"""Chapter 12's layer against FLA's: state_dict compatibility, output and gradient agreement, and prefill +
decoding in 16 bits; JSON with provenance. (The layers' speed is ``python -m gdn2edu.bench --parts layer``.)

1. ``fla.layers.gdn2.GatedDeltaNet2`` (FLA 0.6.0, carried as wheels) is built with a config, its state_dict
   loaded into ``gdn2edu.layers.GatedDeltaNet2`` with strict=True, and both run on the same input: the
   largest absolute error and the relative RMS error of the output and of the input's gradient are recorded
   (bf16 and fp32), per config (plain, grouped value heads, allow_neg_eigval, safe_gate). FLA 0.6.0's GDN2
   layer has no safe_gate: its constructor swallows the keyword, so that row compares our bounded gate
   (modelled on FLA's KDA layer) with FLA's softplus gate, and must differ.
2. Ours alone: prefill T tokens, then N one-token steps through a GDN2Cache, against the full forward (bf16).

    python tools/gpu_layer_check.py --out results/h200_layer.json [--commit SHA] [--dtypes bf16,fp32]

``--reference ours`` replaces FLA's layer by ours on PyTorch kernels (no FLA needed): a dry run of the
plumbing, which the CPU test suite uses.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

from gdn2edu.bench import provenance
from gdn2edu.layer_bench import fla_layer_class
from gdn2edu.layers import GDN2Cache, GatedDeltaNet2

CONFIGS = {
    "plain": dict(),
    "grouped_v_heads": dict(grouped=2),                 # num_v_heads = 2 * num_heads
    "allow_neg_eigval": dict(allow_neg_eigval=True),
    "safe_gate": dict(safe_gate=True, gate_lower_bound=-5.0),
}


def reference_layer(kind, **kwargs):
    """FLA's layer (kind "fla") or ours on the PyTorch kernels (kind "ours", a dry run without FLA)."""
    if kind == "ours":
        return GatedDeltaNet2(**kwargs, backend="torch")
    layer_class = fla_layer_class()
    if isinstance(layer_class, str):
        raise SystemExit(f"FLA's layer: {layer_class}")
    return layer_class(**kwargs)


def errors(got, want):
    """Largest absolute error and RMS error relative to the RMS of ``want`` (FLA's assert_close measure)."""
    diff = (got.double() - want.double())
    return {"max_abs": diff.abs().max().item(),
            "rel_rms": (diff.square().mean().sqrt() / want.double().square().mean().sqrt().clamp_min(1e-30)).item()}


def compare(reference, ours, x):
    """Load reference's state_dict into ours (strict) and compare outputs and input gradients on x [B, T, d]."""
    ours.load_state_dict(reference.state_dict(), strict=True)
    out = {}
    grads = []
    for layer in (reference, ours):
        xi = x.detach().clone().requires_grad_()
        o = layer(xi)[0]
        o.float().square().mean().backward()
        grads.append((o.detach(), xi.grad))
    out["o"] = errors(grads[1][0], grads[0][0])
    out["dx"] = errors(grads[1][1], grads[0][1])
    return out


def prefill_decode(layer, x, T):
    """Max abs and relative RMS error of prefill(T) + one-token steps against the full forward of x."""
    layer.eval()
    with torch.no_grad():
        full = layer(x)[0]
        cache = GDN2Cache()
        outs = [layer(x[:, :T], past_key_values=cache, use_cache=True)[0]]
        for t in range(T, x.shape[1]):
            outs.append(layer(x[:, t:t + 1], past_key_values=cache, use_cache=True)[0])
    return errors(torch.cat(outs, 1), full)


def run(args, device, result, save):
    """Fill ``result`` section by section, calling ``save()`` after each case (a cut call keeps what ran)."""
    dtypes = {name: {"bf16": torch.bfloat16, "fp32": torch.float32}[name] for name in args.dtypes.split(",")}
    hidden, head_dim, heads = args.check_size
    check = dict(hidden_size=hidden, head_dim=head_dim, num_heads=heads)
    result.update({"check_size": check, "reference": args.reference, "compare": {}, "decode": {}})
    for name, config in CONFIGS.items():
        config = dict(config)
        if "grouped" in config:
            config["num_v_heads"] = config.pop("grouped") * heads
        for dname, dtype in dtypes.items():
            torch.manual_seed(0)
            ref = reference_layer(args.reference, **check, layer_idx=0, **config).to(device, dtype).train()
            ours = GatedDeltaNet2(**check, layer_idx=0, **config).to(device, dtype).train()
            x = torch.randn(2, args.check_T, hidden, device=device, dtype=dtype)
            result["compare"][f"{name}/{dname}"] = compare(ref, ours, x)
            print(name, dname, result["compare"][f"{name}/{dname}"], flush=True)
            save()
    for dname, dtype in dtypes.items():
        torch.manual_seed(0)
        ours = GatedDeltaNet2(**check, layer_idx=0).to(device, dtype)
        x = torch.randn(2, args.check_T + 16, hidden, device=device, dtype=dtype)
        result["decode"][dname] = prefill_decode(ours, x, args.check_T)
        print("decode", dname, result["decode"][dname], flush=True)
        save()


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--commit", default=None)
    p.add_argument("--reference", choices=("fla", "ours"), default="fla")
    p.add_argument("--check-T", type=int, default=300, help="tokens of the agreement checks (> 64: chunked path)")
    p.add_argument("--check-size", type=lambda t: tuple(int(n) for n in t.split(",")), default=(512, 128, 4),
                   help="hidden_size,head_dim,num_heads of the agreement checks")
    p.add_argument("--dtypes", default="bf16,fp32", help="input types of the checks: bf16, fp32 or both")
    p.add_argument("--cpu", action="store_true", help="run on the CPU (with --reference ours: a dry run)")
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        raise SystemExit("gpu_layer_check.py runs on a CUDA GPU (or --cpu --reference ours, a dry run)")
    device = torch.device("cpu" if args.cpu else "cuda")
    result = {"provenance": provenance(device, args.commit, argv, "python tools/gpu_layer_check.py")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    run(args, device, result, lambda: args.out.write_text(json.dumps(result, indent=1)))
    result["complete"] = True
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
