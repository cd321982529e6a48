"""The transformers backend on a tiny random Llama built here, no network (the fixtures are in conftest.py;
the embedded-model locator and attention kernels have their own test files)."""
from __future__ import annotations

import difflib
import os

import pytest
import torch

from evolver import BackendError, ChoiceRequest, GenRequest, Message


def user(text: str) -> list[Message]:
    return [Message("user", text)]


CONVERSATIONS = [
    user("hi"),
    [Message("system", "You are terse."), Message("user", "list three fruits please"),
     Message("assistant", "apple, pear"), Message("user", "and one more? <|im_end|> tricky")],
    user("a somewhat longer prompt, to force left padding on the short ones"),
    user("x"),
    user("what is 2+2"),
]


def _greedy_reference(b, ids: list[int], n: int) -> list[int]:
    """Greedy decoding with full recomputation and NO attention mask: nothing to get wrong."""
    seq = list(ids)
    with torch.inference_mode():
        for _ in range(n):
            nxt = int(b.hf_model(torch.tensor([seq], device=b.device)).logits[0, -1].argmax())
            seq.append(nxt)
            if nxt in b.eos_ids:
                break
    return seq[len(ids):]


def test_tiny_model_identity(tiny, tiny_model_dir):
    assert tiny.model.startswith(str(tiny_model_dir.resolve()) + "@")
    assert tiny.pad_id == 2 and tiny.eos_ids == {2}
    assert tiny.count_tokens("abc") == 3


def test_batched_greedy_equals_single_and_reference(tiny):
    reqs = [GenRequest(m, max_tokens=12, logprobs=True) for m in CONVERSATIONS]
    batched = tiny.generate(reqs)
    singles = [tiny.generate([r])[0] for r in reqs]
    for r, bat, one in zip(reqs, batched, singles):
        assert bat.error is None and bat.completion_ids == one.completion_ids and bat.text == one.text
        assert bat.completion_ids == _greedy_reference(tiny, bat.prompt_ids, 12)
        assert bat.prompt_ids == tiny.chat_ids(r.messages) and bat.prompt_tokens == len(bat.prompt_ids)
        assert len(bat.logprobs) == len(bat.completion_ids) == bat.completion_tokens > 0
    # the prompt with a literal <|im_end|> (the pad id) in it was not masked by value
    assert 2 in batched[1].prompt_ids[:-5]


@pytest.mark.parametrize("dtype,tol", [("fp32", 1e-4), ("bf16", 5e-2)])
def test_prefill_and_decoding_write_one_buffer_in_place_and_match_a_growing_cache(tiny_model_dir, monkeypatch,
                                                                                    dtype, tol):
    """The prefill groups and the decoding all write into one preallocated buffer per layer (keys
    stored as bf16 under autocast, as attention casts them anyway): the same tokens and log-probs as
    each request alone through HF's cache that concatenates on every token (bf16 rounds differently
    in a batch, hence its looser tolerance)."""
    from transformers import DynamicCache
    from evolver_transformers import backend as tb, prefix_cache

    b = tb.TransformersBackend(model=str(tiny_model_dir), dtype=dtype, prefix_cache=0, lookup=0)
    reqs = [GenRequest(m, max_tokens=10, logprobs=True) for m in CONVERSATIONS]
    made, real = [], prefix_cache._cache
    monkeypatch.setattr(prefix_cache, "_cache", lambda buffers, n: made.append(real(buffers, n)) or made[-1])
    got = b.generate(reqs)
    layer = made[-1].layers[0]  # the cache the batch decoded with
    assert layer.keys.dtype == layer.values.dtype == (torch.bfloat16 if dtype == "bf16" else torch.float32)
    assert layer.keys.data_ptr() == layer._k.data_ptr()  # a view of the buffer, not a copy
    assert layer.keys.shape[-2] == max(len(g.prompt_ids) for g in got) + max(g.completion_tokens for g in got) - 1
    assert len(made) >= 2  # the prefill's views and the decoding cache share one storage
    storage = layer._k.untyped_storage().data_ptr()
    assert all(c.layers[0]._k.untyped_storage().data_ptr() == storage for c in made)
    for g in got:  # each request alone through HF's own cache, which concatenates on every token
        ids, lps, cache = list(g.prompt_ids), [], DynamicCache()
        with b._ctx():
            feed = torch.tensor([ids])
            for _ in range(len(g.completion_ids)):
                out = b.hf_model(input_ids=feed, use_cache=True, **{b._cache_kw: cache})
                last = out.logits[0, -1].float()
                nxt = int(last.argmax())
                lps.append(float(last.log_softmax(-1)[nxt]))
                ids.append(nxt)
                feed = torch.tensor([[nxt]])
        assert ids[len(g.prompt_ids):] == g.completion_ids
        assert g.logprobs == pytest.approx(lps, abs=tol)


