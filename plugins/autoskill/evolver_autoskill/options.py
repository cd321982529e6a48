"""AutoSkill's options: ``[plugins.autoskill]`` in evolver.toml, or ``--set plugins.autoskill.KEY=VALUE``."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evolver import plugin_options


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
    # -- who may call `evolver serve` (evolver_autoskill/auth.py)
    keys: dict[str, list[str]] = {}
    """API keys, each bound to its scopes: {"<key>" = ["alice", "team"]}. A key reads and writes only its
    scopes; a request naming none uses the first. Prefer `keys_file` for keys that must not be committed."""
    keys_file: str | None = None
    """A TOML file of keys in the same shape ("<key>" = ["alice"], one line per key; chmod 600). With neither
    `keys` nor `keys_file`, serve is open and listens on loopback only."""
    # -- per-request limits of `evolver serve` (evolver_autoskill/request.py); over one is a 4xx naming it
    max_body_bytes: int = Field(1_000_000, ge=1)
    """Request body size (413 above it): 1 MB is ~250k tokens of text, more than any model served here takes."""
    max_json_depth: int = Field(64, ge=4)
    """How deeply the body's JSON may nest, checked before parsing (chat requests nest about 4 levels)."""
    max_request_tokens: int = Field(4096, ge=1)
    """Largest `max_tokens` / `max_completion_tokens` a request may ask for (the default is 256)."""
    max_temperature: float = Field(2.0, ge=0, allow_inf_nan=False)
    """Temperature must be finite and in [0, this] (2 is OpenAI's bound)."""
    max_messages: int = Field(256, ge=1)
    """Messages per request."""
    max_chars: int = Field(200_000, ge=1)
    """Characters of content over all of a request's messages (~50k tokens)."""


def load_options(config) -> AutoSkillOptions:
    return plugin_options(AutoSkillOptions, (getattr(config, "plugins", None) or {}).get("autoskill", {}), "autoskill")
