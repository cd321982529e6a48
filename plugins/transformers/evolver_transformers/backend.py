"""In-process backend on transformers + torch: the default, and the one an RL trainer shares.

What makes a 135M model usable on a 2-core CPU:
- ``generate`` batches requests (left padding, sorted by length) with a hand-written decode loop:
  we need per-request seeded sampling, stop strings and the exact sampled ids/log-probs for RL,
  which ``model.generate`` does not give per row.
- ``choose`` (``choice_scoring.py``) scores options against ONE prefill of the prompt, so 20 options
  cost one prompt pass plus 20 short ones instead of 20 full passes (measured 985 s for 180 steps the
  naive way).
- Both reuse the KV of recent prompts (``prefix_cache.py``): an episode's steps and an evaluation's
  episodes share most of their prompts, and prefill is compute-bound here.
- A batch's KV lives in one buffer per layer, sized for the prompts and the whole reply: the prefill
  writes into it and decoding writes each token in place (``prefix_cache._prefill_rows``), where
  HF's cache would concatenate the whole cache on every forward.
- Rows draft tokens (``drafts.py``: from their own prompt and reply, or from the replies the request
  names as likely, e.g. a choice's options) and check the drafts in one forward: an agent's reply
  copies its context (a listed action, the observation), and a forward of one row costs about the
  same for 1 token or 9. Rejected drafts stay in the cache as masked holes.
- Attention packs query heads onto their shared KV head (``attention.py``) instead of copying the
  cache per head.
- A tool-call request decodes under its tools' grammar, row by row in the same loop (``grammar.py``).

Masks always come from lengths, never from comparing ids to the pad id: SmolLM2's pad is its EOS
(``<|im_end|>``), which also appears inside every ChatML prompt.
"""
from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import os
import re
import time
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any, Mapping

import torch

from evolver import Backend, BackendError, GenRequest, GenResult, Message
from evolver_transformers.attention import use_gqa_sdpa
from evolver_transformers.bf16_weights import keep_bf16_weights
from evolver_transformers.choice_scoring import ChoiceScoring, token_logprobs
from evolver_transformers.drafts import OptionDrafts, PromptLookup
from evolver_transformers.embedded import fingerprint, resolve_model, state_hash
from evolver_transformers.grammar import GrammarRows, grammar_for
from evolver_transformers.precision import CHOICES, use_autocast
from evolver_transformers.prefix_cache import PrefixCache
from evolver_transformers.static_decode import StaticDecoding

log = logging.getLogger(__name__)


