"""Rollout engines: what plays the episodes during training, behind one interface.

An engine exposes ``backend`` (a core :class:`evolver.backends.base.Backend`, so rollouts go through
the same harness and evaluator as every evaluation) and ``sync(model, version)``, which makes the
engine generate with the learner's current weights:

- ``transformers`` (CPU default): the engine's model *is* the learner's model, so a sync costs
  nothing but forgetting the prefix KV it cached under the old weights.
- ``vllm`` (GPU): a separate engine; every sync pushes the weights into it and resets its prefix
  cache (inside ``VLLMBackend.load_weights``). The harness puts skills right after the system
  prompt, so a group's rollouts share that prefix in vLLM's cache between syncs.
"""
from __future__ import annotations

import time

from evolver import Backend, EvolverError, SampledBackend


class RolloutBackend(SampledBackend):
    """The core's :class:`evolver.backends.sampling.SampledBackend` as rollouts need it: every generation
    sampled at ``temperature`` with token ids and log-probs, its seed ``seed * 1_000_003 + n`` from the
    request counter (:meth:`reseed` per step, so a step's rollouts do not depend on earlier steps and a
    resumed run samples what an uninterrupted one would have). ``model`` is the inner backend's.
    Every choice between valid actions is made by writing and matching (``scores_options`` is False),
    so the policy is trained on text it wrote."""

    name = "rollout"
    seeded_by_episode = False  # the counter, not the episode, seeds a rollout's requests

    def __init__(self, inner: Backend, temperature: float = 1.0, max_tokens: int | None = None, seed: int = 0):
        super().__init__(inner, temperature, seed=seed, max_tokens=max_tokens, logprobs=True)

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.inner.model

    def choose(self, requests):
        return self.choose_by_writing(requests)

    def writes_choices(self, requests) -> bool:
        return True


class TransformersEngine:
    name = "transformers"

    def __init__(self, backend):
        if not hasattr(backend, "hf_model"):
            raise EvolverError(f"the transformers engine needs the transformers backend, got {backend.name!r}")
        self.backend = backend
        self.eos_ids = set(backend.eos_ids)

    def learner(self):
        """The model to train: the engine's own (one copy of the weights in memory)."""
        return self.backend.hf_model

    def sync(self, model, version: str) -> float:
        t0 = time.perf_counter()
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA wraps in place
        if base is not self.backend.hf_model:
            self.backend.load_weights(_state(model), model_id=version)
        else:
            self.backend.weights_changed(model_id=version)
        _to_cluster(self, model, version)
        return time.perf_counter() - t0


class VLLMEngine:
    name = "vllm"

    def __init__(self, backend, model_path: str):
        if not hasattr(backend, "llm"):
            raise EvolverError(f"the vllm engine needs the vllm backend, got {backend.name!r}")
        self.backend = backend
        self.model_path = model_path
        tok = backend.tokenizer
        self.eos_ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()

    def learner(self):
        """A separate copy on the learner's device: vLLM keeps its own weights."""
        return _load_learner(self.model_path)

    def sync(self, model, version: str) -> float:
        t0 = time.perf_counter()
        self.backend.load_weights(_state(model), model_id=version)
        _to_cluster(self, model, version)
        return time.perf_counter() - t0


def _to_cluster(engine, model, version: str) -> None:
    """With ``[cluster] engine = "ray"``, rollouts play on the cluster's workers: they get the new weights
    (through its object store) before any rollout of this version; until then rollouts play here."""
    run = getattr(engine, "run", None)
    if run is not None:
        from evolver import share_weights

        share_weights(run, engine.backend, lambda: _state(model), version)


def _load_learner(path: str):
    import torch
    from transformers import AutoModelForCausalLM

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, local_files_only=True).to(dev)


def learner_only(run, name: str | None = None):
    """The model to train, without an engine to play rollouts: a data-parallel rank other than 0
    (``evolver_training.parallel``), which only computes gradients. No vLLM engine is started for it."""
    rc = run.config.role("executor")
    if (name or rc.backend) == "vllm":
        from evolver_transformers import embedded_model_dir

        return _load_learner(rc.model or str(embedded_model_dir()))
    return make_engine(run, name).learner()


def _state(model) -> dict:
    """Plain HF weight names; a LoRA model is merged first (the engine knows nothing of adapters)."""
    if hasattr(model, "merge_and_unload"):
        import copy

        model = copy.deepcopy(model).merge_and_unload()
    return {k: v.detach() for k, v in model.state_dict().items()}


def make_engine(run, name: str | None = None):
    """The engine for the run's executor role: its backend decides (transformers or vllm)."""
    backend = run.backend("executor")
    inner = getattr(backend, "inner", backend)  # CountingBackend wraps the real one
    kind = name or inner.name
    if kind == "transformers":
        engine = TransformersEngine(inner)
    elif kind == "vllm":
        rc = run.config.role("executor")
        from evolver_transformers import embedded_model_dir

        engine = VLLMEngine(inner, rc.model or str(embedded_model_dir()))
    else:
        engine = None
    if engine is not None:
        engine.run = run  # its cluster, if any, gets each sync's weights
        return engine
    raise EvolverError(f"no rollout engine for backend {kind!r}: GRPO trains a local model, so set "
                       "roles.executor.backend to 'transformers' (CPU) or 'vllm' (GPU)")
