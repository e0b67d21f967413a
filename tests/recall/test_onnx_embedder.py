"""The optional ONNX embedder (`[memory.embedding] provider = "onnx"`) on models the tests make:
a word-embedding table behind a real onnxruntime session and a real `tokenizers` tokenizer, in a
folder laid out as a user's would be (model.onnx + tokenizer.json). Its vectors are known (the
mean of the table's rows for the text's words), so the loader's pooling, padding, batching and
normalising are checked exactly; then the server remembers and recalls through it over MCP.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from mcp import Client
from onnx import TensorProto, helper, numpy_helper
from pydantic import ValidationError
from tokenizers import Tokenizer, models, pre_tokenizers

from mongogate.config import EmbeddingSettings
from mongogate.errors import ConfigError, EmbeddingUnavailable
from mongogate.recall.embedding import make_embedder
from mongogate.recall.onnx_embedder import OnnxEmbedder
from mongogate.server.app import build_server
from tests.conftest import make_settings
from tests.helpers import ok

pytestmark = pytest.mark.anyio

WORDS = ["[PAD]", "[UNK]", "editor", "helix", "zed", "coffee", "black", "sugar", "train", "bike", "work"]
DIMS = 8
TABLE = np.random.default_rng(39).normal(size=(len(WORDS), DIMS)).astype(np.float32)


def tokenizer_json(folder: Path) -> None:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))


def model(folder: Path, *, token_types: bool = True, pooled: bool = False, extra_input: bool = False) -> Path:
    """A text encoder: each token's row of `TABLE` (plus a zero row per token type), or with
    `pooled` one vector per text (the plain mean over every token, padding included)."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])
    inputs = [ids, mask]
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["words"])]
    inits = [numpy_helper.from_array(TABLE, "table")]
    last = "words"
    if token_types:
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "seq"]))
        inits.append(numpy_helper.from_array(np.zeros((2, DIMS), np.float32), "types"))
        nodes += [
            helper.make_node("Gather", ["types", "token_type_ids"], ["typed"]),
            helper.make_node("Add", ["words", "typed"], ["hidden"]),
        ]
        last = "hidden"
    if extra_input:
        inputs.append(helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3]))
    if pooled:
        nodes.append(helper.make_node("ReduceMean", [last], ["out"], axes=[1], keepdims=0))
        out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", DIMS])
    else:
        nodes.append(helper.make_node("Identity", [last], ["out"]))
        out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "seq", DIMS])
    graph = helper.make_graph(nodes, "encoder", inputs, [out], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, str(folder / "model.onnx"))
    tokenizer_json(folder)
    return folder


def settings(folder: Path, **more: object) -> EmbeddingSettings:
    return EmbeddingSettings.model_validate(
        {"provider": "onnx", "path": str(folder), "dimensions": DIMS, **more}
    )


def expected(text: str) -> np.ndarray:
    rows = TABLE[[WORDS.index(w) if w in WORDS else 1 for w in text.split()]]
    v = rows.mean(axis=0)
    return v / np.linalg.norm(v)


async def test_vectors_are_the_masked_mean_of_the_tokens_at_unit_length_whatever_the_batch(
    tmp_path: Path,
) -> None:
    e = make_embedder(settings(model(tmp_path / "all-tiny"), batch_size=2))
    assert isinstance(e, OnnxEmbedder) and e.model == "onnx/all-tiny" and e.dimensions == DIMS
    texts = ["coffee", "black coffee no sugar", "helix editor", "work by train or bike", "zed"]
    got = np.array(await e.embed(texts))
    # padding to the batch's longest text changes nothing: each text alone gives the same vector
    alone = np.array([(await e.embed([t]))[0] for t in texts])
    assert np.allclose(got, alone, atol=1e-6)
    assert np.allclose(got, np.array([expected(t) for t in texts]), atol=1e-5)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0)
    assert await e.embed([]) == []


async def test_a_model_without_token_types_or_giving_one_vector_per_text_loads_too(tmp_path: Path) -> None:
    plain = make_embedder(settings(model(tmp_path / "plain", token_types=False), model="mine/plain"))
    assert plain.model == "mine/plain"
    assert np.allclose((await plain.embed(["helix editor"]))[0], expected("helix editor"), atol=1e-5)
    pooled = make_embedder(settings(model(tmp_path / "pooled", pooled=True)))
    assert np.allclose((await pooled.embed(["black coffee"]))[0], expected("black coffee"), atol=1e-5)


@pytest.mark.parametrize(
    ("break_it", "said"),
    [
        (lambda f: (f / "model.onnx").unlink(), "no model.onnx"),
        (lambda f: (f / "tokenizer.json").unlink(), "no tokenizer.json"),
        (lambda f: (f / "model.onnx").write_bytes(b"not a model"), "not a model onnxruntime can load"),
        (lambda f: (f / "tokenizer.json").write_text("{}"), "not a tokenizers JSON file"),
        (lambda f: model(f, extra_input=True), "a text encoder taking input_ids and attention_mask"),
    ],
)
def test_a_folder_that_is_not_a_text_model_fails_at_start_saying_what_to_fix(
    tmp_path: Path, break_it: object, said: str
) -> None:
    folder = model(tmp_path / "m")
    break_it(folder)  # type: ignore[operator]
    with pytest.raises(ConfigError, match=said):
        make_embedder(settings(folder))


async def test_a_model_of_another_size_is_unavailable_not_stored(tmp_path: Path) -> None:
    e = make_embedder(settings(model(tmp_path / "m"), dimensions=DIMS + 1))
    with pytest.raises(EmbeddingUnavailable, match=f"returns {DIMS} dimensions"):
        await e.embed(["coffee"])


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"provider": "onnx", "dimensions": 8}, "needs path and dimensions"),
        ({"provider": "onnx", "path": "/m"}, "needs path and dimensions"),
        (
            {"provider": "onnx", "path": "/m", "dimensions": 8, "url": "https://x/v1"},
            "url set with provider 'onnx'",
        ),
        ({"provider": "local", "path": "/m"}, "path set with provider 'local'"),
        (
            {"provider": "openai", "url": "https://x/v1", "model": "m", "dimensions": 8, "path": "/m"},
            "for provider 'onnx'",
        ),
    ],
)
def test_settings_name_what_an_onnx_embedder_needs(fields: dict[str, object], said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        EmbeddingSettings.model_validate(fields)


async def test_the_server_remembers_and_recalls_through_the_onnx_model(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    folder = model(tmp_path / "served")
    embedding = {"provider": "onnx", "path": str(folder), "dimensions": DIMS, "model": "test/tiny"}
    s = make_settings(engine_uri, db_name, tmp_path, memory={"embedding": embedding})
    async with Client(build_server(s)) as c:
        await ok(c, "remember", text="helix editor")
        await ok(c, "remember", text="black coffee no sugar")
        r = await ok(c, "recall", query="coffee", min_score=0)
        assert r["memories"][0]["text"] == "black coffee no sugar"
        assert r["memories"][0]["similarity"] == pytest.approx(
            float(expected("coffee") @ expected("black coffee no sugar")), abs=1e-4
        )
