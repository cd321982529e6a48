"""Shared-prefix log-probs: samples with a common prompt prefix run it once, with the same log-probs,
entropies and gradients as rows of their own, and fewer tokens through the trunk."""
import pytest
import torch

from evolver_training.logprobs import completion_logprobs, prefix_groups


@pytest.fixture(scope="module")
def model(tiny_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    with torch.no_grad():  # a random model whose outputs depend on the context
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m


def samples():
    system = [1] + [5 + (i * 7) % 40 for i in range(30)]  # 31 tokens every prompt starts with
    prompts = [system + [9, 8, 7, 6, 5, 4],  # an episode's steps: longer shared parts
               system + [9, 8, 7, 6, 11],
               system + [9, 8, 3],
               system,  # a prompt that is all prefix: its last token must stay its own
               [1, 44, 45, 46, 47],  # nothing shared
               system + [9, 8, 7, 6, 5, 4]]  # a GRPO group: the same prompt twice
    completions = [[3, 4, 2], [6, 2], [7, 7, 7, 2], [12, 2], [8, 9, 2], [4, 2]]
    return prompts, completions


def fed_tokens(model):
    """Counts the tokens that enter the trunk."""
    seen = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, i, o: seen.append(i[0].numel()))
    return seen, hook


def test_groups_share_the_longest_prefix_that_saves_work():
    prompts, completions = samples()
    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    groups = prefix_groups(prompts, lengths, share=16)
    assert sorted(i for _, g in groups for i in g) == list(range(len(prompts)))
    shared = [(L, sorted(g)) for L, g in groups if L]
    assert shared and all(L <= min(len(prompts[i]) for i in g) - 1 for L, g in shared)
    assert (0, [4]) in groups  # the unrelated prompt runs alone
    assert any({0, 5} <= set(g) for _, g in shared)  # identical prompts go together
    # no prefix reaches past a member's last prompt token
    assert all(L < len(prompts[i]) for L, g in groups for i in g)
    # a threshold above every common prefix: every sample alone
    assert all(L == 0 and len(g) == 1 for L, g in prefix_groups(prompts, lengths, share=37))


def test_shared_prefix_gives_the_same_logprobs_entropies_and_gradients(model):
    prompts, completions = samples()
    got = {}
    for share in (0, 16):
        model.zero_grad()
        seen, hook = fed_tokens(model)
        lp, ent = completion_logprobs(model, prompts, completions, share=share, chunk=3, with_entropy=True)
        hook.remove()
        (-(lp * torch.linspace(0.5, 1.5, len(lp))).sum()).backward()
        got[share] = (lp.detach(), ent, {n: p.grad.clone() for n, p in model.named_parameters()}, sum(seen))
    (lp0, ent0, g0, fed0), (lp1, ent1, g1, fed1) = got[0], got[16]
    assert lp1.shape == (sum(map(len, completions)),)
    assert torch.allclose(lp1, lp0, atol=1e-5)
    assert torch.allclose(ent1, ent0, atol=1e-5)
    for name, g in g0.items():  # float rounding only: other shapes, other summation orders
        assert (g1[name] - g).norm() <= 1e-5 * g.norm(), name
    # rows of their own pad to the longest sample; shared, the 31-token prefix runs once per group
    assert fed1 < fed0 - 31


def test_shared_prefix_matches_rows_under_no_grad_and_alone(model):
    prompts, completions = samples()
    with torch.no_grad():
        full = completion_logprobs(model, prompts, completions, share=16)
        one = torch.cat([completion_logprobs(model, [p], [c]) for p, c in zip(prompts, completions)])
    assert torch.allclose(full, one, atol=1e-5)


def test_detached_prompts_give_the_same_logprobs_and_train_only_through_the_completion(model):
    prompts, completions = samples()
    model.zero_grad(set_to_none=True)
    plain = completion_logprobs(model, prompts, completions)
    det = completion_logprobs(model, prompts, completions, detach_prompt=True)
    assert torch.allclose(det, plain, atol=1e-5)
    # The backward pass reaches the weights, but only through the completion tokens' own computation:
    # gradients differ from the full graph's (the prompt's keys and values are constants here).
    det.sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    plain.sum().backward()
    full = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads and all(g.norm() > 0 for n, g in grads.items() if "layers" in n and "proj" in n)
    assert any((grads[n] - full[n]).norm() > 1e-4 * full[n].norm() for n in grads)
