"""Fast start: the one-shot CLI answers hybrid searches without importing torch, sentence-transformers, openai or
Textual, nor the Markdown and YAML parsers when no note changed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

PROBE = textwrap.dedent(
    """
    import io, json, sys, contextlib
    from explorer.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["search", "syrian hamster cage", "--vault", sys.argv[1], "--json", "-k", "3"])
    data = json.loads(buf.getvalue())
    heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers", "openai", "textual",
                               "markdown_it", "yaml") if m in sys.modules)  # no note changed: none is parsed
    print(json.dumps({"code": code, "dense": data["mode"]["dense"], "heavy": heavy,
                      "top": data["results"][0]["document_path"]}))
    """
)


def test_cli_search_is_hybrid_without_heavy_imports(sample_copy: Path, sample_index) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(sample_copy)], capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["code"] == 0
    assert info["dense"] is True, "the query was embedded by the real model"
    assert info["heavy"] == []
    assert "hamster" in info["top"].lower()


def test_model_loaded_while_the_index_opens_gives_the_same_results(sample_copy: Path, sample_index) -> None:
    from explorer.config import load_settings
    from explorer.engine import make_pipeline, open_index

    settings = load_settings(sample_copy)
    answers = []
    for load_model in (False, True):
        index, _ = open_index(sample_copy, settings, load_model=load_model)
        try:
            assert index.stats().model_state in (("not loaded",) if not load_model else ("loading", "ready"))
            res = make_pipeline(index, settings).search("syrian hamster cage", two_pass=False, rerank=False)
            assert res.mode.dense and index.stats().model_state == "ready"
            answers.append([(r.node_id, r.rrf_score, r.embedding_rank) for r in res.results])
        finally:
            index.close()
    assert answers[0] == answers[1] and answers[0]