def test_cached_prompt_keys_are_bf16_under_autocast_with_the_same_results(tiny_model_dir):
    from evolver_transformers import backend as tb

    system = Message("system", "You play a text game. Pick good actions and explain nothing at all. " * 2)
    step1 = [[system, Message("user", f"Room {i}. You see a door.")] for i in range(3)]
    step2 = [m + [Message("assistant", "open door"), Message("user", f"Hall {i}.")] for i, m in enumerate(step1)]

    def play(entries: int):
        b = tb.TransformersBackend(model=str(tiny_model_dir), dtype="bf16", prefix_cache=entries)
        return [b.generate([GenRequest(m, max_tokens=6, logprobs=True) for m in batch]) for batch in (step1, step2)], b
    (got, b), (want, cold) = play(64), play(0)
    k, v = next(iter(b._prefixes.values()))[1][0]
    assert k.dtype == v.dtype == torch.bfloat16 and k.is_contiguous()
    assert b.timing["prefill_tokens"] < sum(len(b.chat_ids(m)) for m in step1 + step2) / 2  # entries were reused
    assert cold.timing["prefill_tokens"] == sum(len(b.chat_ids(m)) for m in step1 + step2)
    for g_batch, w_batch in zip(got, want):
        assert [g.completion_ids for g in g_batch] == [w.completion_ids for w in w_batch]
        for g, w in zip(g_batch, w_batch):
            assert g.logprobs == pytest.approx(w.logprobs, abs=5e-2)


def test_logprobs_match_a_full_forward(tiny):
    res = tiny.generate([GenRequest(user("score me"), max_tokens=8, temperature=0.9, seed=1, logprobs=True)])[0]
    full = torch.tensor([res.prompt_ids + res.completion_ids], device=tiny.device)
    with torch.inference_mode():
        logits = tiny.hf_model(full).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    P = len(res.prompt_ids)
    expect = [float(lp[P - 1 + i, t]) for i, t in enumerate(res.completion_ids)]
    assert res.logprobs == pytest.approx(expect, abs=1e-4)


def test_generate_reuses_prompt_prefixes_without_changing_results(tiny_model_dir):
    """Later steps of an episode share a long prefix with earlier prompts: their KV is reused (only
    the new tokens are computed) and greedy text and log-probs are what a cold backend gives."""
    from evolver_transformers.backend import TransformersBackend

    warm = TransformersBackend(model=str(tiny_model_dir), dtype="fp32", max_batch=4)
    cold = TransformersBackend(model=str(tiny_model_dir), dtype="fp32", max_batch=4, prefix_cache=0)
    system = Message("system", "You play a text game. Pick good actions and explain nothing at all. " * 2)
    step1 = [[system, Message("user", f"Room {i}. You see a door.")] for i in range(3)]
    step2 = [m + [Message("assistant", "open door"), Message("user", f"The door opens onto hall {i}.")]
             for i, m in enumerate(step1)] + [[system, Message("user", "a fresh episode")]]

    def reqs(batch):
        return [GenRequest(m, max_tokens=6, logprobs=True) for m in batch]
    widths, forward = [], warm._forward

    def spy(ids, *a, **k):
        widths.append(ids.shape[1])
        return forward(ids, *a, **k)
    warm._forward = spy
    first_widths = []
    for batch in (step1, step2):
        widths.clear()
        got, want = warm.generate(reqs(batch)), cold.generate(reqs(batch))
        assert [g.text for g in got] == [w.text for w in want]
        for g, w in zip(got, want):
            assert g.logprobs == pytest.approx(w.logprobs, abs=1e-5)
        first_widths = first_widths or list(widths)
    # step 1: the three episodes' shared system prompt was computed once, then only each row's own part
    system_tokens = len(warm.chat_ids([system]))
    assert first_widths[0] >= system_tokens - 12 and first_widths[1] < 40, first_widths
    assert len(warm._prefixes) == 8 and not cold._prefixes  # 7 prompts and the shared prefix
    # step 2's prefill fed only what no earlier prompt had: far less than the longest prompt
    longest = max(len(warm.chat_ids(m)) for m in step2)
    assert widths[0] < longest - 100


