"""Tool-call requests on the transformers engine (evolver_transformers/grammar.py): the tools' schemas become a
grammar, rows decode under it inside the batched loop (drafts included), a model that already writes the call
gives the same tokens with or without it, a call cut by its budget is a recorded failure, and the recorded
log-probs are those of the masked distribution, which a trainer recomputes from the grammar."""
import pytest
import torch

from evolver import GenRequest, Message, ToolCalls

PICK = {"type": "function", "function": {"name": "pick", "description": "Pick a colour.", "parameters": {
    "type": "object", "required": ["colour"], "properties": {"colour": {"enum": ["red", "green", "blue"]}}}}}
COUNT = {"type": "function", "function": {"name": "count", "parameters": {
    "type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}}}}
TOOLS = [PICK, COUNT]
LOOKAHEAD = {"type": "function", "function": {"name": "code", "parameters": {
    "type": "object", "properties": {"c": {"type": "string", "pattern": "^(?=A)[A-Z]+$"}}}}}
CALL = '{"name": "pick", "arguments": {"colour": "green"}}'
ASK = [Message("system", "Call a tool: " + CALL), Message("user", "green please")]


def backend(model_dir, **kw):
    from evolver_transformers.backend import TransformersBackend

    return TransformersBackend(model=str(model_dir), dtype="fp32", max_batch=8, **kw)


@pytest.fixture(scope="module")
def complying(tiny_model_dir, tmp_path_factory):
    """The tiny model taught to answer ASK with CALL (and nothing else): a model that already complies."""
    b = backend(tiny_model_dir)
    model = b.hf_model
    prompt = b.chat_ids(ASK)
    reply = b.tokenizer(CALL, add_special_tokens=False)["input_ids"] + [b.end_id]
    ids = torch.tensor([prompt + reply])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(300):
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1]
        loss = torch.nn.functional.cross_entropy(logits, ids[0, len(prompt):])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.01:
            break
    model.eval()
    out = tmp_path_factory.mktemp("complying")
    model.save_pretrained(out)
    b.tokenizer.save_pretrained(out)
    return out


def test_schemas_become_a_grammar_that_takes_valid_calls_and_refuses_the_rest(tiny):
    from evolver_transformers.grammar import Grammars, finished, grammar_for

    lark = grammar_for(GenRequest(ASK, tools=TOOLS, tool_choice="required"))
    assert lark.startswith("start: call\n") and '"const": "pick"' in lark and "message" not in lark
    assert "message:" in grammar_for(GenRequest(ASK, tools=TOOLS))  # auto: a call or a final message
    assert grammar_for(GenRequest(ASK)) is None
    # "none" with tools: the final answer was asked for, and it may not open a JSON object
    assert grammar_for(GenRequest(ASK, tools=TOOLS, tool_choice="none")).startswith("start: message\n")
    g = Grammars(tiny.tokenizer, tiny.hf_model.config.vocab_size, tiny.eos_ids)
    ids = lambda text: tiny.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    for text, ok in [(CALL, True), ('{"name": "count", "arguments": {"n": 7}}', True),
                     ('{"name": "pick", "arguments": {"colour": "pink"}}', False),
                     ('{"name": "count", "arguments": {"n": 7, "extra": 1}}', False),  # listed properties only
                     ('{"name": "wave", "arguments": {}}', False), ("hello", False)]:
        m = g.matcher(lark)
        toks = ids(text)
        assert (g.valid_prefix(m, toks) == toks and m.consume_tokens(toks) and finished(m)) == ok, text


def test_a_model_that_complies_writes_the_same_tokens_under_the_grammar(complying):
    for lookup in (0, 8):  # with drafts, the drafted positions are masked too
        b = backend(complying, lookup=lookup)
        free = b.generate([GenRequest(ASK, max_tokens=80, logprobs=True)])[0]
        assert free.text == CALL, "the tiny model did not learn the call"
        batch = b.generate([GenRequest(ASK, max_tokens=80, tools=TOOLS, tool_choice="required", logprobs=True),
                            GenRequest(ASK, max_tokens=80, logprobs=True),  # a free row in the same batch
                            GenRequest(ASK, max_tokens=80, tools=TOOLS, logprobs=True)])
        for res in (batch[0], batch[2]):
            assert res.completion_ids == free.completion_ids and res.error is None
            assert res.tool_calls == [{"name": "pick", "arguments": {"colour": "green"}}] and res.grammar
            # masked log-probs can only be higher (less mass competes) and are at most 0
            assert all(c >= f - 1e-4 and c <= 1e-6 for c, f in zip(res.logprobs, free.logprobs))
        assert batch[1].completion_ids == free.completion_ids and batch[1].grammar is None
        assert batch[1].logprobs == pytest.approx(free.logprobs, abs=1e-5)
        assert b.timing["masks"] > 0


def test_sampled_calls_from_a_random_model_always_parse_and_validate(tiny):
    reqs = [GenRequest(ASK, max_tokens=120, tools=TOOLS, tool_choice="required", temperature=1.5, seed=s)
            for s in range(12)]
    out = tiny.generate(reqs)
    calls = [r.tool_calls[0] for r in out if r.error is None]
    assert len(calls) >= 8  # the rest ran out of budget (below); none wrote something else
    assert all(ToolCalls.validate(c, TOOLS) is None for c in calls)
    assert all(r.tool_calls is None and "did not finish its tool call" in r.error for r in out if r.error)
    auto = tiny.generate([GenRequest(ASK, max_tokens=30, tools=TOOLS, temperature=1.0, seed=s) for s in range(12)])
    for r in auto:  # auto: a call, or a final message that does not open a JSON object
        assert (r.tool_calls and ToolCalls.validate(r.tool_calls[0], TOOLS) is None) or \
               (r.tool_calls == [] and not r.text.lstrip().startswith("{")), r


def test_a_call_cut_by_its_budget_is_a_recorded_failure_and_bad_tools_fail_alone(tiny):
    out = tiny.generate([GenRequest(ASK, max_tokens=6, tools=TOOLS, tool_choice="required", logprobs=True),
                         GenRequest(ASK, max_tokens=6, tools=[{"function": {"name": "no spaces"}}]),
                         GenRequest(ASK, max_tokens=6, tools=TOOLS, tool_choice="wave"),
                         GenRequest(ASK, max_tokens=6, tools=[LOOKAHEAD]),
                         GenRequest(ASK, max_tokens=6)])
    assert out[0].text == "" and "did not finish its tool call within 6 tokens" in out[0].error
    assert len(out[0].completion_ids) == 6  # kept for a trainer: a cut call is a sample with its reward
    assert out[1].text == "" and "tools rejected" in out[1].error and "1-64 letters" in out[1].error
    assert "tools rejected" in out[2].error and "'wave'" in out[2].error
    assert "tools rejected" in out[3].error  # valid JSON schema, but a pattern no grammar engine takes
    assert out[4].error is None


def test_a_trainer_recomputes_the_masked_log_probs_from_the_grammar(tiny):
    from evolver_training import completion_logprobs
    from evolver_transformers import replay_masks

    reqs = [GenRequest(ASK, max_tokens=120, tools=TOOLS, tool_choice="required", temperature=1.0, seed=s,
                       logprobs=True) for s in range(4)] + [GenRequest(ASK, max_tokens=10, logprobs=True)]
    out = [r for r in tiny.generate(reqs) if r.completion_ids]
    prompts, comps = [r.prompt_ids for r in out], [r.completion_ids for r in out]
    masks = replay_masks(tiny.tokenizer, tiny.hf_model.config.vocab_size, tiny.eos_ids, [r.grammar for r in out], comps)
    assert masks[-1] is None and all(m.shape == (len(c), tiny.hf_model.config.vocab_size) for m, c in zip(masks, comps)
                                     if m is not None)
    with torch.no_grad():
        masked = completion_logprobs(tiny.hf_model, prompts, comps, masks=masks, share=0)
        plain = completion_logprobs(tiny.hf_model, prompts, comps, share=0)
    engine = torch.tensor([lp for r in out for lp in r.logprobs])
    assert torch.allclose(masked, engine, atol=1e-4)
    n = sum(len(c) for c in comps[:-1])
    assert (masked[:n] > plain[:n] + 1e-3).any() and torch.allclose(masked[n:], plain[n:], atol=1e-6)
    lp, ent = completion_logprobs(tiny.hf_model, prompts, comps, masks=masks, share=0, with_entropy=True)
    assert torch.isfinite(ent).all()
