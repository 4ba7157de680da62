"""``experiments/knnlm/knnlm.py``'s row 11: domain adaptation (seed 002; Khandelwal et al. 2020, section 4.3: an LM
trained on books with a Wikipedia datastore, 34.84 -> 20.47 perplexity on Wikipedia against 19.59 for an LM trained
there, at lambda 0.65).

The LM of rows 1-8 trained on T, encyclopaedic prose; the other domain is open-domain questions, read with the
library's loaders from ``../shared/data/real``:
- Q, the datastore's text: the questions DPR carved from NQ train (``topics.dpr.nq.dev.txt``, 8,757) and from
  TriviaQA's train side (``topics.dpr.trivia.dev.txt``, 8,837);
- QE and QV, evaluation and validation: ``--domain-questions`` questions each of NQ-open dev and of TriviaQA test,
  in sha256 order of their text (QE first, then QV, so no question is in both); a question whose normalized text
  (the official EM normalisation) Q also holds is left out and counted, and QE's 8-token overlap with Q is reported.
Each question is one document ([BOS] question), as in a stream of questions with no context between them.

Rows, every perplexity over QE's tokens in the tiny LM's vocabulary (the in-domain LM shares it):
- the LM alone;
- + datastore T+U (prose, the LM's own domain), k, tau, lambda chosen on QV;
- + datastore Q (questions), chosen on QV, against T+U (the paper: lambda 0.65 in this setting), and at the paper's
  fixed settings (a description);
- an LM trained on Q alone with T's vocabulary and the same recipe and steps: what training in the domain gives,
  against the prose LM with datastore Q (the paper's 19.59 against 20.47); and that LM with datastore Q.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import torch
from experiments.knnlm.knnlm_rows import K, KnnBench, Tuned, build, interval, label, lm_config

from realm.data.corpus import CorpusConfig
from realm.knnlm import perplexity as ev
from realm.knnlm.bootstrap import BootstrapConfig, paired_bootstrap
from realm.knnlm.datastore import values_of
from realm.knnlm.datastore_build import read_texts
from realm.knnlm.lm import load_causal_lm, num_targets, tokenize_documents
from realm.knnlm.overlap import NgramIndex, measure_overlap
from realm.knnlm.tiny_lm import train_tiny_lm
from realm.qa.datasets import load_task
from realm.qa.metrics import normalize_answer

DATASTORE_FILES = ("dpr_qas/topics.dpr.nq.dev.txt", "dpr_qas/topics.dpr.trivia.dev.txt")
EVALUATION_FILES = (("nq", "nq_open/NQ-open.dev.jsonl"), ("dpr", "dpr_qas/topics.dpr.trivia.test.txt"))
QUESTION_SETS = ("QV", "QE")  # (where settings are chosen, where they are reported)
OVERLAP_NGRAM = 8  # note: questions are ~12 tokens; the 32-gram check of the prose rows would check none


def write_question_splits(data: Path, work: Path, per_source: int) -> dict[str, dict]:
    """Q, QE and QV as jsonl corpora in ``work`` (see the module's docstring); their sizes, paths and the count of
    evaluation questions left out because Q holds them."""
    stored = [ex.question for name in DATASTORE_FILES for ex in load_task("dpr", str(data / name))]
    known = {normalize_answer(q) for q in stored}
    splits: dict[str, list[str]] = {"Q": stored, "QE": [], "QV": []}
    left_out = 0
    for task, name in EVALUATION_FILES:
        questions = sorted({ex.question for ex in load_task(task, str(data / name))},
                           key=lambda q: hashlib.sha256(q.encode()).hexdigest())  # fmt: skip
        kept = [q for q in questions if normalize_answer(q) not in known]
        left_out += len(questions) - len(kept)
        splits["QE"] += kept[:per_source]
        splits["QV"] += kept[per_source : 2 * per_source]
    info = {}
    for split, questions in splits.items():
        path = work / f"{split}.jsonl"
        path.write_text("".join(json.dumps({"id": f"{split}-{i}", "title": "", "text": q}) + "\n"
                                for i, q in enumerate(questions)))  # fmt: skip
        info[split] = {"path": str(path), "documents": len(questions), "articles": 0}
    info["QE"]["left_out_in_Q"] = left_out
    return info


def domain_adaptation(b: KnnBench) -> None:
    """Row 11 (see the module's docstring)."""
    a = b.args
    splits = write_question_splits(Path(a.data), b.work, a.domain_questions)
    for split, info in splits.items():
        b.docs[split] = tokenize_documents(b.tokenizer, read_texts(CorpusConfig(path=info["path"])))
        info["tokens"] = int(num_targets(b.docs[split]).sum())
        b.splits[split] = info
    seen = measure_overlap(b.docs["QE"], NgramIndex(values_of(b.docs["Q"]), OVERLAP_NGRAM, "Q"), "QE")
    sizes = f"QE {splits['QE']['tokens']:,} tokens; {seen.num_covered} in {OVERLAP_NGRAM}-grams of Q"
    prose_alone = b.collect(None, split="QE")
    base = ev.score(prose_alone, 1, 1.0, 0.0)
    b.add("11", "domain: prose LM alone", "-", f"trained on T; {sizes}", "ppl QE", base["ppl_lm"], "1.000",
          overlap=seen.to_dict(), left_out_in_q=splits["QE"]["left_out_in_Q"])  # fmt: skip
    if "T+U" not in b.stores:  # note: stage 11 run without stages 1-3
        b.stores["T+U"] = build(b.work / "ds" / "TU", b.lm_cfg, b.splits["TU"]["path"])
    questions = build(b.work / "ds" / "Q", b.lm_cfg, splits["Q"]["path"])
    on_e = {}
    for name, store, reference in (("T+U", b.stores["T+U"], ""), ("Q", questions, "QT+U")):
        on_v, on_e[name] = b.collect(store, split="QV"), b.collect(store, split="QE")
        row = f"domain: prose LM + datastore {name}"
        b.add_tuned("11", row, label(name, store), on_v, on_e[name], reference, name=f"Q{name}",
                    splits=QUESTION_SETS)  # fmt: skip
    fixed = ev.score(on_e["Q"], K, 1.0, 0.65)["ppl_knnlm"]
    b.add("11", "domain: prose LM + datastore Q", label("Q", questions), f"k {K}, lambda 0.65, tau 1 (the paper's "
          "domain-adaptation setting, fixed)", "ppl QE", fixed, f"{fixed / base['ppl_lm']:.3f}")  # fmt: skip

    # the in-domain LM: trained on Q with T's vocabulary (so QE's tokens are the same), the same recipe and steps
    cfg = dataclasses.replace(lm_config(a, a.lm_steps, a.context, a.vocab), tokenizer=str(b.lm_dir))
    q_lm = train_tiny_lm(read_texts(CorpusConfig(path=splits["Q"]["path"])), cfg, b.work / "lm-Q")
    q_cfg = dataclasses.replace(b.lm_cfg, model=str(q_lm))
    model, _ = load_causal_lm(q_cfg)
    alone = b.collect(None, split="QE", model=(model, q_cfg))
    b.tuned["Q-LM"] = Tuned({}, alone.lm_log_probs, torch.full_like(alone.lm_log_probs, -float("inf")))
    versus = paired_bootstrap(prose_alone.lm_log_probs, alone.lm_log_probs, BootstrapConfig(seed=a.seed))
    against = paired_bootstrap(b.tuned["QQ"].on_e, alone.lm_log_probs, BootstrapConfig(seed=a.seed))
    lm_ppl = ev.score(alone, 1, 1.0, 0.0)["ppl_lm"]  # note: as the prose LM's row above
    b.add("11", "domain: LM trained on Q, alone", "-", f"T's vocabulary, {a.lm_steps} steps", "ppl QE", lm_ppl,
          interval(versus), reference=f"QQ: {interval(against)}", versus_lm=versus.to_dict(),
          versus_reference=against.to_dict())  # fmt: skip
    q_store = build(b.work / "ds" / "Q-by-Q-LM", q_cfg, splits["Q"]["path"])
    own_v = b.collect(q_store, split="QV", model=(model, q_cfg))
    own_e = b.collect(q_store, split="QE", model=(model, q_cfg))
    b.add_tuned("11", "domain: LM trained on Q + datastore Q", label("Q", q_store), own_v, own_e, "Q-LM",
                note="; / LM is against this LM alone", splits=QUESTION_SETS)  # fmt: skip
