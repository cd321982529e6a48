"""Decoding on a GPU at the speed of its kernels: a static KV cache and one CUDA graph per batch bucket.

On a GPU, decoding a small model (SmolLM2-135M) one token per forward is bound by kernel launches, not
by the chip: the hand-written loop (``backend.py``) spends its step in Python and ~600 launches, and
made 3,056 tokens/s at batch 128 on an H200 where the weights are read in a tenth of a millisecond.
Here a decode step has static shapes, so it is captured once per (batch bucket, cache width) as a CUDA
graph and replayed:

- **Static KV buffers**: per layer K and V [bucket, kv heads, width, head dim], allocated once per
  (bucket, width) with buckets 1/8/32/64/128/256 rows and widths in steps of 128 columns. The prefill
  (``prefix_cache._prefill_rows``, unchanged, prompt prefixes reused) writes the prompts right-aligned
  so every row's prompt ends at column ``E``; decode step ``t`` writes every row's token at column
  ``E + t``, so one column index, a device scalar, serves the whole batch.
- **The step** calls the model's own modules (embedding, rotary embedding, decoder layers, norm, head)
  with a cache whose ``update`` writes that column in place (``index_copy_``) and a boolean mask built
  on the device from each row's first column; then picks the next token and its log-prob on the device
  (below). Inputs (the fed token, the step counter) live in the state's buffers and the step advances
  them itself, so replays need nothing from the host.
- **The host** replays ``SYNC_EVERY`` steps, copies their tokens and log-probs out asynchronously
  (pinned memory, an event) and, while the next steps run, ends rows as the loop does (EOS, token
  limit, stop strings, repeated lines). A finished row keeps decoding junk nobody reads (rows never
  attend to each other); unused rows of a bucket attend only to their own column.
- **Weights** are read from the parameters' storage, so an optimizer step or ``load_state_dict``
  (both in place) is seen by the next replay without a new capture; under bf16 autocast the cached
  bf16 copies (``bf16_weights.py``) are refreshed in place before each call. A new module or tensor
  (a LoRA wrapper, ``.to()``) changes the model's signature and the graphs are captured again.

Sampling: an exact draw from ``softmax(logits / temperature)`` by inverse CDF, with a uniform per
(request seed, reply position) from a counter-based hash (splitmix64) computed on the host, so a seed
gives the same sample whatever else is in the batch and whatever the device, up to rounding of the
logits. It is not the loop's stream (``Race``), so a seed samples differently on the two paths; greedy
text and log-probs are the same. Log-probs are of the raw logits at temperature 1, as on the loop.

With ``graphs=False`` the same step runs eagerly (the ``"static"`` decode mode): the CPU tests check it
against the loop, and the GPU check times it beside the graphs.
"""
from __future__ import annotations

import inspect
import logging
import time
from collections import OrderedDict, deque
from typing import Any

import numpy as np
import torch

from evolver import BackendError

log = logging.getLogger(__name__)

BUCKETS = (1, 8, 32, 64, 128, 256)
WIDTH_STEP = 128
#: Steps replayed between two reads of their tokens: at most about twice this many steps run past the
#: point where every row has finished.
SYNC_EVERY = 8
SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")


