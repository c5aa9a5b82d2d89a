# Generated from chapters/12_gdn2_layer.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""Chapter 12's part of ``python -m gdn2edu.bench``: forward and backward of a whole GatedDeltaNet2 layer,
ours against FLA's ``fla.layers.gdn2.GatedDeltaNet2``, from the same weights and input."""

import importlib
import sys
import types
from pathlib import Path

import torch

from gdn2edu.bench_parts import EXTENSION_PARTS
from gdn2edu.layers import GatedDeltaNet2

# the timed layer: (B, T) and constructor arguments; a model-sized one on a GPU, a tiny one on the CPU
LAYER_BENCH_SIZE = dict(B=8, T=2048, hidden_size=2048, head_dim=128, num_heads=16)
LAYER_BENCH_CPU_SIZE = dict(B=1, T=128, hidden_size=64, head_dim=16, num_heads=4)
LAYER_IMPLEMENTATIONS = ("gdn2edu", "fla")


def fla_layer_class():
    """FLA's ``fla.layers.gdn2.GatedDeltaNet2``, or a string saying why it cannot be had here. Where importing
    ``fla.layers`` fails (it imports every layer, some of which need transformers), the gdn2 module alone,
    under an empty ``fla.layers`` package."""
    try:
        import fla
        try:
            from fla.layers.gdn2 import GatedDeltaNet2 as FLAGatedDeltaNet2
        except ImportError:
            package = types.ModuleType("fla.layers")
            package.__path__ = [str(Path(fla.__file__).parent / "layers")]
            sys.modules["fla.layers"] = package
            FLAGatedDeltaNet2 = importlib.import_module("fla.layers.gdn2").GatedDeltaNet2
    except ImportError:
        return "not installed (fla)"
    except Exception as err:             # FLA asks the GPU's driver at import: on a CPU it fails here
        return f"failed to import fla.layers.gdn2: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
    return FLAGatedDeltaNet2


def time_layer(layer, x, warmup=25, rep=100):
    """Median times (ms) of a layer's forward without autograd, of its backward, and of a training step's forward +
    backward (the gradient onto x [B, T, hidden] and every parameter, for a fixed random cotangent), and the
    peak memory of one step (MiB, GPU only); on a GPU also, for the forward and the backward, the host's time
    per call and the GPU's with the host out of the way (Chapter 11's time_host_and_gpu): a dict in the layout
    of the benchmark's "forward" rows."""
    from gdn2edu import bench          # here, not at the top: importing the package must not run bench
    if not isinstance(layer, torch.nn.Module):
        raise ValueError(f"layer must be a torch.nn.Module, got {type(layer).__name__}")
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or not x.is_floating_point():
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a float tensor [B, T, hidden], got {shape}")

    def forward():
        with torch.no_grad():
            return layer(x)[0]

    xi = x.detach().requires_grad_()
    do = torch.randn_like(x)                     # the output has the input's shape [B, T, hidden]

    def step():
        layer.zero_grad(set_to_none=True)
        xi.grad = None
        layer(xi)[0].backward(do)
    flush = bench.l2_flush() if x.is_cuda else None
    row = {"fwd_ms": bench.measure_ms(forward, warmup, rep), **dict.fromkeys(bench.HOST_AND_GPU_FIELDS)}
    bench.time_host_and_gpu(row, "fwd", forward, flush)
    o = layer(xi)[0]

    def backward():
        o.backward(do, retain_graph=True)
    row["bwd_ms"] = bench.measure_ms(backward, warmup, rep)
    bench.time_host_and_gpu(row, "bwd", backward, flush)
    o = None                                     # free the graph before timing whole steps
    row["fwdbwd_ms"] = bench.measure_ms(step, warmup, rep)
    row["peak_mib"] = bench._peak_mib(step, x.device)
    row["backward"] = "ok"
    return row


def plan_layer_benchmark(args, result):
    """The benchmark's part "layer": one step per implementation of LAYER_IMPLEMENTATIONS named in --impls
    (both by default), each timing its layer loaded with the same state_dict (ours, seeded; strict) on the
    same input; rows under result["layer"]."""
    from gdn2edu import bench
    device, dtype = args.device, bench._DTYPES[args.dtype]
    size = dict(LAYER_BENCH_SIZE if torch.device(device).type == "cuda" else LAYER_BENCH_CPU_SIZE)
    B, T = size.pop("B"), size.pop("T")
    names = args.impls.split(",") if args.impls else LAYER_IMPLEMENTATIONS
    shared = {}

    def weights_and_input():
        if not shared:
            torch.manual_seed(0)
            shared["weights"] = GatedDeltaNet2(**size).state_dict()
            gen = torch.Generator(device=device).manual_seed(0)
            shared["x"] = torch.randn(B, T, size["hidden_size"], device=device, generator=gen).to(dtype)
        return shared["weights"], shared["x"]

    steps = []
    for name in (n for n in names if n in LAYER_IMPLEMENTATIONS):
        def step(name=name):
            row = {"impl": name, "B": B, "T": T, "H": size["num_heads"], "K": size["head_dim"],
                   "V": size["head_dim"], "hidden": size["hidden_size"]}
            result["layer"].append(row)
            layer_class = GatedDeltaNet2 if name == "gdn2edu" else fla_layer_class()
            if isinstance(layer_class, str):
                row["status"] = layer_class
                return
            weights, x = weights_and_input()
            try:
                layer = layer_class(**size)
                layer.load_state_dict(weights, strict=True)
                row.update(time_layer(layer.to(device, dtype).train(), x, args.warmup, args.rep), status="ok")
            except Exception as err:         # a compile error, out of memory: report and go on
                row["status"] = bench._status(err)
        steps.append((f"layer {B}x{T}x{size['hidden_size']} {name}", step, None))
    return steps


EXTENSION_PARTS["layer"] = plan_layer_benchmark
