"""Per-token log-probs (and entropies) of completions, without the [batch, seq, vocab] logits.

With SmolLM2's 49,152-token vocabulary the full logits of 8 x 300 tokens are 470 MB in fp32 (more
with their gradient), and they dominate a step's memory. We run the transformer trunk once, gather
the hidden states of the positions that predict a completion token, and apply the LM head to
``chunk`` of those positions at a time. Prompt positions never reach the head at all.

Samples that share a long prompt prefix (an episode's steps share the system prompt, its skills
and the task; a GRPO group shares its whole prompt) run that prefix once: its keys and values,
still in the autograd graph, serve every sample's own rest (``share``). Attention sees exactly what
it would see in a row of its own, so the log-probs and their gradients are the same up to float
rounding, for a fraction of the trunk's work.

Sequences are right-padded; masks come from lengths, never from token values (pad may equal EOS).
"""
from __future__ import annotations

import contextlib
import inspect

import torch
from transformers import DynamicCache

from evolver_transformers import length_groups, use_autocast


def split_model(model):
    """(trunk, head): the decoder stack returning hidden states, and the output projection.
    A peft model is unwrapped; its LoRA layers live inside the base modules, so they still apply."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    trunk = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    return trunk, base.get_output_embeddings()


def _lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def prefix_groups(prompts: list[list[int]], lengths: list[int], share: int) -> list[tuple[int, list[int]]]:
    """Samples cut into (shared prefix length, sample indices). In sorted prompt order a sample joins
    the group before it when they share at least ``share`` tokens and joining lowers the tokens
    computed (a group's prefix once, plus each member's rest; ``lengths`` are whole sequences). A
    prefix leaves every member at least its last prompt token, whose hidden state predicts its first
    completion token. A sample on its own comes back as (0, [i])."""
    def cost(L: int, members: list[int]) -> int:
        return sum(lengths[j] for j in members) - L * (len(members) - 1)

    groups: list[tuple[int, list[int]]] = []  # (prefix length, members); 0 for a single sample
    for i in sorted(range(len(prompts)), key=lambda i: prompts[i]):
        if groups:
            L, members = groups[-1]
            # sorted order: a group's common prefix is the smallest one between neighbours
            L2 = min(_lcp(prompts[members[-1]], prompts[i]), *(len(prompts[j]) - 1 for j in members + [i]))
            L2 = min(L2, L) if len(members) > 1 else L2
            if L2 >= share and cost(L2, members + [i]) < cost(L, members) + lengths[i]:
                groups[-1] = (L2, members + [i])
                continue
        groups.append((0, [i]))
    return groups


def _picked_plain(trunk, prompts, completions, idx, dev) -> dict[int, torch.Tensor]:
    """Hidden states predicting each completion token, for samples ``idx`` in right-padded batches."""
    out: dict[int, torch.Tensor] = {}
    sizes = [len(p) + len(c) for p, c in zip(prompts, completions)]
    for part in length_groups(list(idx), sizes):
        out.update(_rows(trunk, [list(prompts[i]) + list(completions[i]) for i in part],
                         [(i, len(prompts[i]) - 1, len(completions[i])) for i in part], dev))
    return out


def _rows(trunk, rests, picks, dev, kv=None, L: int = 0) -> dict[int, torch.Tensor]:
    """One right-padded forward of ``rests`` after ``L`` prefix tokens whose per-layer (K, V) are
    ``kv`` (None: no prefix); ``picks`` are (sample, first predicting column, count) per row."""
    n, S = len(rests), max(map(len, rests))
    ids = torch.zeros((n, S), dtype=torch.long)
    mask = torch.zeros((n, L + S), dtype=torch.long)
    mask[:, :L] = 1
    for r, s in enumerate(rests):
        ids[r, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[r, L:L + len(s)] = 1
    extra = {}
    if kv is not None:
        cache = DynamicCache()
        for layer, (k, v) in enumerate(kv):  # one prefix for n rows: the update copies it per row
            cache.update(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1), layer)
        extra = {_cache_kw(trunk): cache, "use_cache": True}
    hidden = trunk(input_ids=ids.to(dev), attention_mask=mask.to(dev),
                   position_ids=(L + torch.arange(S, device=dev)).expand(n, S),
                   **({"use_cache": False} | extra)).last_hidden_state
    # column c of a row is position L + c; the position before a completion token predicts it
    return {i: hidden[r, start - L:start - L + count] for r, (i, start, count) in enumerate(picks)}


def _cache_kw(trunk) -> str:
    # transformers 5.2x renamed the forward kwarg ``past_key_values`` to ``cache``
    return "cache" if "cache" in inspect.signature(trunk.forward).parameters else "past_key_values"


def _picked_shared(trunk, prompts, completions, idx, L, dev) -> dict[int, torch.Tensor]:
    """As ``_picked_plain``, with the first ``L`` tokens (the same in every sample of ``idx``) run
    once; the rests go in forwards of similar length against its keys and values."""
    head_ids = torch.tensor([prompts[idx[0]][:L]], dtype=torch.long, device=dev)
    out = trunk(input_ids=head_ids, position_ids=torch.arange(L, device=dev)[None], use_cache=True)
    cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
    if cache is None:  # a model that keeps no cache (gradient checkpointing while training)
        return _picked_plain(trunk, prompts, completions, idx, dev)
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    picked: dict[int, torch.Tensor] = {}
    sizes = [len(p) + len(c) - L for p, c in zip(prompts, completions)]  # the rests
    for part in length_groups(list(idx), sizes):
        picked.update(_rows(trunk, [list(prompts[i][L:]) + list(completions[i]) for i in part],
                            [(i, len(prompts[i]) - 1, len(completions[i])) for i in part], dev, kv, L))
    return picked


def _picked_groups(trunk, prompts, completions, groups, dev) -> dict[int, torch.Tensor]:
    """The hidden states that predict each completion token, per sample: samples alone in rows of their
    own, each group sharing a prompt prefix over that prefix run once (:func:`prefix_groups`)."""
    picked: dict[int, torch.Tensor] = {}
    alone = [g[0] for L, g in groups if not L]
    if alone:
        picked.update(_picked_plain(trunk, prompts, completions, alone, dev))
    for L, g in groups:
        if L:
            picked.update(_picked_shared(trunk, prompts, completions, g, L, dev))
    return picked


def _picked_detached(trunk, prompts, completions, idx, dev) -> dict[int, torch.Tensor]:
    """As ``_picked_plain``, with each prompt but its last token run without a graph: its keys and
    values are constants to the completion, so the backward pass covers only the last prompt token and
    the completion (a few tokens instead of hundreds). The weights still learn how the completion
    reads the prompt, not how the prompt is encoded."""
    out: dict[int, torch.Tensor] = {}
    for i in idx:
        L = len(prompts[i]) - 1
        kv = None
        if L > 0:
            with torch.no_grad():
                res = trunk(input_ids=torch.tensor([prompts[i][:L]], device=dev),
                            position_ids=torch.arange(L, device=dev)[None], use_cache=True)
            cache = res.cache if getattr(res, "cache", None) is not None else res.past_key_values
            kv = [(layer.keys, layer.values) for layer in cache.layers]
        out.update(_rows(trunk, [list(prompts[i][L:]) + list(completions[i])], [(i, L, len(completions[i]))],
                         dev, kv, L))
    return out


def completion_logprobs(model, prompts: list[list[int]], completions: list[list[int]], *, chunk: int = 1024,
                        autocast: bool | str | None = False, with_entropy: bool = False, share: int = 64,
                        detach_prompt: bool = False, masks: list | None = None):
    """Log-probs of each completion token given its prompt, packed: a flat tensor of Σ|c_i| values
    in sample order (and the next-token entropies at the same positions if ``with_entropy``).

    ``autocast``: run under bf16 autocast (``None``/``"auto"``: where the device computes bf16
    natively, ``evolver_transformers.precision``). ``share``: samples sharing a prompt prefix of at least
    this many tokens run it once (0: every sample in its own row). ``detach_prompt``: the prompts' keys
    and values are computed without a graph (:func:`_picked_detached`; the log-probs are the same, the
    gradients reach only what the completion computes). ``masks``: per sample, None or the [len, vocab]
    booleans of the tokens its reply was allowed (a tool call decoded under a grammar): its log-probs are
    then of that masked distribution, as the engine sampled it. Gradients flow when called outside ``no_grad``."""
    dev = next(model.parameters()).device
    trunk, head = split_model(model)
    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    groups = prefix_groups(prompts, lengths, share) if share > 0 and len(prompts) > 1 else \
        [(0, [i]) for i in range(len(prompts))]
    ctx = torch.autocast(dev.type, dtype=torch.bfloat16) if use_autocast(autocast, dev) else contextlib.nullcontext()
    if detach_prompt:
        groups = []
    with ctx:
        picked: dict[int, torch.Tensor] = {}
        if detach_prompt:
            picked.update(_picked_detached(trunk, prompts, completions, range(len(prompts)), dev))
        picked.update(_picked_groups(trunk, prompts, completions, groups, dev))
        if not picked or not sum(map(len, completions)):
            empty = torch.zeros(0, device=dev)
            return (empty, empty) if with_entropy else empty
        hidden = torch.cat([picked[i] for i in range(len(prompts))])  # [N, H], sample order
        tgt = torch.tensor([t for c in completions for t in c], device=dev)
        allowed = flat_masks(masks, completions, dev)
        lps, ents = [], []
        for s in range(0, len(tgt), chunk):
            logits = head(hidden[s:s + chunk]).float()
            if allowed is not None:  # the dtype's floor, not -inf: its gradient stays finite
                logits = logits.masked_fill(~allowed[s:s + chunk, :logits.shape[-1]], torch.finfo(logits.dtype).min)
            norm = torch.logsumexp(logits, dim=-1)
            lps.append(logits.gather(-1, tgt[s:s + chunk, None]).squeeze(-1) - norm)
            if with_entropy:
                with torch.no_grad():
                    logp_all = logits - norm[:, None]
                    ents.append(-(logp_all.exp() * logp_all).sum(-1))
    lp = torch.cat(lps)
    if with_entropy:
        return lp, torch.cat(ents)
    return lp


def flat_masks(masks, completions, dev):
    """The samples' allowed-token masks (each None or [len, vocab] booleans: a reply decoded under a grammar)
    stacked in packed token order, all-true rows for an unmasked sample; None when no sample has one."""
    if not masks or not any(m is not None for m in masks):
        return None
    vocab = next(m.shape[1] for m in masks if m is not None)
    rows = [m.to(dev, torch.bool) if m is not None else torch.ones((len(c), vocab), dtype=torch.bool, device=dev)
            for m, c in zip(masks, completions)]
    return torch.cat(rows)


def completion_hidden(trunk, prompts: list[list[int]], completions: list[list[int]], *, share: int = 64,
                      autocast: bool | str | None = False) -> torch.Tensor:
    """The last hidden states of ``trunk`` (a decoder stack: ``split_model(model)[0]``) that predict
    each completion token, packed [Σ|c_i|, H] in sample order (what
    :func:`completion_logprobs` feeds its LM head)."""
    dev = next(trunk.parameters()).device
    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    groups = prefix_groups(prompts, lengths, share) if share > 0 and len(prompts) > 1 else \
        [(0, [i]) for i in range(len(prompts))]
    ctx = torch.autocast(dev.type, dtype=torch.bfloat16) if use_autocast(autocast, dev) else contextlib.nullcontext()
    hidden_size = trunk.config.hidden_size
    with ctx:
        picked: dict[int, torch.Tensor] = {}
        picked.update(_picked_groups(trunk, prompts, completions, groups, dev))
    if not sum(map(len, completions)):
        return torch.zeros((0, hidden_size), device=dev)
    return torch.cat([picked[i] for i in range(len(prompts))])