def test_prefixes_shared_by_some_rows_are_computed_once(tiny_model_dir):
    """Two games' episodes: all share the system prompt, each game's share its task text. Each shared
    prefix is computed once (the system prompt first, the task texts on top of it, together), then each
    row only its own observation; results equal a cold backend's."""
    from evolver_transformers.backend import TransformersBackend

    warm = TransformersBackend(model=str(tiny_model_dir), dtype="fp32", max_batch=8)
    cold = TransformersBackend(model=str(tiny_model_dir), dtype="fp32", max_batch=8, prefix_cache=0)
    system = Message("system", "You play a text game. Pick good actions and explain nothing at all.")
    tasks = ["Task: cook the meal in the recipe, then eat it. ", "Task: put every item where it belongs. "]
    batch = [[system, Message("user", tasks[i % 2] + f"You are in room {i}.")] for i in range(4)]
    reqs = [GenRequest(m, max_tokens=3, logprobs=True) for m in batch]
    widths, forward = [], warm._forward

    def spy(ids, *a, **k):
        widths.append(tuple(ids.shape))
        return forward(ids, *a, **k)
    warm._forward = spy
    got, want = warm.generate(reqs), cold.generate(reqs)
    for g, w in zip(got, want):
        assert g.completion_ids == w.completion_ids and g.logprobs == pytest.approx(w.logprobs, abs=1e-5)
    system_len = len(warm.chat_ids([system]))
    prefills = [w for w in widths if w[1] > 1]
    assert prefills[0] == (1, prefills[0][1]) and prefills[0][1] >= system_len - 12  # the system prompt
    assert prefills[1][0] == 2 and prefills[1][1] >= 32  # each task's text, once, both in one forward
    assert prefills[2][0] == 4 and prefills[2][1] < 24, prefills  # then each row's own room only
    assert warm.timing["prefill_tokens"] < 0.6 * sum(len(g.prompt_ids) for g in got)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_rows_of_very_different_lengths_prefill_apart_and_decode_together(tiny_model_dir, dtype):
    """Three rows extend cached prompts by a few tokens, one is new and long: padding them to one
    width would compute the long row's length for every row. They prefill in groups and decode in one
    batch, and give what a cold backend gives."""
    from evolver_transformers.backend import TransformersBackend

    warm = TransformersBackend(model=str(tiny_model_dir), dtype=dtype, max_batch=8)
    cold = TransformersBackend(model=str(tiny_model_dir), dtype=dtype, max_batch=8, prefix_cache=0)
    system = Message("system", "You play a text game. Pick good actions and explain nothing at all. " * 2)
    step1 = [[system, Message("user", f"Room {i}. You see a door.")] for i in range(3)]
    warm.generate([GenRequest(m, max_tokens=2) for m in step1])
    step2 = [m + [Message("assistant", "open door"), Message("user", f"Hall {i}.")] for i, m in enumerate(step1)]
    step2.append([Message("system", "Another system prompt nobody cached. " * 3),
                  Message("user", "begin")])
    reqs = [GenRequest(m, max_tokens=6, logprobs=True, temperature=0.8 if i % 2 else 0.0, seed=i)
            for i, m in enumerate(step2)]
    shapes, forward = [], warm._forward

    def spy(ids, *a, **k):
        shapes.append(tuple(ids.shape))
        return forward(ids, *a, **k)
    warm._forward = spy
    warm.timing.clear()
    got, want = warm.generate(reqs), cold.generate(reqs)
    compared = 0
    for g, w in zip(got, want):  # (bf16 rounds differently in other layouts: only fp32 is exact)
        assert g.error is None and (dtype == "bf16" or g.completion_ids == w.completion_ids)
        # In bf16 a sampled row may pick another token where two are nearly tied; after it the
        # log-probs are of different text, so they are compared up to there.
        n = len(os.path.commonprefix([g.completion_ids, w.completion_ids]))
        assert g.logprobs[:n] == pytest.approx(w.logprobs[:n], abs=1e-5 if dtype == "fp32" else 0.1)
        compared += n
    assert compared >= 3 * sum(len(w.completion_ids) for w in want) // 4
    assert not warm.timing["batch_failures"]
    prefills = [s for s in shapes if s[0] < 4]
    assert len(prefills) == 2 and sorted(s[0] for s in prefills) == [1, 3], shapes  # apart...
    assert shapes[:2] == prefills and all(s[0] == 4 for s in shapes[2:])  # ...then decoded together
    assert warm.timing["prefill_padded"] < 1.3 * warm.timing["prefill_tokens"]


def test_seeded_sampling_is_deterministic(tiny):
    def run(seeds):
        return [r.text for r in tiny.generate([GenRequest(user("tell"), max_tokens=16, temperature=1.0, seed=s)
                                               for s in seeds])]

    a = run([1, 2, 3])
    assert run([1, 2, 3]) == a
    assert run([3, 1])[::-1] == [a[0], a[2]]  # a row's sample does not depend on its batch mates
    assert len(set(a)) > 1


def test_stop_strings_and_max_tokens(tiny):
    full = tiny.generate([GenRequest(user("hi"), max_tokens=20)])[0]
    assert full.completion_tokens <= 20
    stop = full.text[4:6]
    assert stop  # the random model produced at least 6 characters
    cut = tiny.generate([GenRequest(user("hi"), max_tokens=20, stop=[stop, "never-there"], logprobs=True)])[0]
    assert cut.text == full.text[:full.text.find(stop)]
    assert cut.completion_tokens < full.completion_tokens
    assert len(cut.completion_ids) == cut.completion_tokens  # ids keep what was sampled, stop included


