"""``experiments/knnlm/knnlm_domain.py``'s question splits: QE and QV never share a question, and an evaluation question
that the datastore's questions hold (after the EM normalisation) is left out and counted, never evaluated."""

from __future__ import annotations

import json

from experiments.knnlm import knnlm_domain as domain


def _write(root):
    (root / "dpr_qas").mkdir()
    (root / "nq_open").mkdir()
    (root / "dpr_qas/topics.dpr.nq.dev.txt").write_text("who wrote hamlet\t['Shakespeare']\n")
    (root / "dpr_qas/topics.dpr.trivia.dev.txt").write_text("What is the capital of Peru?\t['Lima']\n")
    nq = [{"question": f"nq question number {i}", "answer": ["x"]} for i in range(6)]
    nq.append({"question": "Who wrote Hamlet?", "answer": ["Shakespeare"]})  # Q holds it, once normalized
    (root / "nq_open/NQ-open.dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in nq))
    trivia = [f"trivia question {i}\t['y']\n" for i in range(6)] + ["what is the capital of peru\t['Lima']\n"]
    (root / "dpr_qas/topics.dpr.trivia.test.txt").write_text("".join(trivia))


def _read(path):
    return [json.loads(line)["text"] for line in open(path)]


def test_question_splits_are_disjoint_and_leave_out_what_the_datastore_holds(tmp_path):
    _write(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    info = domain.write_question_splits(tmp_path, work, per_source=4)  # more than each source's 6 new ones
    q, qe, qv = (_read(info[s]["path"]) for s in ("Q", "QE", "QV"))
    assert q == ["who wrote hamlet", "What is the capital of Peru?"]
    assert len(qe) == 8 and len(qv) == 4 and not set(qe) & set(qv)
    assert sum(x.startswith("nq") for x in qe) == 4 and sum(x.startswith("trivia") for x in qv) == 2
    assert "Who wrote Hamlet?" not in qe + qv and "what is the capital of peru" not in qe + qv
    assert info["QE"]["left_out_in_Q"] == 2
    again = domain.write_question_splits(tmp_path, work, per_source=4)  # the split is a function of the text
    assert _read(again["QE"]["path"]) == qe
