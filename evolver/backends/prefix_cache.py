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
        news = [len(p) - n for p, (_, n) in zip(prompts, matches)]
        if len(prompts) < 2 or len(prompts) * max(news) <= 1.15 * sum(news):
            return self._prefill_rows(prompts, matches)
        order = sorted(range(len(prompts)), key=news.__getitem__)
        lens = [news[i] for i in order]
        # the cut into [shorter][longer] that computes the fewest tokens, padding included
        cut = min(range(1, len(order)), key=lambda k: k * lens[k - 1] + (len(order) - k) * lens[-1])
        parts = []
        for idx in (order[:cut], order[cut:]):
            parts.append((idx, self._prefill_split([prompts[i] for i in idx], [matches[i] for i in idx])))
        return _merge_prefills(parts, len(prompts))

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
                kv = [(torch.cat([layer.keys[r:r + 1, :, U - u:U], layer.keys[r:r + 1, :, T - len(x):T]], dim=2).clone(),
                       torch.cat([layer.values[r:r + 1, :, U - u:U], layer.values[r:r + 1, :, T - len(x):T]], dim=2).clone())
                      for layer in cache.layers]
                self._prefix_put(prompts[r], kv)
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
        from transformers import DynamicCache

        past = DynamicCache()
        first = next(kv for kv, _ in matches if kv is not None)
        for layer, (k0, v0) in enumerate(first):
            K = k0.new_zeros((len(matches), k0.shape[1], U, k0.shape[3]))
            V = k0.new_zeros((len(matches), v0.shape[1], U, v0.shape[3]))
            for r, (kv, u) in enumerate(matches):
                if kv is not None:
                    k, v = kv[layer]
                    K[r, :, U - u:] = k[0, :, :u].to(K.dtype)
                    V[r, :, U - u:] = v[0, :, :u].to(V.dtype)
            past.update(K, V, layer)
        return past

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


def _merge_prefills(parts, B: int):
    """One batch from prefills of disjoint row groups (``(row indices, (logits, cache, mask))``): each
    group's cache and mask right-aligned to the widest, zeros (masked) before."""
    from transformers import DynamicCache

    W = max(mask.shape[1] for _, (_, _, mask) in parts)
    logits0, cache0, mask0 = parts[0][1]
    logits = logits0.new_empty((B, *logits0.shape[1:]))
    mask = mask0.new_zeros((B, W))
    cache = DynamicCache()
    for layer in range(len(cache0.layers)):
        k0, v0 = cache0.layers[layer].keys, cache0.layers[layer].values
        K = k0.new_zeros((B, k0.shape[1], W, k0.shape[3]))
        V = v0.new_zeros((B, v0.shape[1], W, v0.shape[3]))  # under autocast K and V may differ in dtype
        for idx, (_, c, m) in parts:
            rows = torch.tensor(idx, device=k0.device)
            K[rows, :, W - m.shape[1]:] = c.layers[layer].keys.to(K.dtype)
            V[rows, :, W - m.shape[1]:] = c.layers[layer].values.to(V.dtype)
        cache.update(K, V, layer)
    for idx, (lg, _, m) in parts:
        rows = torch.tensor(idx, device=mask.device)
        logits[rows] = lg
        mask[rows, W - m.shape[1]:] = m
    return logits, cache, mask