def test_prompt_lookup_drafts_from_the_latest_occurrence():
    from evolver_transformers.drafts import PromptLookup

    look = PromptLookup([1, 2, 3, 4, 9, 2, 3, 5, 6, 7])
    assert look.draft([2, 3], 3) == [5, 6, 7]  # "2 3" occurs twice: the latest one wins
    assert look.draft([2, 3, 4], 2) == [9, 2]  # the longer match "2 3 4" (also "3 4") beats "4" alone
    assert look.draft([2, 3, 4, 8], 4) == []  # 8 occurs nowhere before
    assert look.draft([2, 3, 4, 8, 7], 3) == [2, 3, 4]  # the reply counts too: 7 ended the prompt, 2 3 4 followed
    look = PromptLookup([7, 7])
    assert look.draft([7], 5) == [7]  # "7 7" last ended at 1: one token follows it, never more
    assert look.draft([7], 0) == []


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_prompt_lookup_leaves_replies_unchanged_and_saves_forwards_when_the_model_copies(tiny_model_dir, dtype):
    """Replies with lookup drafts equal those without, greedy and seeded-sampled alike (rejected drafts
    leave masked holes in the cache). A model that copies its prompt gets many tokens per forward."""
    from evolver_transformers.backend import TransformersBackend

    on = TransformersBackend(model=str(tiny_model_dir), dtype=dtype, prefix_cache=0)
    off = TransformersBackend(model=str(tiny_model_dir), dtype=dtype, prefix_cache=0, lookup=0)
    reqs = [GenRequest(m, max_tokens=16, logprobs=True, temperature=0.7 if i == 2 else 0.0, seed=i)
            for i, m in enumerate(CONVERSATIONS)]
    shapes, forward = [], on._forward
    on._forward = lambda ids, *a, **k: shapes.append(tuple(ids.shape)) or forward(ids, *a, **k)
    got, want = on.generate(reqs), off.generate(reqs)
    assert any(t > 1 for _, t in shapes[1:])  # drafts were fed (and mostly rejected: a random model)
    for g, w in zip(got, want):
        assert g.error is None and (dtype == "bf16" or g.completion_ids == w.completion_ids)
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-5 if dtype == "fp32" else 0.1)

    text = on.tokenizer("abcdefghijklmnop", add_special_tokens=False)["input_ids"]
    assert len(set(text)) == len(text) > 4
    succ = dict(zip(text, text[1:]))

    def copying(real):  # a model that recites the alphabet it was shown, whatever else it sees
        def run(ids, mask, pos, cache, logits_to_keep=0):
            logits, cache = real(ids, mask, pos, cache, logits_to_keep)
            fed = ids[:, ids.shape[1] - logits.shape[1]:]
            nxt = torch.tensor([[succ.get(int(t), text[0]) for t in row] for row in fed], device=logits.device)
            return torch.full_like(logits, -1e4).scatter_(-1, nxt[..., None], 1e4), cache
        return run
    on._forward, off._forward = copying(forward), copying(off._forward)
    for temperature in (0.0, 1.0):  # (the copying model's logits leave sampling no choice either)
        req = [GenRequest(user("Recite: abcdefghijklmnop"), max_tokens=40, logprobs=True,
                          temperature=temperature, seed=3)]
        on.timing.clear(), off.timing.clear()
        fast, slow = on.generate(req)[0], off.generate(req)[0]
        assert fast.completion_ids == slow.completion_ids and len(fast.completion_ids) == 40
        assert fast.logprobs == pytest.approx(slow.logprobs, abs=1e-5)
        assert off.timing["decode_steps"] == 39 and on.timing["decode_steps"] <= 8, on.timing