class TransformersBackend(StaticDecoding, PrefixCache, ChoiceScoring, GrammarRows, Backend):
    name = "transformers"
    scores_options = True

    def __init__(self, model: str | None = None, dtype: str = "auto", max_batch: int | None = None,
                 threads: int | None = None, choose_eos: bool = False, prefix_cache: int = 64,
                 device: str = "auto", sample_device: str = "model", lookup: int = 8, lookup_tokens: int = 32,
                 decode: str = "auto", **_: Any):
        """``dtype="bf16"`` keeps fp32 weights and runs under bf16 autocast, ``"fp32"`` does not;
        ``"auto"`` picks bf16 where the hardware computes it natively (AVX512-BF16/AMX CPUs, CUDA),
        else fp32: emulated bf16 is several times slower than fp32 (``precision.py``).

        ``max_batch``: requests decoded together (default 32 on a CPU, where SmolLM2-135M's decode cost
        per row stops falling at ~16 rows, 4.5 ms vs 45 ms for one; 128 on a GPU, where decoding small
        models is bound by kernel launches and wider batches are nearly free).
        ``device``: ``"auto"`` (a CUDA GPU when torch sees one, else the CPU), ``"cpu"``, ``"cuda"``
        or ``"cuda:N"``. Sampling races on noise from a per-request generator (``Race``), so a seed
        gives the same sample whatever else is in the batch, drafts or not.
        ``sample_device="model"`` draws on the model's device (fastest); ``"cpu"`` draws on the CPU whatever the model's device (one [batch, vocab] copy per step), so a
        seed gives the same sample on a GPU as on a CPU, up to the logits' own rounding.

        ``prefix_cache`` is how many recent prompts keep their KV for ``choose`` (0: off): a new
        prompt reuses the longest prefix it shares with one of them (~10 MB each for SmolLM2-135M).
        ``lookup``: draft tokens per row per forward, greedy and sampled rows alike, looked up in the
        row's own prompt and reply (``PromptLookup``; 0: off). A model answering from its context
        copies runs of it (an action from the listed valid actions, a name from the observation), and each draft
        token it agrees with costs no forward of its own; the reply is the same either way.
        ``lookup_tokens`` caps the tokens one forward feeds (rows x (1 + draft)): drafts ride almost
        free on a memory-bound forward of a few rows, but not on a compute-bound one of many.
        ``choose_eos=True`` also scores the end-of-turn token after each option
        (penalises prefixes: "go" vs "go north"); off by default because SmolLM2 prefers to go on
        talking, so the end token drowned the answer in spot checks ("Madrid" over "Paris").

        ``decode``: how ``generate`` decodes. ``"loop"``: the hand-written loop below (drafts, the
        ``Race`` sampler). ``"graphs"``: a static KV cache and one CUDA graph per batch bucket
        (``static_decode.py``; CUDA only), for a GPU where the loop is bound by kernel launches.
        ``"static"``: the same static step run eagerly (tests, comparisons); ``"compiled"``: the graphs
        of a ``torch.compile``d step (one compilation per batch bucket and width: slow to start, for
        long runs of one shape; experimental). ``"auto"`` (default):
        ``"graphs"`` on a CUDA device, ``"loop"`` elsewhere. The static path decodes one token per
        forward and samples with its own seeded stream (greedy text and log-probs equal the loop's);
        it is used only with ``sample_device="model"``, and for a model it cannot run (not of the Llama
        layout) or after a failure the loop decodes, said once in the log and in ``decode_error``.
        """
        if dtype not in CHOICES:
            raise BackendError(f"dtype {dtype!r} not supported; use 'auto', 'bf16' (autocast) or 'fp32'")
        if threads:
            torch.set_num_threads(int(threads))
        self.choose_eos = choose_eos
        self.prefix_cache = int(prefix_cache)
        self.lookup, self.lookup_tokens = max(0, int(lookup)), max(1, int(lookup_tokens))
        self._prefixes: OrderedDict = OrderedDict()
        #: Where model time goes: ``prefill_s`` / ``prefill_tokens`` (prompt tokens computed, cached
        #: prefixes excluded), ``decode_s`` / ``decode_steps`` (forwards after the prefill, one for a
        #: whole batch each), ``choose_s`` / ``choose_tokens``. Benchmarks read it; nothing else depends on it.
        self.timing: Counter = Counter()
        path, gguf_file, self.model = resolve_model(model)
        self._base_model = self.model
        self.path = path
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub: everything is local
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kw: dict[str, Any] = {"local_files_only": True}
        if gguf_file:
            kw["gguf_file"] = gguf_file
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(path), **kw)
            self.hf_model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, **kw)
        except Exception as exc:  # noqa: BLE001 - whatever breaks, the user needs the path and the cause
            raise BackendError(f"cannot load model from {path}: {type(exc).__name__}: {exc}") from exc
        dev = _device(device)
        self.autocast = use_autocast(dtype, dev)
        self.hf_model.to(dev).eval()
        use_gqa_sdpa(self.hf_model)  # no per-head copies of the KV cache (``attention.py``)
        if self.autocast:
            keep_bf16_weights(self.hf_model)  # no re-cast of every weight per call (``bf16_weights.py``)
        if sample_device not in ("model", "cpu"):
            raise BackendError(f"sample_device {sample_device!r} not supported; use 'model' or 'cpu'")
        self.sample_device = sample_device
        if decode not in ("auto", "loop", "static", "graphs", "compiled"):
            raise BackendError(f"decode {decode!r} not supported; use 'auto', 'loop', 'static' or 'graphs'")
        if decode in ("graphs", "compiled") and dev.type != "cuda":
            raise BackendError("decode='graphs' needs a CUDA device; use 'static' or 'loop' on a CPU")
        #: The decode path asked for (``"auto"`` resolved) and, if it was given up, why.
        self.decode = decode if decode != "auto" else ("graphs" if dev.type == "cuda" else "loop")
        self.decode_error: str | None = None
        self._static = None
        self.max_batch = max(1, int(max_batch)) if max_batch else (128 if dev.type == "cuda" else 32)
        cfg = self.hf_model.config
        self.context_window = int(getattr(cfg, "max_position_embeddings", 0) or 2048)
        self.eos_ids = self._collect_eos_ids()
        if not self.eos_ids:
            raise BackendError(f"model at {path} declares no EOS token")
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        eos = self.tokenizer.eos_token_id
        self.end_id = eos if eos is not None else min(self.eos_ids)
        # transformers 5.2x renamed the forward kwarg ``past_key_values`` to ``cache``.
        params = inspect.signature(self.hf_model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._grammars = None  # made at the first tool-call request (GrammarRows)

    # ----------------------------------------------------------------------------------- helpers
    def _collect_eos_ids(self) -> set[int]:
        ids: set[int] = set()
        gen_cfg = getattr(self.hf_model, "generation_config", None)
        for src in (self.tokenizer.eos_token_id, self.hf_model.config.eos_token_id,
                    getattr(gen_cfg, "eos_token_id", None)):
            if isinstance(src, int):
                ids.add(src)
            elif isinstance(src, (list, tuple)):
                ids.update(int(x) for x in src)
        return ids

    @property
    def base_model(self) -> str:
        """The weights this backend loaded at construction (``model`` changes with ``load_weights``)."""
        return self._base_model

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    def _ctx(self) -> contextlib.ExitStack:
        # no_grad, not inference_mode: autocast caches the bf16 copy of each fp32 weight for the
        # whole context only for tensors that may require grad; under inference_mode it re-casts
        # every weight on every forward (measured 1.4-1.7x slower decoding here). The linear layers
        # keep their bf16 copies across contexts anyway (``bf16_weights.py``).
        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())
        if self.autocast:
            stack.enter_context(torch.autocast(self.device.type, dtype=torch.bfloat16))
        return stack

    def _forward(self, ids, mask, pos, cache, logits_to_keep: int = 0):
        if self.hf_model is None:
            raise BackendError("TransformersBackend used after close()")
        out = self.hf_model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                            logits_to_keep=logits_to_keep, **{self._cache_kw: cache})
        new_cache = getattr(out, "cache", None)
        return out.logits, new_cache if new_cache is not None else out.past_key_values

    def chat_ids(self, messages: list[Message]) -> list[int]:
        """Token ids of the chat-templated prompt, ending with the assistant turn's header."""
        msgs = [{"role": m.role, "content": m.content} for m in messages]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        else:  # a base model without a template: a plain transcript is the best we can do
            text = Backend.render_plain(messages) + "\n\n[assistant]\n"
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    # ---------------------------------------------------------------------------------- generate
    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        if self.hf_model is None:
            raise BackendError("TransformersBackend used after close()")
        results: list[GenResult | None] = [None] * len(requests)
        todo = []
        for i, req in enumerate(requests):
            try:
                ids = self.chat_ids(req.messages)
            except Exception as exc:  # noqa: BLE001 - e.g. a template that rejects the roles
                results[i] = GenResult(text="", error=f"chat template failed: {exc}")
                continue
            try:
                lark = grammar_for(req)
                if lark:  # compiled here (once per text): a schema llguidance refuses fails its request alone
                    self._tool_grammars().compiled(lark)
            except BackendError:
                raise  # llguidance missing: every tool request would fail, so the run stops and says so
            except Exception as exc:  # noqa: BLE001 - a malformed tool schema fails its request, not the batch
                results[i] = GenResult(text="", prompt_tokens=len(ids), error=f"tools rejected: {exc}")
                continue
            room = self.context_window - len(ids)
            if room < 1:
                results[i] = GenResult(text="", prompt_tokens=len(ids), error=(
                    f"prompt has {len(ids)} tokens; the context window is {self.context_window}"))
            elif req.max_tokens <= 0:
                results[i] = self._result(req, ids, [], [])
            else:
                todo.append((i, req, ids, min(req.max_tokens, room), lark))
        # Similar lengths together waste the least compute on padding.
        todo.sort(key=lambda item: len(item[2]))
        with self._ctx():  # one outer autocast: weights are cast to bf16 once per call, not per chunk
            for start in range(0, len(todo), self.max_batch):
                chunk = todo[start:start + self.max_batch]
                for (i, *_rest), res in zip(chunk, self._generate_isolated(chunk)):
                    results[i] = res
        return results  # type: ignore[return-value]

    def _generate_isolated(self, chunk) -> list[GenResult]:
        """Run a chunk; if it fails, rerun its requests one by one so only the culprit errors."""
        try:
            return self._generate_chunk(chunk)
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001
            if len(chunk) == 1:
                return [GenResult(text="", prompt_tokens=len(chunk[0][2]),
                                  error=f"generation failed: {type(exc).__name__}: {exc}")]
            self._batch_failed(len(chunk), exc)
            return [res for item in chunk for res in self._generate_isolated([item])]

    def _batch_failed(self, size: int, exc: Exception) -> None:
        # Said out loud: a bug that fails every batch would otherwise only show as slowness.
        self.timing["batch_failures"] += 1
        log.warning("a batch of %d failed (%s: %s); running its requests one by one", size, type(exc).__name__, exc)

    def _loop_chunk(self, chunk) -> list[GenResult]:
        B, dev = len(chunk), self.device
        longest = max(item[3] for item in chunk)
        # Rejected draft tokens leave masked holes in the cache: they get as many columns as the reply.
        holes = longest if self.lookup else 0
        with self._ctx():
            t0 = time.perf_counter()
            logits, cache, mask, order = self._prefill([item[2] for item in chunk], longest + holes)
            t1 = time.perf_counter()
            chunk = [chunk[i] for i in order]  # the rows as the prefill grouped them
            reqs, prompts, limits = ([item[k] for item in chunk] for k in (1, 2, 3))
            matchers = self._matchers([item[4] if len(item) > 4 else None for item in chunk])
            consumed = [0] * B  # tokens of each reply its matcher has taken
            where = dev if self.sample_device == "model" else torch.device("cpu")
            races = [Race.for_request(req, where, logits.shape[-1]) for req in reqs]
            want_lp = any(req.logprobs for req in reqs)
            out_ids: list[list[int]] = [[] for _ in range(B)]
            out_lp: list[list[float]] = [[] for _ in range(B)]
            done = [False] * B
            lookups = [self._drafter(req, p) if self.lookup else None for req, p in zip(reqs, prompts)]
            # The mask grows by the columns fed at each step: one buffer, viewed wider each time.
            width = mask.shape[1]
            mask = torch.cat([mask, torch.zeros((B, longest + holes), dtype=mask.dtype, device=dev)], dim=1)
            next_pos = [len(p) for p in prompts]  # where each row's next fed token sits
            drafts: list[list[int]] = [[] for _ in range(B)]
            T = forwards = 0  # T: columns fed by the last forward (0: the logits are the prefill's)
            while True:
                self._mask(logits, matchers, drafts, done)
                accepted = self._accept(logits, drafts, reqs, races, done, out_ids, out_lp, want_lp, limits)
                self._advance(matchers, out_ids, consumed, done)
                if T:  # the fed token and the drafts accepted after it are context now; the rest are holes
                    for r, draft in enumerate(drafts):
                        if len(draft) > accepted[r]:
                            mask[r, width - T + 1 + accepted[r]:width - T + 1 + len(draft)] = 0
                        next_pos[r] += 1 + accepted[r]
                if all(done):
                    break
                # Drafted tokens cost compute in every row of the forward: fewer each when many rows are live.
                live = B - sum(done)
                room = min(self.lookup, holes, self.lookup_tokens // live - 1)
                drafts = [lookups[r].draft(out_ids[r], min(room, limits[r] - len(out_ids[r]) - 1))
                          if lookups[r] is not None and not done[r] and room > 0 else [] for r in range(B)]
                drafts = [self._grammars.valid_prefix(m, d) if m is not None and d else d
                          for m, d in zip(matchers, drafts)]
                T = 1 + max(map(len, drafts))
                holes -= T - 1
                # Finished rows keep decoding a pad token: cheaper than reshaping the cache, and
                # rows never attend to each other, so their junk cannot leak into live rows.
                pad = self.pad_id
                feed = torch.tensor([[pad if done[r] else out_ids[r][-1]] + d + [pad] * (T - 1 - len(d))
                                     for r, d in enumerate(drafts)])
                mask[:, width] = 1  # every row feeds one token; a row that drafted feeds its drafts too
                for r, d in enumerate(drafts):
                    if d:
                        mask[r, width + 1:width + 1 + len(d)] = 1
                pos = torch.tensor(next_pos)[:, None] + torch.arange(T)
                width += T
                logits, cache = self._forward(feed.to(dev), mask[:, :width], pos.to(dev), cache)
                forwards += 1
        self.timing.update(prefill_s=t1 - t0, decode_s=time.perf_counter() - t1, decode_steps=forwards)
        results: list[GenResult | None] = [None] * B
        for r, i in enumerate(order):
            results[i] = self._result(reqs[r], prompts[r], out_ids[r], out_lp[r], chunk[r][4] if len(chunk[r]) > 4 else None,
                                      matchers[r])
        return results  # type: ignore[return-value]

    def _drafter(self, req: GenRequest, prompt: list[int]):
        """A row's draft source: the request's likely replies, if it names some, else its prompt."""
        if not req.drafts:
            return PromptLookup(prompt)
        tok = self.tokenizer
        return OptionDrafts(prompt, [tok(o, add_special_tokens=False)["input_ids"] for o in req.drafts])

    def _accept(self, logits, drafts, reqs, races, done, out_ids, out_lp, want_lp, limits) -> list[int]:
        """Emit each live row's next tokens from a forward's logits [B, T, V]: every draft token the
        model would have picked itself, then the token it picks after them. Greedy rows pick the
        argmax; sampled rows the winner of their exponential race (``Race``), a function of the
        logits given the row's noise at each reply position, so a sampled draft is checked like a
        greedy one. So the reply is exactly what one token per forward gives, drafts or not.
        Returns the drafts accepted per row."""
        preds = logits.argmax(dim=-1)
        sampled = [r for r, race in enumerate(races) if race is not None and not done[r]]
        if sampled:
            T = logits.shape[1]
            noise = torch.stack([races[r].noise(len(out_ids[r]), T) for r in sampled])  # [R, T, V]
            temps = torch.tensor([reqs[r].temperature for r in sampled], device=noise.device)[:, None, None]
            won = (logits[sampled].to(noise.device).float() / temps + noise).argmax(dim=-1)
            preds[sampled] = won.to(preds.device)
        preds = preds.tolist()  # one host transfer per step, not one per row (GPU syncs)
        accepted, emitted = [0] * len(drafts), [[] for _ in drafts]
        for r, draft in enumerate(drafts):
            if not done[r]:
                a = 0
                while a < len(draft) and preds[r][a] == draft[a]:
                    a += 1
                accepted[r], emitted[r] = a, preds[r][:a + 1]
        lps: list[list[float]] = [[] for _ in drafts]
        if want_lp:
            # Log-probs are of the raw logits at temperature 1 whatever the sampling
            # temperature: the policy's own probabilities, which is what RL ratios need.
            firsts = torch.tensor([e[0] if e else 0 for e in emitted], device=logits.device)
            for r, lp in enumerate(token_logprobs(logits[:, 0, :].float(), firsts).tolist()):
                lps[r].append(lp)
            for r, e in enumerate(emitted):
                if len(e) > 1:
                    lps[r] += token_logprobs(logits[r, 1:len(e)].float(),
                                             torch.tensor(e[1:], device=logits.device)).tolist()
        for r, toks in enumerate(emitted):
            for j, tok in enumerate(toks):
                out_ids[r].append(tok)
                if want_lp:
                    out_lp[r].append(lps[r][j])
                if (tok in self.eos_ids or len(out_ids[r]) >= limits[r] or self._stop_hit(out_ids[r], reqs[r].stop)
                        or self._looping(out_ids[r], reqs[r].max_line_repeats)):
                    done[r] = True
                    break
        return accepted

    def _stop_hit(self, ids: list[int], stop: list[str] | None) -> bool:
        if not stop:
            return False
        # Checked after every token, so a stop string can only newly end in the newest token: decode a
        # tail long enough to hold the longest one (>= 1 byte per token, <= 4 bytes per character),
        # not the whole row (which made long batched rollouts CPU-bound).
        tail = 4 * max(len(s) for s in stop) + 4
        text = self.tokenizer.decode(ids[-tail:], skip_special_tokens=True)
        return any(s and s in text for s in stop)

    def _looping(self, ids: list[int], repeats: int | None) -> bool:
        """Whether the newest token ends a line that the reply has now written ``repeats`` times."""
        if not repeats or "\n" not in self.tokenizer.decode(ids[-1:]):
            return False
        lines = self.tokenizer.decode(ids, skip_special_tokens=True).split("\n")
        return repeated_line(lines[:-1]) >= repeats

    def _result(self, req: GenRequest, prompt: list[int], ids: list[int], lps: list[float],
                grammar: str | None = None, matcher=None) -> GenResult:
        text = _cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True), req.stop)
        res = GenResult(text=text, prompt_tokens=len(prompt), completion_tokens=len(ids), grammar=grammar)
        if grammar is not None:
            self._as_tool_reply(res, req, len(ids), matcher)
        if req.logprobs:
            # completion_ids are the tokens actually sampled, EOS included and stop strings not cut:
            # a trainer must score exactly what the model produced.
            res.prompt_ids, res.completion_ids, res.logprobs = list(prompt), list(ids), list(lps)
        return res

    # ----------------------------------------------------------------------------- weights/close
    def load_weights(self, weights: Mapping[str, torch.Tensor] | str | Path, model_id: str | None = None) -> None:
        """Swap weights in place (a state dict, or a folder of .safetensors files).

        ``self.model`` changes with the weights so caches keyed on it never mix policies:
        ``model_id`` if given, else the folder's path+fingerprint, else a hash of the tensors
        (~1 s for 540 MB).
        """
        if self.hf_model is None:
            raise BackendError("TransformersBackend used after close()")
        ident = None
        if isinstance(weights, (str, Path)):
            folder = Path(weights)
            files = sorted(folder.glob("*.safetensors"))
            if not files:
                raise BackendError(f"no .safetensors files in {folder}")
            from safetensors.torch import load_file

            state: dict[str, torch.Tensor] = {}
            for f in files:
                state.update(load_file(str(f)))
            ident = f"{folder.resolve()}@{fingerprint(folder)}"
        else:
            state = dict(weights)
        missing, unexpected = self.hf_model.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if getattr(self.hf_model.config, "tie_word_embeddings", False) else set()
        missing = [k for k in missing if k not in tied]
        if missing or unexpected:
            raise BackendError(f"weights do not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
        self.model = model_id or ident or f"{self._base_model}+{state_hash(state)}"
        self._prefixes.clear()  # KV computed by the old weights
        # the static decoder reads the parameters in place; it re-checks them before its next call

    def weights_changed(self, model_id: str | None = None) -> None:
        """Call after training ``hf_model`` in place: gives ``self.model`` (cache keys) a new identity."""
        self.model = model_id or f"{self._base_model}+{state_hash(self.hf_model.state_dict())}"
        self._prefixes.clear()  # KV computed by the old weights

    def close(self) -> None:
        if self._static is not None:
            self._static.release()
            self._static = None
        self.hf_model = None  # type: ignore[assignment]
        gc.collect()


def _device(name: str) -> torch.device:
    if name in ("auto", "", None):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BackendError(f"device {name!r} asked for, but torch sees no CUDA GPU; use device='cpu' or 'auto'")
    return dev


class Race:
    """Sampling as an exponential race: a row's token at reply position j is
    ``argmax(logits / temperature - log E_j)``, with ``E_j`` ~ Exp(1) per vocabulary entry (the
    Gumbel-max trick), which draws from ``softmax(logits / temperature)`` exactly. ``E_j`` is the
    j-th vector drawn from the row's own generator, whatever happens around it, so the sample is a
    function of the row's logits alone: the same whatever else is in the batch, and the same
    whether its tokens came one per forward or as checked drafts (a drafted token is kept when it
    wins the race at its position, as a greedy draft is kept when it is the argmax)."""

    def __init__(self, gen: torch.Generator, vocab: int):
        self.gen, self.vocab = gen, vocab
        self.first = 0  # the reply position of _drawn[0]
        self._drawn: list[torch.Tensor] = []  # -log E for positions first, first + 1, ...

    @classmethod
    def for_request(cls, req: GenRequest, device: torch.device, vocab: int) -> Race | None:
        """A private race per sampled request (None when greedy): same seed, same sample."""
        if req.temperature <= 0:
            return None
        seed = req.seed if req.seed is not None else int(torch.randint(0, 2**62, (1,)))
        gen = torch.Generator(device=device)
        gen.manual_seed(int(seed))
        return cls(gen, vocab)

    def noise(self, n: int, T: int) -> torch.Tensor:
        """-log E for reply positions n .. n + T - 1 [T, V]; the noise of positions before n is
        spent (they were emitted). Drawn one position at a time, so the stream never depends on how
        many positions a forward checks."""
        del self._drawn[:n - self.first]
        self.first = n
        while len(self._drawn) < T:
            e = torch.empty(self.vocab, device=self.gen.device).exponential_(generator=self.gen)
            # exponential_ may return 0 (u = 0 in float32: ~1 vocabulary entry in 340 per position
            # for SmolLM2): its -log would be +inf and win the race whatever its probability.
            self._drawn.append(-e.clamp_min_(torch.finfo(e.dtype).tiny).log_())
        return torch.stack(self._drawn[:T])


def repeated_line(lines: list[str]) -> int:
    """How often the most written non-empty line occurs, list numbering ("3.", "4)", "-") aside."""
    keys = [re.sub(r"^\s*(?:\d+[.)]|[-*])?\s*", "", ln).strip().lower() for ln in lines]
    return max(Counter(k for k in keys if k).values(), default=0)


def _cut_at_stop(text: str, stop: list[str] | None) -> str:
    cuts = [text.find(s) for s in stop or [] if s and s in text]
    return text[:min(cuts)] if cuts else text
