"""The LoCoMo benchmark on a two-session conversation: vault layout, evidence checks, metrics, incremental output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import locomo

CONVERSATION = [
    {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a greyhound named Comet yesterday."},
                {
                    "speaker": "Ben",
                    "dia_id": "D1:2",
                    "text": "Lovely! I am training for the Lisbon marathon.",
                    "img_url": ["x"],
                    "blip_caption": "a photo of running shoes",
                },
            ],
            "session_2_date_time": "10:00 am on 20 June, 2023",
            "session_2": [
                {"speaker": "Ana", "dia_id": "D2:1", "text": "Comet learned to fetch the frisbee."},
                {"speaker": "Ben", "dia_id": "D2:2", "text": "My sourdough starter finally bubbled."},
            ],
            "session_3_date_time": "9:00 am on 1 July, 2023",
        },
        "qa": [
            {
                "question": "When did Ana adopt the greyhound?",
                "answer": "7 May 2023",
                "evidence": ["D1:1"],
                "category": 2,
            },
            {
                "question": "Which marathon is Ben training for?",
                "answer": "Lisbon",
                "evidence": ["D1:2", "D9:9"],
                "category": 4,
            },
            {
                "question": "What did Comet learn to fetch?",
                "answer": "frisbee",
                "evidence": ["D2:1; D1:1"],
                "category": 1,
            },
            {
                "question": "What did Ana bake?",
                "adversarial_answer": "sourdough",
                "evidence": ["D2:2"],
                "category": 5,
            },
        ],
    }
]


def test_metrics_by_hand() -> None:
    m = locomo.question_metrics(["a", "b"], ["x", "a", "y", "z", "q", "b"])
    assert m["recall@5"] == 0.5 and m["recall@10"] == 1.0 and m["hit@5"] == 1.0
    assert m["ndcg@10"] == pytest.approx(
        (1 / 1.584962500721156 + 1 / 2.807354922057604) / (1 + 1 / 1.584962500721156)
    )
    assert locomo.auroc([3, 4], [1, 2]) == 1.0
    assert locomo.auroc([1, 2], [3, 4]) == 0.0
    assert locomo.auroc([1, 1], [1, 1]) == 0.5
    same = locomo.paired_test([1.0, 0.0, 1.0], [1.0, 0.0, 1.0], permutations=200)
    assert same["mean_diff"] == 0.0 and same["p"] == 1.0


def test_locomo_run_bm25_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps(CONVERSATION), encoding="utf-8")
    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["--data", str(data), "--out", str(out), "--work-dir", str(work), "--no-embeddings"]
    assert locomo.main(argv) == 0

    note = work / "conv-x/Users/Ana/turns/turn_000001/context.md"
    text = note.read_text(encoding="utf-8")
    assert 'dia_id: "D1:1"' in text and "date: 2023-05-08" in text and 'speaker: "Ana"' in text
    assert text.rstrip().endswith("Ana: I adopted a greyhound named Comet yesterday.")
    assert "running shoes" in (work / "conv-x/Users/Ben/turns/turn_000002/context.md").read_text(
        encoding="utf-8"
    )

    report = json.loads((out / "locomo.json").read_text(encoding="utf-8"))
    assert report["complete"] is True
    assert report["counts"]["skipped_evidence"] == 2  # "D2:1; D1:1" malformed, D9:9 names no turn
    assert {s["reason"] for s in report["skipped_evidence"]} == {"malformed", "no such turn"}
    assert report["counts"]["no_evidence"] == 1
    assert set(report["rows"]) == {"explorer", "hybrid", "rank_bm25"}  # dense rows skipped
    bm = report["rows"]["rank_bm25"]["overall"]
    assert bm["n"] == 2 and bm["recall@10"] == 1.0  # both scored questions name their turn's rare word
    adv = report["rows"]["explorer"]["adversarial"]
    assert adv["n_adversarial"] == 1 and adv["n_answerable"] == 3
    lines = (out / "locomo.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 * 4  # every row x question, appended as measured
    assert "| rank_bm25 |" in capsys.readouterr().out

    # A rerun reuses the vault: no note is rewritten.
    mtimes = {p: p.stat().st_mtime_ns for p in work.rglob("*.md")}
    assert locomo.main([*argv, "--rows", "rank_bm25", "--tag", "again"]) == 0
    assert {p: p.stat().st_mtime_ns for p in work.rglob("*.md")} == mtimes
