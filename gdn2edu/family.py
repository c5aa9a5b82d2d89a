# Generated from chapters/01_token_recurrence.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""The delta-rule family as gate choices for one recurrence: DeltaNet, Gated DeltaNet, KDA."""

import torch

from gdn2edu.inputs import check_positive_ints

FAMILY_MEMBERS = ("deltanet", "gated_deltanet", "kda")


def family_gates(member, beta, K, V, log_decay=None):
    """Gates (g, b, w) that make ``recurrent_gdn2`` compute a tied member of the family.

    member: "deltanet" (no decay), "gated_deltanet" (log_decay [B, T, H], one per head and token)
    or "kda" (log_decay [B, T, H, K], one per key channel); beta: [B, T, H] delta gate.
    Returns g [B, T, H, K], b = beta * 1_K [B, T, H, K], w = beta * 1_V [B, T, H, V].
    """
    if member not in FAMILY_MEMBERS:
        raise ValueError(f"member must be one of {FAMILY_MEMBERS}, got {member!r}")
    check_positive_ints(K=K, V=V)
    if not isinstance(beta, torch.Tensor) or beta.dim() != 3:
        shape = tuple(beta.shape) if isinstance(beta, torch.Tensor) else type(beta).__name__
        raise ValueError(f"beta must be a 3-dim tensor [B, T, H], got {shape}")
    expected = {"deltanet": None, "gated_deltanet": beta.shape, "kda": (*beta.shape, K)}[member]
    if member == "deltanet":
        if log_decay is not None:
            raise ValueError("log_decay must be None for deltanet, which has no decay")
        g = beta.new_zeros(*beta.shape, K)
    else:
        if not isinstance(log_decay, torch.Tensor) or log_decay.shape != expected:
            shape = tuple(log_decay.shape) if isinstance(log_decay, torch.Tensor) else log_decay
            raise ValueError(f"log_decay must have shape {tuple(expected)} for {member}, got {shape}")
        g = log_decay.unsqueeze(-1).expand(*beta.shape, K) if member == "gated_deltanet" else log_decay
    b = beta.unsqueeze(-1).expand(*beta.shape, K)
    w = beta.unsqueeze(-1).expand(*beta.shape, V)
    return g, b, w
