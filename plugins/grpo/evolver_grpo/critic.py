"""The PPO critic: a value per completion token, the value of the state that token is chosen in.

Two kinds (``critic`` option):

- ``head``: a ``Linear(hidden, 1)`` on the policy's own last hidden state, the one that predicts the
  token, so the policy's forward gives log-probs and values at once. By default the head is a probe
  on the policy's features: the policy's update sees only its own loss. ``critic_trunk_grad`` lets the
  value loss train the shared trunk too (scaled by ``vf_coef``), as in shared-trunk PPO.
- ``model``: a separate trunk (the decoder of ``critic_model``, an HF causal LM folder; default a copy
  of the policy's starting weights, as critics are usually initialised) with its own ``Linear``. Twice
  the memory of the policy's weights, and a forward of its own, but the critic never disturbs the policy.

Hidden states come from the same prefix-sharing machinery as the log-probs (:mod:`evolver_training.logprobs`),
so samples sharing a prompt prefix run it once here too.
"""
from __future__ import annotations

import contextlib
import copy

import torch

from evolver_training import completion_hidden, flat_masks, split_model  # noqa: F401 (completion_hidden: re-exported)
from evolver_transformers import use_autocast

KINDS = ("head", "model")


def head_logprobs(model, hidden: torch.Tensor, completions: list[list[int]], *, chunk: int = 1024,
                  autocast: bool | str | None = False, entropy_grad: bool = False, masks: list | None = None):
    """(log-probs, entropies) of the completion tokens from their hidden states, through the policy's
    LM head ``chunk`` positions at a time; the entropies carry a gradient when ``entropy_grad`` (an
    entropy bonus), else they are detached. ``masks``: as ``completion_logprobs``' (a tool call's grammar)."""
    head = split_model(model)[1]
    dev = hidden.device
    tgt = torch.tensor([t for c in completions for t in c], device=dev, dtype=torch.long)
    ctx = torch.autocast(dev.type, dtype=torch.bfloat16) if use_autocast(autocast, dev) else contextlib.nullcontext()
    allowed = flat_masks(masks, completions, dev)
    lps, ents = [], []
    with ctx:
        for s in range(0, len(tgt), chunk):
            logits = head(hidden[s:s + chunk]).float()
            if allowed is not None:  # the dtype's floor, not -inf: 0 * -inf would make the entropy's gradient NaN
                logits = logits.masked_fill(~allowed[s:s + chunk, :logits.shape[-1]], torch.finfo(logits.dtype).min)
            norm = torch.logsumexp(logits, dim=-1)
            lps.append(logits.gather(-1, tgt[s:s + chunk, None]).squeeze(-1) - norm)
            with contextlib.nullcontext() if entropy_grad else torch.no_grad():
                logp_all = logits - norm[:, None]
                ents.append(-(logp_all.exp() * logp_all).sum(-1))
    if not lps:
        empty = torch.zeros(0, device=dev)
        return empty, empty
    return torch.cat(lps), torch.cat(ents)


class Critic(torch.nn.Module):
    """Values of completion tokens. ``kind`` "head": ``values(hidden=...)`` from the policy's hidden
    states; "model": ``values(prompts=..., completions=...)`` through its own trunk."""

    def __init__(self, kind: str, hidden_size: int, trunk: torch.nn.Module | None = None):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"unknown critic {kind!r}; choose from {', '.join(KINDS)}")
        if (trunk is None) != (kind == "head"):
            raise ValueError("a 'model' critic needs its trunk, a 'head' critic has none")
        self.kind = kind
        self.trunk = trunk
        self.value = torch.nn.Linear(hidden_size, 1)
        # Values start at 0 everywhere: the first advantages are the plain (discounted) returns.
        torch.nn.init.zeros_(self.value.weight)
        torch.nn.init.zeros_(self.value.bias)

    @classmethod
    def build(cls, kind: str, policy, path: str | None = None) -> "Critic":
        """A critic for ``policy`` on its device: a head, or a trunk from ``path`` (an HF causal LM
        folder; None: a copy of the policy's current weights) with its own head."""
        base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
        dev = next(base.parameters()).device
        if kind == "head":
            return cls("head", base.config.hidden_size).to(dev)
        if path:
            from transformers import AutoModelForCausalLM

            lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        else:
            lm = copy.deepcopy(base)
        lm.config.use_cache = False
        trunk = split_model(lm)[0].requires_grad_(True)
        trunk.eval()  # no dropout: the old values and the clipped value loss compare like with like
        return cls("model", lm.config.hidden_size, trunk).to(dev)

    def values(self, hidden: torch.Tensor | None = None, prompts=None, completions=None, *, share: int = 64,
               autocast: bool | str | None = False) -> torch.Tensor:
        """One value per completion token, packed in sample order (fp32)."""
        if self.kind == "model":
            hidden = completion_hidden(self.trunk, prompts, completions, share=share, autocast=autocast)
        return self.value(hidden.float()).squeeze(-1)
