"""Tool-call requests decoded under a grammar, so even a 135M model always writes a call that parses.

A request with ``tools`` (and ``tool_choice`` other than "none") decodes under a grammar built from the
tools' schemas (``evolver.ToolCalls.schema``): a listed tool's name with schema-valid arguments, as one
JSON object ``{"name": ..., "arguments": {...}}``, or (``tool_choice="auto"``) a final message that does not
start with ``{``. Each row of the lockstep decode loop has its own matcher; before every forward's tokens
are accepted, the tokens the grammar forbids get ``-inf`` at every position the row checks (its next token
and its draft tokens), so greedy picks, sampled races and drafts all stay inside the grammar.

The library is llguidance: MIT, no Python dependencies, its masks computed in Rust off the GIL for a whole
batch at once, draft positions included (``fill_next_token_bitmask_par_with_draft_tokens``), about
0.07 ms a mask on SmolLM2's 49k vocabulary here. xgrammar is faster per mask but pulls torch, transformers
and triton of its own choosing into the environment.

The mask is part of the policy: the log-probs the engine records are those of the masked distribution,
and the result names the grammar (``GenResult.grammar``), so a trainer recomputes its log-probs under the
same masks (:func:`replay_masks`) and GRPO's ratios compare like with like.
"""
from __future__ import annotations

import json
import time
from functools import lru_cache

import numpy as np
import torch

from evolver import BackendError, GenRequest, ToolCalls

#: A final message (``tool_choice="auto"``): any text that does not open a JSON object, so a reply that
#: starts ``{`` is a call and must finish as one.
MESSAGE = r"/[^{\s][\s\S]*/"


#: One line, OpenAI's separators: the form the seed harness's prompt shows. Free whitespace let a small model
#: indent blank lines until its budget ran out (seen: 2 of 4 greedy calls).
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def grammar_for(req: GenRequest) -> str | None:
    """The Lark grammar (llguidance's dialect) a request decodes under, or None when it is free."""
    tools = getattr(req, "tools", None)
    choice = ToolCalls.choice(getattr(req, "tool_choice", None), tools)
    if choice == "none":  # with tools: the final answer was asked for, and it must not be a call
        return f"start: message\nmessage: {MESSAGE}\n" if tools else None
    schema = {**_strict(ToolCalls.schema(ToolCalls.check(tools), choice)), "x-guidance": JSON_LAYOUT}
    call = "call: %json " + json.dumps(schema)  # (the schema's order: the name first)
    return f"start: call\n{call}\n" if choice != "auto" else f"start: call | message\n{call}\nmessage: {MESSAGE}\n"


def _strict(schema):
    """Objects that list their properties admit no others while decoding: a schema that leaves
    ``additionalProperties`` open would let a small model invent keys until its budget runs out. A call
    the grammar allows is still valid under the tool's own schema."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


class Grammars:
    """llguidance over one tokenizer: grammars compiled once per text, a matcher per constrained row,
    and the batch's masks in one parallel call."""

    def __init__(self, hf_tokenizer, vocab: int, eos_ids):
        try:
            import llguidance
            import llguidance.hf
            import llguidance.numpy
        except ImportError as exc:
            raise BackendError("tool-call requests need llguidance: pip install llguidance") from exc
        self._ll, self._np = llguidance, llguidance.numpy
        self.vocab = int(vocab)
        # every end token the model has (a chat model's end-of-turn besides its end-of-text) may end a reply
        self.tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=self.vocab,
                                                      eos_token=sorted(eos_ids) if eos_ids else None)
        self.executor = llguidance.LLExecutor(num_threads=max(1, min(4, torch.get_num_threads())))
        #: ``compiled(lark)``: the grammar checked against the tokenizer, once per text (raises BackendError).
        self.compiled = lru_cache(maxsize=64)(self._compile)

    def _compile(self, lark: str) -> str:
        grammar = self._ll.LLMatcher.grammar_from_lark(lark)
        bad, warnings = self._ll.LLMatcher.validate_grammar_with_warnings(grammar, self.tokenizer)
        if bad:  # this request's tools, not the engine: the request fails alone
            raise ToolCalls.SchemaError(f"the tools' grammar does not compile: {warnings}")
        return grammar

    def matcher(self, lark: str):
        m = self._ll.LLMatcher(self.tokenizer, self.compiled(lark))
        if m.is_error():
            raise ToolCalls.SchemaError(f"the tools' grammar does not compile: {m.get_error()}")
        return m

    def valid_prefix(self, matcher, tokens: list[int]) -> list[int]:
        """The leading tokens of ``tokens`` the grammar accepts from the matcher's state."""
        return tokens[:matcher.validate_tokens(tokens)] if tokens else tokens

    def allowed(self, rows: list[tuple[int, object, list[int]]]) -> dict[int, np.ndarray]:
        """For each (row, matcher, draft): the tokens allowed at the row's next position and after each
        draft token, [1 + len(draft), vocab] booleans, computed for the whole batch in one call."""
        if not rows:
            return {}
        offsets, n = [], 0
        for _, _, draft in rows:
            offsets.append(n)
            n += 1 + len(draft)
        bits = self._np.allocate_token_bitmask(n, self.vocab)
        plain = [(m, off) for (_, m, d), off in zip(rows, offsets) if not d]
        drafted = [(m, off, list(d)) for (_, m, d), off in zip(rows, offsets) if d]
        if plain:
            self._np.fill_next_token_bitmask_par(self.executor, plain, bits)
        if drafted:  # (llguidance refuses an empty draft here)
            self._np.fill_next_token_bitmask_par_with_draft_tokens(self.executor, drafted, bits)
        flat = np.unpackbits(bits.view(np.uint8), axis=1, bitorder="little")[:, :self.vocab].astype(bool)
        return {r: flat[off:off + 1 + len(d)] for (r, _, d), off in zip(rows, offsets)}

    def replay_masks(self, lark: str, completion: list[int]) -> torch.Tensor:
        """The masks a reply was decoded under, one row per completion token [len, vocab] (bool): what a
        trainer applies to its logits so its log-probs are the engine's masked ones."""
        m = self.matcher(lark)
        out = np.zeros((len(completion), self.vocab), dtype=bool)
        bits = self._np.allocate_token_bitmask(1, self.vocab)
        for i, tok in enumerate(completion):
            self._np.fill_next_token_bitmask(m, bits, 0)
            out[i] = np.unpackbits(bits.view(np.uint8), bitorder="little")[:self.vocab].astype(bool)
            if not m.consume_token(int(tok)):
                out[i + 1:] = True  # past a token the grammar refused (it cannot be ours): unmasked
                break
        return torch.from_numpy(out)