def test_option_drafts_draft_the_rest_of_the_options_the_reply_begins():
    from evolver_transformers.drafts import OptionDrafts

    d = OptionDrafts([9, 9, 9], [[1, 2, 3, 4], [1, 2, 5], [6, 7], []])
    assert d.draft([6], 5) == [7]  # one option left: all of its rest
    assert d.draft([1], 5) == [2]  # two left: the part they share
    assert d.draft([1, 2], 5) == [3, 4]  # they part here: the first one's rest
    assert d.draft([], 1) == [1]  # (the budget caps every draft)
    d = OptionDrafts([4, 5, 6, 4, 5, 8], [[1, 2]])
    assert d.draft([1, 2], 3) == []  # the reply is the whole option: nothing of it is left
    d = OptionDrafts([4, 5, 6, 4, 5, 8], [[1, 2]])
    assert d.draft([4], 3) == [5, 8, 4]  # a reply no option begins: prompt lookup (the reply counts)
    assert d.draft([4, 5], 1) == [8]  # (which sees the reply grow from one call to the next)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_option_drafts_leave_replies_unchanged_and_save_forwards_when_the_model_writes_an_option(
        tiny_model_dir, temperature):
    """A written choice drafts the rest of the option it has begun, which prompt lookup cannot guess
    when the prompt does not hold the option as written: same reply, a fraction of the forwards."""
    from evolver_transformers.backend import TransformersBackend

    b = TransformersBackend(model=str(tiny_model_dir), dtype="fp32", prefix_cache=0)
    options = ["abcdefghijklmnop", "abzyx"]  # (the tiny model's tokens are nearly characters)
    target = b.tokenizer(options[0], add_special_tokens=False)["input_ids"]
    assert len(target) > 6 and len(set(target)) == len(target)
    succ = dict(zip(target, target[1:]))
    eos = b.tokenizer.convert_tokens_to_ids("<|im_end|>")
    real = b._forward

    def writing(ids, mask, pos, cache, logits_to_keep=0):  # a model that writes option 0, then stops
        logits, cache = real(ids, mask, pos, cache, logits_to_keep)
        fed = ids[:, ids.shape[1] - logits.shape[1]:]
        nxt = torch.tensor([[succ.get(int(t), eos if int(t) == target[-1] else target[0]) for t in row]
                            for row in fed], device=logits.device)
        return torch.full_like(logits, -1e4).scatter_(-1, nxt[..., None], 1e4), cache
    b._forward = writing
    msgs = user("Pick one of the two things you were told about.")
    steps = {}
    for drafts in (None, options):
        b.timing.clear()
        out = b.generate([GenRequest(msgs, max_tokens=20, temperature=temperature, seed=1, logprobs=True,
                                     drafts=drafts)])[0]
        assert out.text == options[0] and out.error is None
        steps[bool(drafts)] = (b.timing["decode_steps"], out.completion_ids)
    assert steps[True][1] == steps[False][1]
    assert steps[False][0] >= len(target) - 3 and steps[True][0] <= 3, steps


def test_race_samples_the_softmax_and_its_noise_stream_ignores_how_positions_are_checked():
    from evolver_transformers.backend import Race

    def race(seed):
        return Race.for_request(GenRequest(user("x"), temperature=0.7, seed=seed), torch.device("cpu"), 4)

    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    for seed, t in enumerate((0.7, 1.0, 2.0)):
        won = (logits / t + race(seed).noise(0, 20000)).argmax(dim=-1)
        freq = torch.bincount(won, minlength=4) / 20000
        assert torch.allclose(freq, torch.softmax(logits / t, dim=-1), atol=0.015), (t, freq)
    r = race(5)
    one_by_one = torch.cat([r.noise(j, 1) for j in range(8)])
    r = race(5)
    # a forward checking 3 positions from 0, then 4 from 2 (one draft accepted), then 1 at 7
    chunks = [r.noise(0, 3)[:2], r.noise(2, 4)[:3], r.noise(5, 2), r.noise(7, 1)]
    assert torch.equal(torch.cat(chunks), one_by_one)
    assert not torch.equal(race(6).noise(0, 8), one_by_one)
    assert Race.for_request(GenRequest(user("x"), temperature=0.0), torch.device("cpu"), 4) is None


def test_eos_ends_a_row_without_disturbing_others(tiny, monkeypatch):
    monkeypatch.setattr(tiny, "lookup", 0)  # one token per forward, so the forced EOS lands on token 3
    reqs = [GenRequest(user("x"), max_tokens=10), GenRequest(user("a much longer prompt here"), max_tokens=10)]
    plain = [tiny.generate([r])[0] for r in reqs]
    calls = {"n": 0}

    def force_eos(_module, _inputs, output):  # second batch decode: row 0 (shortest prompt) emits EOS
        calls["n"] += output.shape[0] == 2  # (the prompts, of different lengths, prefill apart)
        if calls["n"] == 2 and output.shape[0] == 2:
            output[0, -1, :] = -1e4
            output[0, -1, 2] = 1e4
        return output

    tiny._prefixes.clear()  # no cached prompts: rows are laid out by prompt length, the shortest first
    handle = tiny.hf_model.lm_head.register_forward_hook(force_eos)
    try:
        res = tiny.generate([GenRequest(r.messages, max_tokens=10, logprobs=True) for r in reqs])
    finally:
        handle.remove()
    assert res[0].completion_ids[-1] == 2 and res[0].completion_tokens == 3
    assert res[0].text == tiny.tokenizer.decode(res[0].completion_ids[:-1], skip_special_tokens=True)
    assert res[1].text == plain[1].text


def test_overlong_prompt_fails_alone(tiny):
    out = tiny.generate([GenRequest(user("y" * 400)), GenRequest(user("ok"), max_tokens=3)])
    assert out[0].text == "" and "context window is 256" in out[0].error
    assert out[1].error is None and out[1].completion_tokens == 3


