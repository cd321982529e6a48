"""The prompt KV cache of the transformers backend, and the prefill that uses it.

Consecutive steps of an episode repeat the system prompt, the skills and the task, and the episodes
of one evaluation share the system prompt and each game's task text: keeping the KV of recent prompts
and reusing the longest shared prefix skips most of each step's prefill. Prefill is compute-bound on a
CPU (no faster in a batch than one row at a time), so every token not computed here is time saved.

A mixin: the backend supplies ``prefix_cache`` (entries kept, 0 = off), ``_prefixes`` (an
OrderedDict, LRU), ``timing``, ``device``, ``pad_id``, ``autocast``, ``hf_model`` and ``_forward``.
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
        two rows share is one of them, or a part of one). Those that extend no other are computed
        together, in one batch (the task texts of several games), and a longer one after the shorter
        one it extends, so it reuses that KV."""
        if self.prefix_cache <= 0 or len(prompts) < 2:
            return
        shared: set[tuple[int, ...]] = set()
        ordered = sorted(prompts)
        for a, b in zip(ordered, ordered[1:]):
            n = _common_prefix(a, b, min(len(a), len(b)) - 1)  # a row always keeps one token to feed
            if n >= 32:
                shared.add(tuple(a[:n]))
        todo = sorted(shared, key=len)
        while todo:
            level = [p for p in todo if not any(len(q) < len(p) and p[:len(q)] == q for q in todo)]
            todo = [p for p in todo if p not in level]
            # Matched with a pad after the ids (a match may cover all of them); a prefix with fewer
            # than 16 new tokens is not worth computing. The results stay in the prefix cache.
            rows = [(list(p), self._prefix_match(list(p) + [self.pad_id])) for p in level]
            rows = [(ids, m) for ids, m in rows if m[1] < len(ids) - 16]
            if rows:
                self._prefill_rows([ids for ids, _ in rows], [m for _, m in rows])

    def _prefill(self, prompts: list[list[int]], extra: int = 0):
        """Prefill a batch; returns (last logits, cache, attention mask, order).

        Each row reuses the KV of the longest prefix it shares with a recent prompt (an episode's
        steps repeat the system prompt, skills and task), so only its new tokens are computed.
        The cache has room for ``extra`` more tokens per row, written in place as decoding goes.
        Rows come back grouped by how much they computed: row i is ``prompts[order[i]]``.
        Afterwards each row's whole prompt KV joins the prefix cache."""
        self._warm_shared_prefix(prompts)
        return self._prefill_rows(prompts, [self._prefix_match(p) for p in prompts], extra)

    def _prefill_rows(self, prompts: list[list[int]], matches: list[tuple[Any, int]], extra: int = 0):
        """Rows whose new parts differ a lot in length would mostly compute padding (measured on
        twx-easy: 10.7k tokens computed for 7.2k real ones): they prefill in groups of similar length,
        one forward each, all writing into ONE cache buffer that decoding then extends in place. Every
        row lies right-aligned and contiguous in it (a row's prompt ends at the same column E), so the
        forward never concatenates the cache and an entry of the prefix cache is one slice.

        To stay contiguous, a row with fewer new tokens than its group's widest computes the last few
        tokens of its cached prefix again where it would otherwise compute padding: the same work, and
        its own tokens instead of holes."""
        dev, B = self.device, len(prompts)
        news = [len(p) - u for p, (_, u) in zip(prompts, matches)]
        groups = length_groups(list(range(B)), news)
        order = [i for g in groups for i in g]
        E = max(map(len, prompts))
        kv = self._batch_buffers(B, E + extra, masked=E - min(map(len, prompts)))
        logits, lo = None, 0
        for g in groups:
            n = len(g)
            N = max(news[i] for i in g)
            reuse = [min(matches[i][1], max(0, len(prompts[i]) - N)) for i in g]
            U = max(reuse)
            ids = torch.full((n, N), self.pad_id, dtype=torch.long)
            pos = torch.zeros((n, N), dtype=torch.long)
            mask = torch.zeros((n, U + N), dtype=torch.long)
            for k, (i, u) in enumerate(zip(g, reuse)):
                x = prompts[i][u:]
                ids[k, N - len(x):] = torch.tensor(x, dtype=torch.long)
                pos[k, N - len(x):] = torch.arange(u, u + len(x))
                mask[k, U - u:U] = 1
                mask[k, U + N - len(x):] = 1
                if u:
                    for (K, V), (k0, v0) in zip(kv, matches[i][0]):
                        K[lo + k, :, E - N - u:E - N] = k0[0, :, :u]
                        V[lo + k, :, E - N - u:E - N] = v0[0, :, :u]
            view = _cache([(K[lo:lo + n, :, E - N - U:E], V[lo:lo + n, :, E - N - U:E]) for K, V in kv], U)
            out, _ = self._forward(ids.to(dev), mask.to(dev), pos.to(dev), view, logits_to_keep=1)
            if logits is None:
                logits = out.new_empty((B, *out.shape[1:]))
            logits[lo:lo + n] = out
            self.timing["prefill_tokens"] += sum(news[i] for i in g)
            self.timing["prefill_padded"] += n * N
            if self.prefix_cache > 0:
                for k, i in enumerate(g):  # one slice per layer, cloned: an entry must not pin the batch buffer
                    L = len(prompts[i])
                    self._prefix_put(prompts[i], [(K[lo + k:lo + k + 1, :, E - L:E].clone(),
                                                   V[lo + k:lo + k + 1, :, E - L:E].clone()) for K, V in kv])
            lo += n
        mask = torch.zeros((B, E), dtype=torch.long, device=dev)
        for r, i in enumerate(order):
            mask[r, E - len(prompts[i]):] = 1
        return logits, _cache(kv, E), mask, order

    def _batch_buffers(self, B: int, width: int, masked: int) -> list:
        """Per layer, K and V buffers [B, kv heads, width, head dim]; the first ``masked`` columns (the
        only ones a row may leave unwritten, hidden by the mask) are zeroed, since a masked column still
        enters attention as 0 x value and 0 x NaN is NaN. Under bf16 autocast keys are stored as bf16
        like the values: they come out of RoPE as fp32, but attention casts them to bf16 anyway (the
        same rounding, done once, in two thirds of the memory)."""
        into = getattr(self, "kv_buffers_into", None)
        if into is not None:  # the static decoder's buffers (``static_decode.py``)
            return into(B, width, masked)
        cfg = self.hf_model.config
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype = torch.bfloat16 if self.autocast else torch.float32
        out = []
        for _ in range(cfg.num_hidden_layers):
            k, v = (torch.empty((B, heads, width, dim), dtype=dtype, device=self.device) for _ in "kv")
            k[:, :, :masked].zero_()
            v[:, :, :masked].zero_()
            out.append((k, v))
        return out

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
    """A layer's KV in preallocated buffers ``k``/``v`` [batch, heads, capacity, dim] whose first
    ``n`` columns are filled; ``keys``/``values`` are views of the filled part, and new tokens are
    written into the buffers instead of concatenated (HF's DynamicLayer copies the whole cache on
    every token: 17% of a 12-row decode here)."""

    def __init__(self, k, v, n: int):
        super().__init__()
        self._k, self._v = k, v
        self.keys, self.values = k[..., :n, :], v[..., :n, :]
        self.device, self.is_initialized = k.device, True

    def update(self, key_states, value_states, *args, **kwargs):
        n, m = self.keys.shape[-2], key_states.shape[-2]
        if n + m > self._k.shape[-2]:  # past the buffer: grow as a plain layer does
            return super().update(key_states, value_states, *args, **kwargs)
        self._k[..., n:n + m, :] = key_states
        self._v[..., n:n + m, :] = value_states
        self.keys, self.values = self._k[..., :n + m, :], self._v[..., :n + m, :]
        return self.keys, self.values


def _cache(buffers: list, n: int) -> DynamicCache:
    """A cache over per-layer (K, V) buffers whose first ``n`` columns are filled."""
    cache = DynamicCache()
    cache.layers = [_Reserved(k, v, n) for k, v in buffers]
    return cache


def length_groups(rows: list[int], sizes: list[int]) -> list[list[int]]:
    """``rows`` cut (by ``split_by_length``) into groups of similar ``sizes``, shortest first."""
    cut = split_by_length([sizes[i] for i in rows], slack=1.15)
    if cut is None:
        return [rows]
    return [g for part in cut for g in length_groups([rows[j] for j in part], sizes)]