def finished(matcher) -> bool:
    """Whether the row's reply is a whole sentence of its grammar (a finished call or message)."""
    return bool(matcher.is_accepting() or matcher.is_stopped()) and not matcher.is_error()


_MADE: dict = {}  # (tokenizer, vocab, end tokens) -> Grammars: a quarter of a second each for a 49k vocabulary


def replay_masks(hf_tokenizer, vocab: int, eos_ids, grammars: list[str | None], completions: list[list[int]]):
    """For a trainer: per sample, the [len, vocab] masks its reply was decoded under, or None where it
    was decoded free."""
    if not any(grammars):
        return [None] * len(grammars)
    key = (id(hf_tokenizer), int(vocab), tuple(sorted(eos_ids or ())))
    if key not in _MADE or _MADE[key][0] is not hf_tokenizer:
        _MADE[key] = (hf_tokenizer, Grammars(hf_tokenizer, vocab, eos_ids))
    g = _MADE[key][1]
    return [g.replay_masks(lark, list(c)) if lark else None for lark, c in zip(grammars, completions)]


class GrammarRows:
    """The decode loop's part of tool-call requests, mixed into the transformers backend (which has
    ``tokenizer``, ``hf_model``, ``eos_ids``, ``timing`` and ``_grammars``): a matcher per constrained row,
    its masks on a forward's logits, the tokens it emitted fed back, and the result read as a call."""

    def _matchers(self, grammars: list[str | None]) -> list:
        """A grammar matcher per row that decodes under one (None for a free row)."""
        if not any(grammars):
            return [None] * len(grammars)
        return [self._tool_grammars().matcher(g) if g else None for g in grammars]

    def _tool_grammars(self) -> Grammars:
        if self._grammars is None:
            self._grammars = Grammars(self.tokenizer, int(self.hf_model.get_output_embeddings().weight.shape[0]),
                                      self.eos_ids)
        return self._grammars

    def _mask(self, logits, matchers, drafts, done) -> None:
        """Forbidden tokens to -inf in place, at each position a constrained row checks (its next token
        and its drafts): picks, races and the recorded log-probs are then all of the masked distribution."""
        rows = [(r, m, drafts[r]) for r, m in enumerate(matchers) if m is not None and not done[r]]
        if not rows:
            return
        t0 = time.perf_counter()
        allowed = self._grammars.allowed(rows)
        for r, ok in allowed.items():
            n = ok.shape[0]
            block = torch.from_numpy(~ok).to(logits.device)
            logits[r, :n] = logits[r, :n].masked_fill(block, float("-inf"))
        self.timing.update(mask_s=time.perf_counter() - t0, masks=len(rows))

    @staticmethod
    def _advance(matchers, out_ids, consumed, done) -> None:
        """Each constrained row's matcher takes the tokens it just emitted (accepted drafts, then its pick)."""
        for r, m in enumerate(matchers):
            if m is None:
                continue
            new, consumed[r] = out_ids[r][consumed[r]:], len(out_ids[r])
            for tok in new:
                if m.is_stopped():  # a finished call: what follows is its end-of-turn token
                    break
                if not m.consume_token(int(tok)):
                    done[r] = True  # cannot happen under the mask; stop rather than write past the grammar
                    break

    @staticmethod
    def _as_tool_reply(res, req, n: int, matcher) -> None:
        """A reply decoded under a tool grammar: its call (``tool_calls``; [] for a final message), or, cut
        by its budget mid-call, a recorded failure rather than a guess."""
        if matcher is not None and not finished(matcher):
            res.text, res.error = "", (f"the reply did not finish its tool call within {n} tokens "
                                       f"(max_tokens {req.max_tokens}): {res.text[:160]!r}")
        else:
            call = ToolCalls.parse(res.text) if res.text.lstrip().startswith("{") else None
            res.tool_calls = [call] if call else []