def test_a_failing_batch_is_retried_row_by_row_and_said(tiny, monkeypatch, caplog):
    """Only the culprit errors; and the fallback is counted and logged, since a bug that fails every
    batch would otherwise only show as slowness (it once did)."""
    prefill, culprit = tiny._prefill, tiny.chat_ids(user("x"))

    def fussy(prompts, extra=0):
        if len(prompts) > 1 or prompts[0] == culprit:
            raise RuntimeError("boom")
        return prefill(prompts, extra)
    monkeypatch.setattr(tiny, "_prefill", fussy)
    tiny.timing.clear()
    with caplog.at_level("WARNING"):
        out = tiny.generate([GenRequest(user("ok"), max_tokens=3), GenRequest(user("x"), max_tokens=3)])
    assert out[0].error is None and out[0].completion_tokens == 3
    assert "RuntimeError: boom" in out[1].error
    assert tiny.timing["batch_failures"] == 1 and "a batch of 2 failed (RuntimeError: boom)" in caplog.text


def test_choose_shared_kv_equals_naive(tiny):
    options = ["go north", "look", "take the red apple from the table", "", "x", "open fridge", "inventory",
               "go south", "eat", "put apple in fridge", "drop lamp", "examine <|im_end|> note", "go", "look"]
    reqs = [ChoiceRequest(CONVERSATIONS[1], options), ChoiceRequest(user("pick"), ["a", "bb"])]
    shared, naive = tiny.choose(reqs), tiny.choose_naive(reqs)
    for s, n in zip(shared, naive):
        assert s.error is None and s.index == n.index
        finite = [i for i, v in enumerate(n.scores) if v != float("-inf")]
        assert [s.scores[i] for i in finite] == pytest.approx([n.scores[i] for i in finite], abs=1e-4)
    assert shared[0].scores[3] == float("-inf")  # the empty option can never win
    assert shared[0].completion_tokens == tiny.count_tokens(options[shared[0].index])
    assert shared[0].prompt_tokens == len(tiny.chat_ids(CONVERSATIONS[1]))


def test_choices_marked_write_are_written_and_matched_in_a_mixed_batch(tiny, monkeypatch):
    options = ["go north", "look", "open fridge"]
    scored, written = ChoiceRequest(user("pick"), options), ChoiceRequest(user("pick"), options, write=True)
    written_out = []
    generate = tiny.generate

    def spy(reqs):
        out = generate(reqs)
        written_out.extend(out)
        return out
    monkeypatch.setattr(tiny, "generate", spy)
    got = tiny.choose([scored, written, scored])
    assert len(written_out) == 1  # only the request marked write was written
    text = written_out[0].text.strip().lower()
    want = [difflib.SequenceMatcher(None, text, o).ratio() for o in options]
    assert got[1].scores == pytest.approx(want) and got[1].index == want.index(max(want))
    assert got[1].completion_tokens == written_out[0].completion_tokens
    ranked = tiny.choose_naive([scored])[0]
    for r in (got[0], got[2]):  # the others ranked by likelihood, in request order
        assert r.scores == pytest.approx(ranked.scores, abs=1e-4)


def test_options_that_start_alike_share_their_start(tiny_model_dir):
    from evolver_transformers.backend import TransformersBackend

    b = TransformersBackend(model=str(tiny_model_dir), dtype="fp32", prefix_cache=0)
    options = ["go north", "go south", "go", "go north", "look"]
    req = ChoiceRequest(user("where now?"), options)
    got, naive = b.choose([req])[0], b.choose_naive([req])[0]
    assert got.scores == pytest.approx(naive.scores, abs=1e-4) and got.scores[0] == got.scores[3]
    # fed once each: "g", "go", "go ", then "n", "no", "nor", "nort" and "s", "so", "sou", "sout"; "l", "lo", "loo"
    assert b.timing["choose_tokens"] == len(b.chat_ids(req.messages)) + 3 + 4 + 4 + 3


def test_choose_reuses_a_shared_prompt_prefix_exactly(tiny):
    system = Message("system", "You are an agent in a small kitchen with a fridge. " * 2)  # < 256 chars
    steps = [[system, Message("user", f"Step {i}: you did {'look ' * i}. Next action:")] for i in range(4)]
    options = ["go north", "look", "open fridge", "take the red apple"]
    tiny._prefixes.clear()
    reused = tiny.choose([ChoiceRequest(m, options) for m in steps])
    assert len(tiny._prefixes) == 5  # each prompt's KV was kept for the next step, and their shared prefix
    naive = tiny.choose_naive([ChoiceRequest(m, options) for m in steps])
    for r, n in zip(reused, naive):
        assert r.scores == pytest.approx(n.scores, abs=1e-4) and r.index == n.index
    tiny.weights_changed("tiny-retrained")
    assert not tiny._prefixes  # KV from old weights is never reused


