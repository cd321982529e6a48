"""Per-token log-probs (and entropies) of completions, without the [batch, seq, vocab] logits.

With SmolLM2's 49,152-token vocabulary the full logits of 8 x 300 tokens are 470 MB in fp32 (more
with their gradient), and they dominate a step's memory. We run the transformer trunk once, gather
the hidden states of the positions that predict a completion token, and apply the LM head to
``chunk`` of those positions at a time. Prompt positions never reach the head at all.

Sequences are right-padded; masks come from lengths, never from token values (pad may equal EOS).
"""
from __future__ import annotations

import contextlib

import torch

from evolver.backends.precision import use_autocast


def split_model(model):
    """(trunk, head): the decoder stack returning hidden states, and the output projection.
    A peft model is unwrapped; its LoRA layers live inside the base modules, so they still apply."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    trunk = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    return trunk, base.get_output_embeddings()


def completion_logprobs(model, prompts: list[list[int]], completions: list[list[int]], *, chunk: int = 1024,
                        autocast: bool | str | None = False, with_entropy: bool = False):
    """Log-probs of each completion token given its prompt, packed: a flat tensor of Σ|c_i| values
    in sample order (and the next-token entropies at the same positions if ``with_entropy``).

    ``autocast``: run under bf16 autocast (``None``/``"auto"``: where the device computes bf16
    natively, ``evolver.backends.precision``). Gradients flow when called outside ``no_grad``."""
    dev = next(model.parameters()).device
    lens = [len(p) + len(c) for p, c in zip(prompts, completions)]
    B, T = len(prompts), max(lens)
    ids = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.long)
    rows, cols, targets = [], [], []
    for r, (p, c) in enumerate(zip(prompts, completions)):
        seq = list(p) + list(c)
        ids[r, :len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[r, :len(seq)] = 1
        # position len(p)-1+j predicts completion token j
        rows += [r] * len(c)
        cols += range(len(p) - 1, len(p) - 1 + len(c))
        targets += list(c)
    trunk, head = split_model(model)
    ctx = torch.autocast(dev.type, dtype=torch.bfloat16) if use_autocast(autocast, dev) else contextlib.nullcontext()
    with ctx:
        hidden = trunk(input_ids=ids.to(dev), attention_mask=mask.to(dev),
                       position_ids=torch.arange(T, device=dev).expand(B, T), use_cache=False).last_hidden_state
        picked = hidden[torch.tensor(rows, device=dev), torch.tensor(cols, device=dev)]  # [N, H]
        tgt = torch.tensor(targets, device=dev)
        lps, ents = [], []
        for s in range(0, len(targets), chunk):
            logits = head(picked[s:s + chunk]).float()
            norm = torch.logsumexp(logits, dim=-1)
            lps.append(logits.gather(-1, tgt[s:s + chunk, None]).squeeze(-1) - norm)
            if with_entropy:
                with torch.no_grad():
                    logp_all = logits - norm[:, None]
                    ents.append(-(logp_all.exp() * logp_all).sum(-1))
    empty = torch.zeros(0, device=dev)
    lp = torch.cat(lps) if lps else empty
    if with_entropy:
        return lp, (torch.cat(ents) if ents else empty)
    return lp
