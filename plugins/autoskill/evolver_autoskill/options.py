"""AutoSkill's options: ``[plugins.autoskill]`` in evolver.toml, or ``--set plugins.autoskill.KEY=VALUE``."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from evolver import ConfigError


class AutoSkillOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    embedder: str = "all-MiniLM-L6-v2"
    """Dense model: the offline all-MiniLM-L6-v2 (default), any sentence-transformers folder, or "hashing"."""
    lam: float = 0.6
    """λ in Rel = λ·d̂ + (1−λ)·b̂."""
    eta: float = 0.45
    """η: minimum fused score to inject a skill."""
    top_k: int = 3
    """K: retrieved skills injected per request (always-on skills come on top)."""
    dense_floor: float = 0.2
    """Cosine at or below which a skill counts as unrelated."""
    rewriter: Literal["rules", "llm"] = "rules"
    """Query rewriting: "rules" (no model call per request) or "llm" (the judge role's model)."""
    extractor: Literal["rules", "llm"] = "rules"
    """Skill extraction: "rules" (deterministic; right for small local models) or "llm" (the judge role)."""
    judge: bool = False
    """Ask the judge role's model for add/merge/discard and to write merges (guardrails still apply)."""
    learn: bool = True
    """Extract skills from served conversations in the background."""
    retrieval_in_runs: bool = False
    """Let `evolver run` pick injected skills with this retriever (the select_skills hook)."""
    gate_benchmark: str | None = None
    """Benchmark whose validation split gates every add/merge (None: changes are not gated)."""
    gate_split: Literal["train", "dev"] = "dev"
    gate_per_category: int = 2
    gate_tolerance: float = 0.0
    """A change is reverted when the validation score drops by more than this."""
    retire_min_uses: int = 5
    """Retirement needs at least this many retrievals of a skill."""
    max_batch: int = 8
    """Concurrent requests answered in one backend batch."""
    batch_wait_ms: float = 5.0
    """How long the batcher waits for more requests to join a batch."""


def load_options(config) -> AutoSkillOptions:
    raw = dict((getattr(config, "plugins", None) or {}).get("autoskill", {}))
    try:
        return AutoSkillOptions(**raw)
    except ValidationError as exc:
        fields = sorted(AutoSkillOptions.model_fields)
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"[plugins.autoskill]: {problems}. Known keys: {', '.join(fields)}") from None