def test_choose_batches_requests_in_one_forward_and_equals_naive(tiny_model_dir, monkeypatch):
    from evolver_transformers.backend import TransformersBackend

    b = TransformersBackend(model=str(tiny_model_dir), dtype="fp32", max_batch=8)
    system = Message("system", "You are an agent in a small kitchen with a fridge and a lamp. " * 2)
    options = [["go north", "look", "", "take the red apple"]] * 3  # similar rows: one batch
    episodes = [[system, Message("user", f"Episode {e}: step {{}}. Next action:")] for e in range(3)]

    def step(i):
        return [ChoiceRequest([m[0], Message("user", m[1].content.format("look " * i))], options[e])
                for e, m in enumerate(episodes)]
    calls = []
    decoder = b.hf_model.get_decoder()
    original = decoder.forward
    monkeypatch.setattr(decoder, "forward", lambda *a, **k: calls.append(k["input_ids"].shape) or original(*a, **k))
    first = b.choose(step(0))
    # the episodes' shared system prompt once, then the three requests in one forward
    assert len(calls) == 2 and calls[0][0] == 1 and calls[1][0] == 3
    matched = []
    match = b._prefix_match
    monkeypatch.setattr(b, "_prefix_match", lambda p: matched.append(match(p)[1]) or match(p))
    second = b.choose(step(3))  # each prompt extends its episode's previous one: cached prefixes reused
    assert len(calls) == 3 and min(matched) >= 32
    for got, reqs in ((first, step(0)), (second, step(3))):
        for g, n in zip(got, b.choose_naive(reqs)):
            assert g.error is None and g.index == n.index
            finite = [i for i, v in enumerate(n.scores) if v != float("-inf")]
            assert [g.scores[i] for i in finite] == pytest.approx([n.scores[i] for i in finite], abs=1e-4)
    assert first[1].scores[2] == float("-inf")
    # rows of very different lengths are split rather than padded
    calls.clear()
    uneven = [ChoiceRequest(user("hi"), ["a", "b"]),
              ChoiceRequest(user("a much longer question about the kitchen " * 3), ["yes", "no", "maybe later"])]
    got = b.choose(uneven)
    assert [c[0] for c in calls] == [1, 1]
    for g, n in zip(got, b.choose_naive(uneven)):
        assert g.scores == pytest.approx(n.scores, abs=1e-4)
    # options that overflow the context window packed in one row: that request alone is chunked
    many = [f"option number {i:02d} with words" for i in range(12)]
    mixed = [ChoiceRequest(user("q" * 40), many), ChoiceRequest(user("pick"), ["a", "bb"])]
    assert len(b.chat_ids(mixed[0].messages)) + sum(len(b.option_ids(o)) - 1 for o in many) > b.context_window
    for g, n in zip(b.choose(mixed), b.choose_naive(mixed)):
        assert g.error is None and g.scores == pytest.approx(n.scores, abs=1e-4)


def test_choose_with_end_token_and_errors(tiny_model_dir, tiny):
    from evolver_transformers.backend import TransformersBackend

    b = TransformersBackend(model=str(tiny_model_dir), dtype="fp32", choose_eos=True)
    req = ChoiceRequest(user("q"), ["yes", "no", "maybe so"])
    shared, naive = b.choose([req])[0], b.choose_naive([req])[0]
    assert shared.scores == pytest.approx(naive.scores, abs=1e-4)
    assert shared.scores != pytest.approx(tiny.choose([req])[0].scores, abs=1e-4)
    bad = b.choose([ChoiceRequest(user("q"), []), ChoiceRequest(user("z" * 300), ["a"])])
    assert bad[0].index == -1 and "no options" in bad[0].error
    assert bad[1].index == -1 and "context window" in bad[1].error


def test_bf16_autocast_runs(tiny_model_dir):
    from evolver_transformers.backend import TransformersBackend

    b = TransformersBackend(model=str(tiny_model_dir), dtype="bf16", threads=1)
    assert b.hf_model.dtype == torch.float32  # weights stay fp32; only the compute is bf16
    out = b.generate([GenRequest(user("hi"), max_tokens=4), GenRequest(user("there you"), max_tokens=4)])
    assert all(o.error is None and o.completion_tokens == 4 for o in out)
    assert b.choose([ChoiceRequest(user("q"), ["a", "b"])])[0].index in (0, 1)
    b.close()
    with pytest.raises(BackendError):
        b.generate([GenRequest(user("hi"))])


