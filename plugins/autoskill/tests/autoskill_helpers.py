"""Shared pieces of the AutoSkill tests: the plugin loaded explicitly, a controllable embedder, cards."""
from __future__ import annotations

import numpy as np

from evolver import plugins
from evolver_autoskill.card import SkillCard


def load_plugin():
    """The suite restricts entry points (EVOLVER_PLUGINS=evoskill): register ours by hand."""
    import evolver_autoskill

    pm = plugins.manager()
    if pm.get_plugin("autoskill") is None:
        pm.register(evolver_autoskill, name="autoskill")
    return pm


class AxisEmbedder:
    """One axis per group of synonyms: a text's vector counts the words of each group it contains,
    normalised. Lets a test set dense cosines exactly: texts sharing no group are orthogonal, and a
    text with no known word is the zero vector (cosine 0 with everything)."""

    name = "axis"

    def __init__(self, groups: dict[str, list[str]]):
        self.groups = list(groups.values())
        self.calls = 0

    def encode(self, texts):
        import re

        self.calls += 1
        out = np.zeros((len(texts), len(self.groups)), dtype=np.float32)
        for i, t in enumerate(texts):
            words = re.findall(r"[a-z]+", t.lower())
            for j, group in enumerate(self.groups):
                out[i, j] = sum(words.count(w) for w in group)
            norm = np.linalg.norm(out[i])
            if norm:
                out[i] /= norm
        return out


def card(name: str, description: str, instructions: str = "- do it well.", **kw) -> SkillCard:
    return SkillCard(name=name, description=description, instructions=instructions, **kw)
