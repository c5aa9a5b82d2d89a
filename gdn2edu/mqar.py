# Generated from chapters/12_gdn2_layer.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""Multi-query associative recall (Zoology's MQAR) with an overwrite variant, and a small training loop."""

import math
import time

import torch
import torch.nn.functional as F

IGNORE = -100


def _check_count(name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")


def mqar_batch(batch_size, num_pairs, num_queries, num_keys, num_values, overwrites=0, generator=None):
    """A batch of MQAR sequences. Keys are tokens [0, num_keys), values [num_keys, num_keys + num_values).

    Each row: num_pairs (key, value) pairs with distinct keys; then ``overwrites`` of those keys re-bound to
    new values (each different from the key's old value); then num_queries distinct bound keys, each followed
    by its latest value (every overwritten key is among the queries, in random order).
    Returns (inputs [B, L] long, labels [B, L] long with the answer at each query key and -100 elsewhere),
    L = 2 * (num_pairs + overwrites + num_queries).
    """
    _check_count("batch_size", batch_size, 1, 1 << 20)
    _check_count("num_keys", num_keys, 1, 1 << 20)
    _check_count("num_values", num_values, 2, 1 << 20)
    _check_count("num_pairs", num_pairs, 1, num_keys)
    _check_count("overwrites", overwrites, 0, num_pairs)
    _check_count("num_queries", num_queries, 1, num_pairs)
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    B, P, O, Q = batch_size, num_pairs, overwrites, num_queries

    def permutations(n):                            # [B, n]: a random permutation of range(n) per row
        return torch.rand(B, n, generator=gen, dtype=torch.float64).argsort(1)

    keys = permutations(num_keys)[:, :P]                                           # distinct per row
    values = torch.randint(num_values, (B, P), generator=gen)
    order = permutations(P)                           # the first O pair indices are re-bound, all asked
    which = order[:, :O]
    shift = torch.randint(1, num_values, (B, O), generator=gen)
    latest = values.scatter(1, which, (values.gather(1, which) + shift) % num_values)   # never the old value
    asked = order[:, :Q].gather(1, permutations(Q))                 # Q distinct bound keys, shuffled
    pairs = [(keys, values), (keys.gather(1, which), latest.gather(1, which)),
             (keys.gather(1, asked), latest.gather(1, asked))]
    inputs = torch.cat([torch.stack([k, v + num_keys], 2).flatten(1) for k, v in pairs], 1)
    labels = torch.full_like(inputs, IGNORE)
    labels[:, 2 * (P + O)::2] = inputs[:, 2 * (P + O) + 1::2]
    return inputs, labels


def mqar_accuracy(model, inputs, labels):
    """Fraction of labelled positions where the model's most likely next token is the label."""
    with torch.no_grad():
        logits, _ = model(inputs)
    mask = labels != IGNORE
    return (logits.argmax(-1)[mask] == labels[mask]).float().mean().item()


def _check_schedule(steps, warmup, cosine):
    """ValueErrors naming the argument unless steps is an int >= 1, warmup an int in [0, steps] (a longer
    warm-up would never reach the peak) and cosine a bool."""
    _check_count("steps", steps, 1, 1 << 30)
    _check_count("warmup", warmup, 0, steps)
    if not isinstance(cosine, bool):
        raise ValueError(f"cosine must be a bool, got {cosine!r}")


def lr_factor(step, steps, warmup=0, cosine=False):
    """The learning rate of ``step`` (0-based) as a fraction of the peak: linear warm-up over ``warmup`` steps,
    then constant, or with ``cosine`` a half cosine from 1 down to 0 at ``steps``. step: an int in [0, steps]
    (the scheduler asks for step = steps after the last step); steps >= 1; warmup in [0, steps]; cosine a bool."""
    _check_schedule(steps, warmup, cosine)
    _check_count("step", step, 0, steps)
    if step < warmup:
        return (step + 1) / warmup
    if not cosine:
        return 1.0
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def train_mqar(model, task, steps, batch_size=32, lr=3e-3, weight_decay=0.1, seed=0, eval_batch=256, warmup=0,
               cosine=False):
    """Train ``model`` (inputs [B, L] -> (logits, cache)) on mqar_batch(**task) for ``steps`` steps with AdamW
    at peak ``lr`` under lr_factor(step, steps, warmup, cosine).

    Returns {"loss": [per step], "accuracy": held-out accuracy, "seconds": wall time}."""
    _check_schedule(steps, warmup, cosine)
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, steps, warmup, cosine))
    losses, start = [], time.perf_counter()
    model.train()
    for _ in range(steps):
        inputs, labels = (t.to(device) for t in mqar_batch(batch_size, generator=gen, **task))
        logits, _ = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    model.eval()
    held_out = mqar_batch(eval_batch, generator=torch.Generator().manual_seed(seed + 10_000), **task)
    accuracy = mqar_accuracy(model, *(t.to(device) for t in held_out))
    return {"loss": losses, "accuracy": accuracy, "seconds": time.perf_counter() - start}