def test_load_weights_swaps_in_place(tiny_model_dir, tmp_path):
    from evolver_transformers.backend import TransformersBackend

    b = TransformersBackend(model=str(tiny_model_dir), dtype="fp32")
    req = [GenRequest(user("hi"), max_tokens=8, logprobs=True)]
    before, model_before = b.generate(req)[0], b.model
    state = {k: v.clone() for k, v in b.hf_model.state_dict().items()}
    torch.manual_seed(1)
    noisy = {k: v + 0.5 * torch.randn_like(v) for k, v in state.items()}
    b.load_weights(noisy)
    after = b.generate(req)[0]
    assert b.model != model_before and after.logprobs != before.logprobs
    b.load_weights(state, model_id="restored")
    assert b.model == "restored" and b.generate(req)[0].logprobs == pytest.approx(before.logprobs, abs=1e-6)
    b.load_weights(tiny_model_dir)  # a folder works too
    assert b.generate(req)[0].completion_ids == before.completion_ids
    with torch.no_grad():
        b.hf_model.model.norm.weight.mul_(2)  # "training in place"
    b.weights_changed()
    assert b.model not in (model_before, "restored") and "+" in b.model
    with pytest.raises(BackendError, match="do not match"):
        b.load_weights({"nope.weight": torch.zeros(1)})


def test_unknown_model_and_dtype():
    from evolver_transformers.backend import TransformersBackend

    with pytest.raises(BackendError, match="neither"):
        TransformersBackend(model="/nonexistent/folder")
    with pytest.raises(BackendError, match="dtype"):
        TransformersBackend(model="/nonexistent/folder", dtype="int3")


def test_device_option(tiny_model_dir):
    import torch

    from evolver_transformers.backend import TransformersBackend

    b = TransformersBackend(model=str(tiny_model_dir), dtype="fp32", device="cpu")
    assert b.device.type == "cpu"
    with pytest.raises(BackendError, match="sample_device"):
        TransformersBackend(model=str(tiny_model_dir), dtype="fp32", sample_device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(BackendError, match="no CUDA GPU"):
            TransformersBackend(model=str(tiny_model_dir), dtype="fp32", device="cuda")
        assert TransformersBackend(model=str(tiny_model_dir), dtype="fp32").device.type == "cpu"  # auto


@pytest.mark.skipif("not __import__('torch').cuda.is_available()", reason="needs a CUDA GPU")
def test_cuda_generation_matches_cpu_greedy_and_logprobs(tiny_model_dir):
    from evolver_transformers.backend import TransformersBackend

    cpu = TransformersBackend(model=str(tiny_model_dir), dtype="fp32", device="cpu")
    gpu = TransformersBackend(model=str(tiny_model_dir), dtype="fp32", device="cuda")
    reqs = [GenRequest(c, max_tokens=12, temperature=0.0, logprobs=True) for c in CONVERSATIONS]
    for a, b in zip(cpu.generate(reqs), gpu.generate(reqs)):
        assert a.completion_ids == b.completion_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-3
    sampled = [GenRequest(user("tell"), max_tokens=16, temperature=1.0, seed=s) for s in (1, 2, 3)]
    first = [r.text for r in gpu.generate(sampled)]
    assert [r.text for r in gpu.generate(sampled[::-1])][::-1] == first
    # drawing on the CPU: the CPU backend's samples (a rounding difference in the logits may rarely
    # tip one draw, so most, not all, must match)
    gpu.sample_device = "cpu"
    same = [a.text == b.text for a, b in zip(gpu.generate(sampled), cpu.generate(sampled))]
    assert sum(same) >= 2, same


def test_the_backend_runs_the_gqa_attention(tiny):
    assert tiny.hf_model.config._attn_implementation == "evolver_gqa_sdpa"


def test_a_looping_reply_stops_at_its_third_copy_of_a_line(tiny, monkeypatch):
    from evolver_transformers.backend import repeated_line

    assert repeated_line(["1. go north", "2. Go north", "- go north ", "", "look"]) == 3
    monkeypatch.setattr(tiny, "lookup", 0)  # one token per forward: the forced cycle below is exact
    cycle = tiny.tokenizer.encode("go\n", add_special_tokens=False)
    n = {"i": 0}

    def loop(_module, _inputs, output):  # every decoding step writes the next token of "go\n"
        if output.shape[1] == 1:
            output[:, -1, :] = -1e4
            output[:, -1, cycle[n["i"] % len(cycle)]] = 1e4
            n["i"] += 1
        return output

    tiny._prefixes.clear()
    handle = tiny.hf_model.lm_head.register_forward_hook(loop)
    try:
        replies = []
        for k in (None, 3):
            n["i"] = 0
            replies.append(tiny.generate([GenRequest(user("x"), max_tokens=40, max_line_repeats=k)])[0])
        plain, stopped = replies
    finally:
        handle.remove()
    assert plain.completion_tokens == 40
    assert stopped.completion_tokens < 40 and repeated_line(stopped.text.split("\n")[:-1]) == 3
    assert stopped.text.endswith("go\n") and plain.text.startswith(stopped.text)
