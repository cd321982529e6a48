"""The prompt KV cache of the transformers backend, and the prefill that uses it.

Consecutive steps of an episode repeat the system prompt, the skills and the task, and the episodes
of one evaluation share the system prompt and each game's task text: keeping the KV of recent prompts
and reusing the longest shared prefix skips most of each step's prefill. Prefill is compute-bound on a
CPU (no faster in a batch than one row at a time), so every token not computed here is time saved.

A mixin: the backend supplies ``prefix_cache`` (entries kept, 0 = off), ``_prefixes`` (an
OrderedDict, LRU), ``timing``, ``device``, ``pad_id`` and ``_forward``.
"""
from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class PrefixCache:
    def _warm_shared_prefix(self, prompts: list[list[int]]) -> None:
        """Rows of a batch often share prefixes nobody has cached yet: the system prompt and skills of
        one program's episodes, and beyond it the task text of episodes of one game. Compute each once,
        so every row reuses it instead of each computing its own copy (measured on twx-easy: 12 first
        steps prefilled 12 system prompts, then two copies of each game's task text).

        The prefixes are the longest common prefixes of neighbours in sorted order (every prefix that
        two rows share is one of them, or a part of one), computed shortest first so a longer one
        reuses a shorter one's KV."""
        if self.prefix_cache <= 0 or len(prompts) < 2:
            return
        shared: set[tuple[int, ...]] = set()
        ordered = sorted(prompts)
        for a, b in zip(ordered, ordered[1:]):
            n = _common_prefix(a, b, min(len(a), len(b)) - 1)  # a row always keeps one token to feed
            if n >= 32:
                shared.add(tuple(a[:n]))
        for prefix in sorted(shared, key=len):
            ids = list(prefix)
            kv, u = self._prefix_match(ids + [self.pad_id])  # the pad: a match may cover all of ids
            if u < len(ids) - 16:  # (fewer new tokens are not worth a forward)
                self._prefill_rows([ids], [(kv, u)])

    def _prefill(self, prompts: list[list[int]]):
        """One forward over the prompts of a batch; returns (last logits, cache, attention mask).

        Each row reuses the KV of the longest prefix it shares with a recent prompt (an episode's
        steps repeat the system prompt, skills and task), so only its new tokens are computed.
        Afterwards each row's whole prompt KV joins the prefix cache."""
        self._warm_shared_prefix(prompts)
        return self._prefill_split(prompts, [self._prefix_match(p) for p in prompts])

    def _prefill_split(self, prompts: list[list[int]], matches: list[tuple[Any, int]]):
        """Rows whose new parts differ a lot in length would mostly compute padding (measured on
        twx-easy: 10.7k tokens computed for 7.2k real ones): prefill them in groups of similar length,
        then merge the groups' caches into one batch for decoding."""
        groups = split_by_length([len(p) - n for p, (_, n) in zip(prompts, matches)], slack=1.15)
        if groups is None:
            return self._prefill_rows(prompts, matches)
        B = len(prompts)
        parts = [(idx, *self._prefill_split([prompts[i] for i in idx], [matches[i] for i in idx]))
                 for idx in groups]
        W = max(m.shape[1] for *_, m in parts)  # each group's cache and mask right-aligned to the widest
        cache = _right_aligned([(idx, [(layer.keys, layer.values) for layer in c.layers]) for idx, _, c, _ in parts],
                               B, W)
        logits = parts[0][1].new_empty((B, *parts[0][1].shape[1:]))
        mask = parts[0][3].new_zeros((B, W))
        for idx, lg, _, m in parts:
            logits[idx] = lg
            mask[idx, W - m.shape[1]:] = m
        return logits, cache, mask

    def _prefill_rows(self, prompts: list[list[int]], matches: list[tuple[Any, int]]):
        """One forward. A row is laid out as [pad][cached prefix][pad][new tokens], right-aligned in
        both parts, with explicit positions; the mask hides the pads, so rows never see each other or
        the holes."""
        dev, B = self.device, len(prompts)
        reuse = [n for _, n in matches]
        U = max(reuse)
        news = [p[n:] for p, n in zip(prompts, reuse)]
        N = max(len(x) for x in news)
        ids = torch.full((B, N), self.pad_id, dtype=torch.long)
        new_mask = torch.zeros((B, N), dtype=torch.long)
        pos = torch.zeros((B, N), dtype=torch.long)
        for r, (x, u) in enumerate(zip(news, reuse)):
            ids[r, N - len(x):] = torch.tensor(x, dtype=torch.long)
            new_mask[r, N - len(x):] = 1
            pos[r, N - len(x):] = torch.arange(u, u + len(x))
        past, past_mask = self._past_of(matches), torch.zeros((B, U), dtype=torch.long)
        for r, u in enumerate(reuse):
            past_mask[r, U - u:] = 1
        mask = torch.cat([past_mask, new_mask], dim=1).to(dev)
        logits, cache = self._forward(ids.to(dev), mask, pos.to(dev), past, logits_to_keep=1)
        self.timing["prefill_tokens"] += sum(len(x) for x in news)
        self.timing["prefill_padded"] += B * N
        if self.prefix_cache > 0 and cache is not None:
            T = U + N
            for r, (x, u) in enumerate(zip(news, reuse)):
                self._prefix_put(prompts[r], row_kv(cache, r, slice(U - u, U), slice(T - len(x), T)))
        return logits, cache, mask

    def _prefix_match(self, prompt: list[int]) -> tuple[Any, int]:
        """The KV of the cached prompt sharing the longest prefix with ``prompt`` (at least 32 tokens),
        and that length; always leaves one prompt token to feed. The KV itself, not its key: prompts
        cached later in the same batch may evict the entry."""
        if self.prefix_cache <= 0:
            return None, 0
        best, best_len = None, 0
        ids = torch.tensor(prompt)
        for key, (cached_ids, _kv) in self._prefixes.items():
            n = min(len(cached_ids), len(prompt) - 1)
            if n <= best_len:
                continue
            same = int((cached_ids[:n] == ids[:n]).int().cumprod(0).sum())
            if same > best_len:
                best, best_len = key, same
        if best is None or best_len < 32:
            return None, 0
        self._prefixes.move_to_end(best)
        return self._prefixes[best][1], best_len

    def _past_of(self, matches: list[tuple[Any, int]]):
        """A batch cache from each row's cached prefix (``_prefix_match`` results), right-aligned to the
        longest: row r's KV fills the last ``u_r`` positions, zeros before (masked by the caller).
        None when no row reuses anything."""
        U = max((u for _, u in matches), default=0)
        if not U:
            return None
        return _right_aligned([([r], [(k[:, :, :u], v[:, :, :u]) for k, v in kv])
                               for r, (kv, u) in enumerate(matches) if kv is not None], len(matches), U)

    def _prefix_put(self, prompt: list[int], kv: list) -> None:
        self._prefixes[tuple(prompt)] = (torch.tensor(prompt), kv)
        self._prefixes.move_to_end(tuple(prompt))
        while len(self._prefixes) > self.prefix_cache:
            self._prefixes.popitem(last=False)


