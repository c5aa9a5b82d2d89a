# Generated from chapters/12_gdn2_layer.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""A small language model of GDN2 layers: embedding, pre-norm blocks (layer + MLP), tied head."""

import torch
import torch.nn as nn

from gdn2edu.inputs import check_positive_ints
from gdn2edu.layers import GatedDeltaNet2


class GDN2Block(nn.Module):
    """x + layer(norm(x)), then x + mlp(norm(x)); x: [B, T, hidden_size]."""

    def __init__(self, hidden_size, layer_idx, mlp_ratio=4, norm_eps=1e-5, **layer_kwargs):
        super().__init__()
        self.attn_norm = nn.RMSNorm(hidden_size, eps=norm_eps)
        self.attn = GatedDeltaNet2(hidden_size=hidden_size, layer_idx=layer_idx, norm_eps=norm_eps, **layer_kwargs)
        self.mlp_norm = nn.RMSNorm(hidden_size, eps=norm_eps)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, mlp_ratio * hidden_size), nn.GELU(),
                                 nn.Linear(mlp_ratio * hidden_size, hidden_size))

    def forward(self, x, attention_mask=None, past_key_values=None, use_cache=False):
        h, _, past_key_values = self.attn(self.attn_norm(x), attention_mask, past_key_values, use_cache)
        x = x + h
        return x + self.mlp(self.mlp_norm(x)), past_key_values


class GDN2LM(nn.Module):
    """Embedding [vocab_size, hidden_size], num_layers GDN2Blocks, a final RMSNorm, and the embedding as head.

    layer_kwargs go to every GatedDeltaNet2 (head_dim, num_heads, member, ...)."""

    def __init__(self, vocab_size, hidden_size=64, num_layers=2, mlp_ratio=4, norm_eps=1e-5, **layer_kwargs):
        super().__init__()
        check_positive_ints(vocab_size=vocab_size, hidden_size=hidden_size, num_layers=num_layers,
                            mlp_ratio=mlp_ratio)
        self.embed = nn.Embedding(vocab_size, hidden_size)
        nn.init.normal_(self.embed.weight, std=hidden_size ** -0.5)
        self.blocks = nn.ModuleList(GDN2Block(hidden_size, i, mlp_ratio, norm_eps, **layer_kwargs)
                                    for i in range(num_layers))
        self.norm = nn.RMSNorm(hidden_size, eps=norm_eps)

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=False):
        """input_ids: [B, T] int. Returns (logits [B, T, vocab_size], past_key_values)."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.is_floating_point():
            shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
            raise ValueError(f"input_ids must be an integer tensor [B, T], got {shape}")
        if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= self.embed.num_embeddings):
            raise ValueError(f"input_ids must lie in [0, vocab_size = {self.embed.num_embeddings}), got "
                             f"[{int(input_ids.min())}, {int(input_ids.max())}]")
        x = self.embed(input_ids)
        for block in self.blocks:
            x, past_key_values = block(x, attention_mask, past_key_values, use_cache)
        return self.norm(x) @ self.embed.weight.T, past_key_values