def why_unsupported(model) -> str | None:
    """None if the static decoder can run ``model``, else why not (it then decodes with the loop)."""
    cfg = model.config
    if cfg.model_type not in SUPPORTED:
        return f"model type {cfg.model_type!r} (static decoding supports {', '.join(SUPPORTED)})"
    if getattr(cfg, "sliding_window", None) is not None and getattr(cfg, "use_sliding_window", True):
        return "sliding-window attention"
    if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or []):
        return "layers other than full attention"
    if getattr(cfg, "_attn_implementation", None) not in ("evolver_gqa_sdpa", "sdpa"):
        return f"attention implementation {getattr(cfg, '_attn_implementation', None)!r}"
    base = getattr(model, "model", None)
    if base is None or not all(hasattr(base, n) for n in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return "not a decoder of the Llama layout (embed_tokens, layers, norm, rotary_emb)"
    rope = str(getattr(base.rotary_emb, "rope_type", "default"))
    if "dynamic" in rope or rope == "longrope":
        return f"rope type {rope!r} (its frequencies depend on the length)"
    if model.get_output_embeddings() is None:
        return "no output embeddings"
    return None


def bucket_of(n: int) -> int:
    for b in BUCKETS:
        if n <= b:
            return b
    return -(-n // 128) * 128


def uniforms(seed: int, n: int) -> np.ndarray:
    """The uniforms in (0, 1) of reply positions 0 .. n-1 of a request seeded ``seed``: splitmix64 of
    the mixed seed plus the position times the golden ratio, its top 23 bits, as float32 (exactly
    representable, never 0 or 1)."""
    m = np.uint64

    def mix(x):
        x = (x ^ (x >> m(30))) * m(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> m(27))) * m(0x94D049BB133111EB)
        return x ^ (x >> m(31))
    with np.errstate(over="ignore"):
        key = mix(np.array([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
        x = mix(key + np.arange(1, n + 1, dtype=np.uint64) * m(0x9E3779B97F4A7C15))
    return (((x >> m(41)) * m(2) + m(1)).astype(np.float64) / 2.0 ** 24).astype(np.float32)


def pick(logits: torch.Tensor, temps: torch.Tensor, u: torch.Tensor):
    """Next tokens [B] and their log-probs at temperature 1 from ``logits`` [B, V]: the argmax where
    ``temps`` is 0, else the inverse-CDF draw of uniform ``u`` from softmax(logits / temperature)."""
    logits = logits.float()
    lse = torch.logsumexp(logits, dim=-1)
    greedy = logits.argmax(dim=-1)
    hot = temps > 0
    scaled = logits / torch.where(hot, temps, torch.ones_like(temps))[:, None]
    cdf = scaled.softmax(dim=-1).cumsum(dim=-1)
    drawn = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None]).squeeze(1).clamp_max(logits.shape[-1] - 1)
    tok = torch.where(hot, drawn, greedy)
    return tok, logits.gather(-1, tok[:, None]).squeeze(1) - lse


class _Columns:
    """The cache a decoder layer sees during a step: ``update`` writes the step's keys and values at
    column ``col`` of the layer's static buffers and returns the whole buffers (the mask hides what a
    row may not see)."""

    def __init__(self, kv: list, col: torch.Tensor):
        self.kv, self.col = kv, col

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        K, V = self.kv[layer_idx]
        K.index_copy_(2, self.col, key_states.to(K.dtype))
        V.index_copy_(2, self.col, value_states.to(V.dtype))
        return K, V


class _State:
    """One (bucket, width): KV buffers, the step's inputs and outputs, and its graph once captured."""

    def __init__(self, B: int, W: int, model, kv_dtype, dev):
        cfg = model.config
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads

        def z(*shape, dtype=torch.long):
            return torch.zeros(shape, dtype=dtype, device=dev)
        # zeroed once: a masked column still enters attention as 0 x value, and 0 x NaN is NaN
        self.kv = [(z(B, heads, W, dim, dtype=kv_dtype), z(B, heads, W, dim, dtype=kv_dtype))
                   for _ in range(cfg.num_hidden_layers)]
        self.B, self.W = B, W
        self.tok, self.t, self.end, self.col = z(B), z(1), z(1), z(1)
        self.start, self.pos0 = z(B), z(B)
        self.temps, self.u = z(B, dtype=torch.float32), z(B, W, dtype=torch.float32)
        self.out_tok, self.out_lp = z(B, W), z(B, W, dtype=torch.float32)
        self.cols = torch.arange(W, device=dev)
        self.graph: Any = None
        self.keep: list = []  # tensors the graph reads that nothing else may free (bf16 weight copies)
        self.nbytes = sum(k.nbytes + v.nbytes for k, v in self.kv) + self.u.nbytes * 3


class StaticDecoder:
    """The static decode path of a :class:`~evolver_transformers.backend.TransformersBackend` (its
    prefill, prefix cache, stop rules and results; ``generate_chunk`` replaces its loop for a chunk)."""

    def __init__(self, backend, graphs: bool, compile: bool = False):
        self.b = backend
        self.graphs = graphs
        #: ``compile``: the step through ``torch.compile`` (inductor fuses its elementwise kernels) before
        #: the capture; a second shape compiles it again with dynamic sizes, later ones reuse that.
        self._step = torch.compile(self._step_eager) if compile else self._step_eager
        self.error: str | None = None  # why graphs were given up (decoding then runs the step eagerly)
        self.states: OrderedDict = OrderedDict()
        self._signature: Any = None
        layer = backend.hf_model.model.layers[0]
        params = inspect.signature(layer.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        dev = backend.device
        if dev.type == "cuda":
            total = torch.cuda.get_device_properties(dev).total_memory
            self.budget = max(2 << 30, total // 4)  # bytes of static buffers kept across calls
        else:
            self.budget = 2 << 30

    # ---------------------------------------------------------------------------------- states
    def _model_signature(self):
        m = self.b.hf_model
        return (tuple(map(id, m.modules())), tuple((id(p), p.data_ptr(), p.dtype) for p in m.parameters()),
                self.b.autocast, str(self.b.device))

    def _prepare(self) -> None:
        """Before a call: a changed model drops every state (their graphs hold old modules); bf16 weight
        copies that an update made stale are refreshed in place, where the graphs read them."""
        sig = self._model_signature()
        if sig != self._signature:
            self.release()
            self._signature = sig
        if self.b.autocast:
            from evolver_transformers.bf16_weights import refresh_bf16_copies

            refresh_bf16_copies(self.b.hf_model)

    def release(self) -> None:
        self.states.clear()

    def _state(self, B: int, W: int) -> _State:
        key = (B, W)
        st = self.states.get(key)
        if st is not None:
            self.states.move_to_end(key)
            return st
        cfg = self.b.hf_model.config
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        need = 2 * cfg.num_hidden_layers * B * heads * W * dim * (2 if self.b.autocast else 4)
        while self.states and sum(s.nbytes for s in self.states.values()) + need > self.budget:
            self.states.popitem(last=False)  # the least recently used first
        st = _State(B, W, self.b.hf_model, torch.bfloat16 if self.b.autocast else torch.float32, self.b.device)
        self.states[key] = st
        if self.graphs:
            self._capture(st)
        return st

    def _ctx(self):
        """No grad and, under bf16, autocast without its weight cache (required while capturing a graph;
        the linear layers keep their own bf16 copies anyway)."""
        import contextlib

        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())
        if self.b.autocast:
            stack.enter_context(torch.autocast(self.b.device.type, dtype=torch.bfloat16, cache_enabled=False))
        return stack

    def _capture(self, st: _State) -> None:
        """Capture one step of ``st`` as a CUDA graph; on any failure say so once and go on eagerly."""
        dev = self.b.device
        t0 = time.perf_counter()
        try:
            side = torch.cuda.Stream(device=dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side), self._ctx():
                for _ in range(2):  # warm up (allocator, kernels, bf16 copies) on a side stream
                    self._park(st)
                    self._step(st)
            torch.cuda.current_stream(dev).wait_stream(side)
            self._park(st)
            graph = torch.cuda.CUDAGraph()
            with self._ctx(), torch.cuda.graph(graph):
                self._step(st)
            st.graph = graph
            from evolver_transformers.bf16_weights import cached_copies

            st.keep = cached_copies(self.b.hf_model)
            self.b.timing["graph_captures"] += 1
            self.b.timing["graph_capture_s"] += time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - a failed capture must not fail generation: go on eagerly
            self.graphs = False
            self._step = self._step_eager
            self.error = f"{type(exc).__name__}: {exc}"
            self.b.timing["graph_failures"] += 1
            log.warning("CUDA graph capture failed (%s); decoding without graphs", self.error)
            st.graph = None

    @staticmethod
    def _park(st: _State) -> None:
        """Point the step at the last column (no decode step writes there) before warm-up or capture."""
        st.t.zero_()
        st.end.fill_(st.W - 1)
        st.start.fill_(st.W)
        st.temps.zero_()

    # ------------------------------------------------------------------------------------ step
    def _step_eager(self, st: _State) -> None:
        """One token for every row of ``st``: feed ``st.tok`` at column ``end + t``, write the picked
        token and its log-prob at reply position ``t + 1``, advance ``t``. Static shapes, no host sync."""
        m = self.b.hf_model
        base = m.model
        torch.add(st.end, st.t, out=st.col)
        t1 = st.t + 1
        pos = (st.pos0 + st.t)[:, None]
        seen = ((st.cols >= st.start[:, None]) & (st.cols <= st.col)) | (st.cols == st.col)
        mask = seen[:, None, None, :]
        x = base.embed_tokens(st.tok[:, None])
        pe = base.rotary_emb(x, pos)
        cache = _Columns(st.kv, st.col)
        for layer in base.layers:
            out = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=pe, use_cache=True,
                        **{self._cache_kw: cache})
            x = out[0] if isinstance(out, tuple) else out
        logits = m.get_output_embeddings()(base.norm(x))[:, -1]
        tok, lp = pick(logits, st.temps, st.u.index_select(1, t1).squeeze(1))
        st.tok.copy_(tok)
        st.out_tok.index_copy_(1, t1, tok[:, None])
        st.out_lp.index_copy_(1, t1, lp[:, None])
        st.t.add_(1)

    def _run(self, st: _State, n: int) -> None:
        if st.graph is not None:
            for _ in range(n):
                st.graph.replay()
        else:
            with self._ctx():
                for _ in range(n):
                    self._step(st)

    # -------------------------------------------------------------------------------- generate
    def generate_chunk(self, chunk) -> list:
        """Like the backend's ``_generate_chunk``: ``chunk`` is (index, request, prompt ids, token limit)."""
        b, dev = self.b, self.b.device
        n = len(chunk)
        longest = max(item[3] for item in chunk)
        prompts = [item[2] for item in chunk]
        E = max(map(len, prompts))
        self._prepare()
        st = self._state(bucket_of(n), -(-(E + longest) // WIDTH_STEP) * WIDTH_STEP)
        B = st.B
        t0 = time.perf_counter()
        with b._ctx():
            b._warm_shared_prefix(prompts)
            matches = [b._prefix_match(p) for p in prompts]
            b.kv_buffers_into = lambda rows, width, masked: self._prefill_buffers(st, rows, masked)
            try:
                logits, _, _, order = b._prefill_rows(prompts, matches)
            finally:
                b.kv_buffers_into = None
        t1 = time.perf_counter()
        chunk = [chunk[i] for i in order]
        reqs = [item[1] for item in chunk]
        prompts = [item[2] for item in chunk]
        limits = [item[3] for item in chunk]
        seeds = [None if r.temperature <= 0 else (r.seed if r.seed is not None else int(torch.randint(0, 2**62, (1,))))
                 for r in reqs]
        u = np.zeros((n, longest), dtype=np.float32)
        for r, s in enumerate(seeds):
            if s is not None:
                u[r] = uniforms(s, longest)
        st.u[:n, :longest].copy_(torch.from_numpy(u))
        st.temps.zero_()
        st.temps[:n].copy_(torch.tensor([max(0.0, float(r.temperature)) for r in reqs]))
        st.start.fill_(st.W)  # unused rows see only their own column
        st.start[:n].copy_(torch.tensor([E - len(p) for p in prompts]))
        st.pos0.zero_()
        st.pos0[:n].copy_(torch.tensor([len(p) for p in prompts]))
        st.t.zero_()
        st.end.fill_(E)
        with self._ctx():
            tok0, lp0 = pick(logits[:, -1], st.temps[:n], st.u[:n, 0])
        st.tok.fill_(b.pad_id)
        st.tok[:n].copy_(tok0)
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        done = [False] * n
        self._emit([[t] for t in tok0.tolist()], [[x] for x in lp0.tolist()], reqs, limits, out_ids, out_lp, done)
        steps_max, launched, forwards = longest - 1, 0, 0
        inflight: deque = deque()
        cuda = dev.type == "cuda"
        while not all(done) and (launched < steps_max or inflight):
            while len(inflight) < 2 and launched < steps_max:
                k = min(SYNC_EVERY, steps_max - launched)
                self._run(st, k)
                a = launched + 1
                launched += k
                forwards += k
                toks, lps = st.out_tok[:n, a:a + k], st.out_lp[:n, a:a + k]
                if cuda:
                    ht = torch.empty(toks.shape, dtype=toks.dtype, pin_memory=True)
                    hl = torch.empty(lps.shape, dtype=lps.dtype, pin_memory=True)
                    ht.copy_(toks, non_blocking=True)
                    hl.copy_(lps, non_blocking=True)
                    ev = torch.cuda.Event()
                    ev.record()
                else:
                    ht, hl, ev = toks.clone(), lps.clone(), None
                inflight.append((ht, hl, ev))
            ht, hl, ev = inflight.popleft()
            if ev is not None:
                ev.synchronize()
            self._emit(ht.tolist(), hl.tolist(), reqs, limits, out_ids, out_lp, done)
        if cuda:
            torch.cuda.current_stream(dev).synchronize()  # the steps still queued past the end
        b.timing.update(prefill_s=t1 - t0, decode_s=time.perf_counter() - t1, decode_steps=forwards)
        if st.graph is not None:
            b.timing["graph_replays"] += forwards
        results: list = [None] * n
        for r, i in enumerate(order):
            results[i] = b._result(reqs[r], prompts[r], out_ids[r], out_lp[r])
        return results

    @staticmethod
    def _prefill_buffers(st: _State, rows: int, masked: int) -> list:
        """The state's buffers as the prefill's batch buffers (``PrefixCache._batch_buffers``)."""
        out = []
        for K, V in st.kv:
            K[:rows, :, :masked].zero_()
            V[:rows, :, :masked].zero_()
            out.append((K[:rows], V[:rows]))
        return out

    def _emit(self, toks, lps, reqs, limits, out_ids, out_lp, done) -> None:
        """Append each live row's tokens, ending it as the loop's ``_accept`` does. Stop strings are
        looked for once in the text of a row's new tokens (and the tail before them) and token by token
        only where one is there: decoding a tail per token per row made long batches host-bound."""
        b = self.b
        for r, (row_t, row_l) in enumerate(zip(toks, lps)):
            if done[r]:
                continue
            ids, req = out_ids[r], reqs[r]
            stop = req.stop
            if stop and len(row_t) > 1:
                tail = 4 * max(len(x) for x in stop) + 4
                text = b.tokenizer.decode(ids[len(ids) - tail + 1:] + row_t, skip_special_tokens=True)
                stop = stop if any(x and x in text for x in stop) else None
            for tok, lp in zip(row_t, row_l):
                ids.append(tok)
                out_lp[r].append(lp)
                if (tok in b.eos_ids or len(ids) >= limits[r] or b._stop_hit(ids, stop)
                        or b._looping(ids, req.max_line_repeats)):
                    done[r] = True
                    break


class StaticDecoding:
    """The backend's choice of decode path (mixed into ``TransformersBackend``, which sets ``decode``,
    ``decode_error``, ``_static``, ``sample_device`` and ``timing`` and decodes with ``_loop_chunk``):
    the static decoder where it applies, falling back to the loop, said out loud, when it cannot."""

    def _static_decoder(self):
        """The static decoder when this call should use it, else None (the loop decodes)."""
        if self.decode == "loop" or self.sample_device != "model":
            return None
        if self._static is None:
            why = why_unsupported(self.hf_model)
            if why:
                self.decode_error = f"static decoding off: {why}"
                log.info("%s; the loop decodes", self.decode_error)
                self.decode = "loop"
                return None
            self._static = StaticDecoder(self, graphs=self.decode in ("graphs", "compiled"),
                                         compile=self.decode == "compiled")
        return self._static

    @property
    def decode_path(self) -> str:
        """What decodes now: ``"graphs"``, ``"static"`` (eager, or graphs given up) or ``"loop"``."""
        if self.decode == "loop" or self._static is None:
            return self.decode  # (before the first call: what it will try)
        if not self._static.graphs:
            return "static"
        return "compiled" if self.decode == "compiled" else "graphs"

    def _generate_chunk(self, chunk) -> list:
        # A row decoding under a tool grammar needs its mask before each pick: the hand-written loop has it.
        static = self._static_decoder() if not any(item[4:5] and item[4] for item in chunk) else None
        if static is not None:
            try:
                results = static.generate_chunk(chunk)
                if static.error and not self.decode_error:
                    self.decode_error = f"CUDA graphs off: {static.error}"
                return results
            except BackendError:
                raise
            except torch.cuda.OutOfMemoryError:  # its buffers did not fit: this chunk with the loop
                static.release()
                self.timing["static_oom"] += 1
                log.warning("the static decoder's buffers did not fit in GPU memory; this batch decodes with the loop")
                torch.cuda.empty_cache()
            except Exception as exc:  # noqa: BLE001 - said out loud, then the loop decodes from now on
                self.decode_error = f"static decoding failed: {type(exc).__name__}: {exc}"
                self.timing["static_failures"] += 1
                log.warning("%s; decoding with the loop from now on", self.decode_error)
                self.decode, self._static = "loop", None
        return self._loop_chunk(chunk)