def _common_prefix(a: list[int], b: list[int], limit: int) -> int:
    n = 0
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def split_by_length(sizes: list[int], slack: float) -> tuple[list[int], list[int]] | None:
    """Rows of very different lengths padded to one width would mostly compute padding: None when the
    padded total stays within ``slack`` times the real one, else the cut into [shorter][longer] rows
    (indices) that computes the fewest tokens, padding included. Callers recurse on each part."""
    if len(sizes) < 2 or len(sizes) * max(sizes) <= slack * sum(sizes):
        return None
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    lens = [sizes[i] for i in order]
    cut = min(range(1, len(order)), key=lambda k: k * lens[k - 1] + (len(order) - k) * lens[-1])
    return order[:cut], order[cut:]


def row_kv(cache, r: int, past: slice, new: slice) -> list:
    """Row ``r``'s KV, per layer, from the columns of its cached prefix and of its new tokens: what
    the prefix cache keeps of one prompt of a batch forward. Keys are kept in the values' dtype: under
    bf16 autocast they come out fp32, but attention casts them to bf16 before use, so bf16 keys give
    the same results in two thirds of the memory."""
    return [(torch.cat([layer.keys[r:r + 1, :, past], layer.keys[r:r + 1, :, new]], dim=2).to(layer.values.dtype),
             torch.cat([layer.values[r:r + 1, :, past], layer.values[r:r + 1, :, new]], dim=2))
            for layer in cache.layers]  # torch.cat copies: an entry never aliases the batch's cache


def _right_aligned(pieces, B: int, W: int):
    """A batch cache of ``B`` rows and width ``W`` from ``pieces``: (rows, per-layer (K, V) of those
    rows), each right-aligned, zeros (masked by the caller) before."""
    cache = DynamicCache()
    for layer, (k0, v0) in enumerate(pieces[0][1]):
        K = k0.new_zeros((B, k0.shape[1], W, k0.shape[3]))
        V = v0.new_zeros((B, v0.shape[1], W, v0.shape[3]))  # under autocast K and V may differ in dtype
        for rows, kv in pieces:
            k, v = kv[layer]
            K[rows, :, W - k.shape[2]:] = k.to(K.dtype)
            V[rows, :, W - v.shape[2]:] = v.to(V.dtype)
        cache.update(K, V, layer)
    return cache


class _Reserved(DynamicLayer):
    """A layer's KV in a buffer with room for ``extra`` more tokens; ``keys``/``values`` are views of
    the filled part, and each new token is written into the buffer instead of concatenated."""

    def __init__(self, keys, values, extra: int):
        super().__init__()
        n = keys.shape[-2]
        # Under bf16 autocast keys come out fp32 and values bf16, and attention casts the whole
        # key cache to bf16 on every token: store it as bf16 once (the same rounding, done once).
        self._k = keys.new_empty((*keys.shape[:-2], n + extra, keys.shape[-1]), dtype=values.dtype)
        self._v = values.new_empty((*values.shape[:-2], n + extra, values.shape[-1]))
        self._k[..., :n, :], self._v[..., :n, :] = keys, values
        self.keys, self.values = self._k[..., :n, :], self._v[..., :n, :]
        self.device, self.is_initialized = keys.device, True

    def update(self, key_states, value_states, *args, **kwargs):
        n, m = self.keys.shape[-2], key_states.shape[-2]
        if n + m > self._k.shape[-2]:  # past the reserve: grow as a plain layer does
            return super().update(key_states, value_states, *args, **kwargs)
        self._k[..., n:n + m, :] = key_states
        self._v[..., n:n + m, :] = value_states
        self.keys, self.values = self._k[..., :n + m, :], self._v[..., :n + m, :]
        return self.keys, self.values


def reserve(cache, extra: int):
    """``cache`` with room for ``extra`` more tokens per layer, written in place as decoding goes: a
    plain DynamicCache concatenates the whole cache on every token (17% of a 12-row decode here)."""
    if type(getattr(cache, "layers", None)) is list and all(type(l) is DynamicLayer and l.is_initialized
                                                          for l in cache.layers):
        cache.layers = [_Reserved(layer.keys, layer.values, extra) for layer in cache.layers]
    return cache
