"""The scale rehearsal's stages: the README's full-scale recipe, command by command, on a generated DPR corpus, each
with the memory bound its configuration implies (``experiments/full_scale/rehearsal.py`` runs them).

Shapes: where a stage's cost is per token (reader warm-up, ICT) it runs a few steps of BERT-base (random init from
``ModelConfig``'s defaults, ``--model.init_from=null``: no hub) at a batch of 2; where its cost is per block
(builder embedding, index build, search, trainer against the N-block index, evaluation over the index) it runs
``configs/pretrain/tiny.yaml``'s 2-layer hidden-32 model with REALM's 288-wordpiece blocks and 128-d index, so that N
blocks can be embedded on 2 cores. Tagging is the rule tagger (``tagging.kind: rule``): spaCy is not installed here.

Memory bounds (``Stage.bound_bytes``, checked against the tree's peak anonymous memory,
``experiments/full_scale/rehearsal_measure.py``): a fixed allowance per Python process of the stage's tree, the model's
weights (times the optimizer's copies where it trains), its activations where it trains, what a config caps (the
tagger's shard of ``shard_size`` lines a worker, the warm-up's ``task.max_blocks`` sample, evaluation's
``eval.exact_chunk_blocks``, evaluation's reader outputs over the vocabulary), and, for the stages that hold an index,
the index the budget arithmetic expects (``realm.index.budget.expected_index_bytes``). Nothing else in a bound grows
with N: a stage whose peak does is holding per-block state the recipe did not budget for.
"""

from __future__ import annotations

import inspect
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from benchmarks.harness import REPO
from realm.data.block_store import BlockStore
from realm.data.tag_stage import TagStageConfig
from realm.index.budget import expected_index_bytes
from realm.index.mips import IndexConfig
from realm.index.streamed import QUERY_BLOCK
from realm.pretrain.config import EvalConfig

GB = 1 << 30
MB = 1 << 20
PROCESS_BYTES = 1 * GB
"""Allowance for one Python process with torch, transformers, datasets and FAISS imported, its tokenizer and buffers
(measured ~0.6 GB resident for the tiny trainer at 10k blocks; a bound, not an estimate)."""
BERT_BASE_PARAMS = 110_000_000
"""BERT-base with BERT's 30,522-entry vocabulary (what the per-token stages run)."""
TINY_PARAMS = 2_000_000
"""The tiny model (hidden 32, 2 layers) is dominated by its 30,522 x 32 embeddings: ~1M parameters per tower."""
TRAINING_COPIES = 4
"""fp32 weights, gradients and AdamW's two moments."""
ACTIVATION_BYTES_PER_TOKEN_LAYER_HIDDEN = 34
"""Activation bytes a token a layer a hidden unit in training (the figure configs/ict/base.yaml budgets with)."""
BUILD_INDEX_COPIES = 3
"""A build holds the embeddings (memmap, read back), the FAISS index being filled, and its serialised bytes."""
TRAIN_SAMPLE_COPIES = 3
"""An IVF-PQ build trains on up to ``index.train_sample`` rows: the sample, k-means's copy of it, and the residuals PQ
trains on. Measured: the IVF-PQ stage's anonymous peak rose 0.70 -> 0.93 GB from 100k to 300k blocks, as the sample
grew 100k -> 262,144 rows of 512 bytes (x 2.8); it levels once the sample is capped."""
IVF_POINTS_PER_LIST = 39
"""FAISS's minimum training points a centroid (realm.index.budget); the rehearsal's IVF list count keeps to it."""
IVF_MAX_LISTS = 4096
"""configs/index/ivfpq.yaml's IVF4096: the list count at 160k+ blocks."""
EMBED_DIM = 128
"""REALM's index width."""
WARM_START_STEPS = 2
"""BERT-base steps of the warm-up and ICT stages (seconds each on 2 cores)."""
TRAIN_STEPS = 4
"""Tiny trainer steps against the N-block index."""
TAG_WORKERS = 2
TAG_BYTES_PER_LINE = 4096
"""Resident bytes a worker holds per line of the shard it tags (tokenised sentence, spans, Arrow batches; measured
~2.5 KB with the rule tagger: 0.39 GB with one 69k-line shard, 0.92 GB with two workers on 100k-line shards)."""
WARMUP_BYTES_PER_BLOCK = 24 * 1024
"""Resident bytes the warm-up holds per sampled block (its ~5 sentences tokenised and tagged; measured ~15 KB: 2.58 GB
anonymous at 10k blocks, 2.87 GB at 30k)."""
BLOCK_LIST_BYTES_PER_BLOCK = 4 * 1024
"""Resident bytes a block costs while ``BlockStore`` holds its title and body wordpieces in memory (corpora up to its
``in_memory_limit`` blocks): 4 bytes a wordpiece in flat int32 arrays, 288 wordpieces a block here, plus the int64
copy made while building them (12 bytes a wordpiece at the peak). Python lists took ~15 KB a block (the trainer's
tree 1.28 GB anonymous at 10k blocks, 1.57 GB at 30k, measured before a82c07f)."""
BLOCKS_PER_PASSAGE = 1.1
"""Blocks a generated passage is taken to give before the data stage has counted them (measured 1.00 with 75-word
passages; 1.28 with 100 made-up words, which pass 288 wordpieces)."""
EVAL_EXAMPLES = 64
"""Held-out cloze queries of the evaluation stage."""
EVAL_K = 16
"""A generous top-k for the streamed search's running top-k (the tiny config retrieves 4 + 2)."""


@dataclass(kw_only=True, slots=True)
class Context:
    """What every stage's command needs: the work folder, the corpus size and the tokenizer folder."""

    out: Path
    num_passages: int
    tokenizer: str
    """A local BERT-uncased folder (all-MiniLM-L6-v2's: BERT's 30,522 wordpieces); the recipe's is bert-base-uncased."""
    python: str = sys.executable

    @property
    def run(self) -> Path:
        return self.out / "run"


@dataclass(kw_only=True, slots=True)
class Stage:
    """One command of the recipe and what it may hold."""

    name: str
    cost: str
    """per-block, per-token or data: what its time grows with."""
    shapes: str
    argv: Callable[[Context], list[str]]
    bound_bytes: Callable[[Context], int]
    """Peak resident memory the stage's configuration allows (N enters only through the index)."""
    prepare: Callable[[Context], None] = field(default=lambda ctx: None)


def ivf_factory(num_blocks: int) -> str:
    """configs/index/ivfpq.yaml's ``IVF4096,PQ32`` with as many lists as ``num_blocks`` can train (a power of 2)."""
    lists = 1
    while lists * 2 <= min(IVF_MAX_LISTS, num_blocks // IVF_POINTS_PER_LIST):
        lists *= 2
    return f"IVF{lists},PQ32"


FACTORIES = {"flat": lambda n: "Flat", "ivfpq": ivf_factory, "hnsw": lambda n: "HNSW32"}
BUILT_BY_TRAIN = "flat"
"""The index the trainer's own builder builds (configs/index/tiny.yaml's Flat): no stage of its own, so that the N
blocks are embedded once less (the 100k rehearsal must end within 10 minutes)."""


def index_run(name: str) -> str:
    """The run folder (under ``OUT/run``) holding the ``name`` index: the trainer's for Flat, ``index_NAME`` else."""
    return "train" if name == BUILT_BY_TRAIN else f"index_{name}"


def _num_blocks(ctx: Context) -> int:
    """The blocks the data stage cut (its ``summary.json``), or ``BLOCKS_PER_PASSAGE`` a passage before it ran."""
    summary = ctx.run / "summary.json"
    if summary.exists():
        return int(json.loads(summary.read_text(encoding="utf-8"))["num_blocks"])
    return int(ctx.num_passages * BLOCKS_PER_PASSAGE)


def _block_lists_bytes(ctx: Context) -> int:
    """What ``BlockStore`` holds in memory: every block up to its ``in_memory_limit``, none above it."""
    limit = inspect.signature(BlockStore).parameters["in_memory_limit"].default
    blocks = _num_blocks(ctx)
    return 0 if blocks > limit else blocks * BLOCK_LIST_BYTES_PER_BLOCK


def _index_bytes(ctx: Context, factory: str) -> int:
    num = _num_blocks(ctx)
    return expected_index_bytes(factory, num, EMBED_DIM) or num * EMBED_DIM * 4


def _train_sample_bytes(ctx: Context, factory: str) -> int:
    """The IVF training sample's copies (0 for indexes that need no training: Flat, HNSW)."""
    sample = min(_num_blocks(ctx), IndexConfig().train_sample)
    return TRAIN_SAMPLE_COPIES * sample * EMBED_DIM * 4 if factory.startswith("IVF") else 0


def _realm(*args: str) -> Callable[[Context], list[str]]:
    return lambda ctx: [ctx.python, "-m", "realm.cli.main", *[a.format(R=ctx.run, T=ctx.tokenizer) for a in args]]


def _streamed_search_bytes() -> int:
    """``realm.index.streamed``'s peak as ``eval.exact_chunk_blocks`` sets it (realm.pretrain.config.EvalConfig)."""
    chunk = EvalConfig().exact_chunk_blocks
    return chunk * (EMBED_DIM + min(EVAL_EXAMPLES, QUERY_BLOCK)) * 4 + EVAL_EXAMPLES * EVAL_K * 12


def _config(name: str) -> dict:
    """A config file of ``configs/`` as the stage's command reads it."""
    return yaml.safe_load((REPO / "configs" / name).read_text(encoding="utf-8"))


MLM_OUTPUT_COPIES = 3
"""Evaluation's largest tensors: the reader's [B x K, M, V] log-probabilities over the vocabulary at the masked
positions (the head's logits, their log-softmax, and the marginal over K that ``RealmModel.forward`` takes for its
predictions). Measured at 100k blocks (a sampling thread recording the stack at each new anonymous peak): 0.97 GiB
before the first forward, 1.16 GiB at its peak inside that marginal; the process allowance alone left this out."""
VOCAB_SIZE = 30_522


def _mlm_output_bytes() -> int:
    """The evaluation's [B, K, M, V] float32 tensors as ``configs/pretrain/tiny.yaml`` sizes them:
    ``eval.batch_size`` queries, ``retriever.num_candidates`` slots, at most ``max_query_length - 2`` masked
    wordpieces, BERT's vocabulary."""
    config = _config("pretrain/tiny.yaml")
    retriever = config["retriever"]
    masked = retriever["max_query_length"] - 2
    return MLM_OUTPUT_COPIES * config["eval"]["batch_size"] * retriever["num_candidates"] * masked * VOCAB_SIZE * 4


def _tag_bound(ctx: Context) -> int:
    """The caller and its workers, each worker holding one shard (``TagStageConfig.shard_size`` lines) at most."""
    lines = TagStageConfig().shard_size
    return (1 + TAG_WORKERS) * PROCESS_BYTES + TAG_WORKERS * lines * TAG_BYTES_PER_LINE


def _warmup_bound(ctx: Context) -> int:
    """Training BERT-base, plus the sentences of the ``task.max_blocks`` blocks configs/warmup/base.yaml samples."""
    config = _config("warmup/base.yaml")
    sampled = min(_num_blocks(ctx), config["task"]["max_blocks"] or _num_blocks(ctx))
    return _training_bound(BERT_BASE_PARAMS, 2, 384, 12, 768) + sampled * WARMUP_BYTES_PER_BLOCK


def _training_bound(params: int, batch: int, length: int, layers: int, hidden: int, processes: int = 1) -> int:
    activations = batch * length * layers * hidden * ACTIVATION_BYTES_PER_TOKEN_LAYER_HIDDEN
    return processes * PROCESS_BYTES + params * 4 * TRAINING_COPIES + activations


# the trainer's data overrides (step 5's), shared by `realm tag` so the cache it writes is the one the trainer reads
_PRETRAIN = (
    "--config", "configs/pretrain/tiny.yaml", "--train.run_dir={R}/train", "--data.tokenizer={T}",
    "--data.blocks={R}/blocks", "--data.sentences={R}/cloze/pretrain.jsonl", "--data.heldout={R}/cloze/heldout.jsonl",
    "--data.masking=salient", "--data.tagging.kind=rule", "--retriever.max_block_length=288",
    f"--retriever.embed_dim={EMBED_DIM}", "--model.max_position_embeddings=512",
)  # fmt: skip
_WARM = ("--data.blocks={R}/blocks", "--data.tokenizer={T}", "--data.heldout_articles={R}/cloze/heldout_articles.txt",
         "--model.init_from=null", f"--train.max_steps={WARM_START_STEPS}", "--train.batch_size=2",
         "--train.log_interval=1")  # fmt: skip


def _index_run(name: str) -> Callable[[Context], None]:
    """A run folder for one factory: the trainer's step-0 export (so the builder embeds the same blocks with the same
    weights) and its checkpoints and config (so ``realm inspect`` can search that index)."""

    def prepare(ctx: Context) -> None:
        run, train = ctx.run / f"index_{name}", ctx.run / "train"
        shutil.rmtree(run, ignore_errors=True)
        (run / "retriever").mkdir(parents=True)
        shutil.copytree(train / "retriever" / "step-00000000", run / "retriever" / "step-00000000")
        shutil.copy(train / "config.yaml", run / "config.yaml")
        (run / "checkpoints").symlink_to((train / "checkpoints").resolve())

    return prepare


def _index_stage(name: str) -> Stage:
    def factory_of(ctx: Context) -> str:
        return FACTORIES[name](ctx.num_passages)

    def argv(ctx: Context) -> list[str]:
        factory = factory_of(ctx)
        return _realm("index", "--config", "configs/index/default.yaml", "--run_dir", f"{{R}}/index_{name}",
                      "--once=true", "--num_threads=1", f"--index.factory={factory}")(ctx)  # fmt: skip

    return Stage(name=f"index_{name}", cost="per-block", shapes="tiny, 288 wordpieces, 128-d", argv=argv,
                 bound_bytes=lambda ctx: PROCESS_BYTES + BUILD_INDEX_COPIES * _index_bytes(ctx, factory_of(ctx))
                 + _train_sample_bytes(ctx, factory_of(ctx)),
                 prepare=_index_run(name))  # fmt: skip


def _search_stage(name: str) -> Stage:
    return Stage(name=f"search_{name}", cost="per-block", shapes="tiny, 64 queries, k 5",
                 argv=_realm("inspect", f"{{R}}/{index_run(name)}", "--queries", "{R}/queries.txt", "--k", "5",
                             "--json"),
                 bound_bytes=lambda ctx: PROCESS_BYTES + _index_bytes(ctx, FACTORIES[name](ctx.num_passages))
                 + _block_lists_bytes(ctx))


STAGES: tuple[Stage, ...] = (
    Stage(name="corpus", cost="data", shapes="75-word passages", bound_bytes=lambda ctx: 256 * MB,
          argv=lambda ctx: [ctx.python, str(Path(__file__).with_name("rehearsal_corpus.py")), "--passages",
                            str(ctx.num_passages), "--out", str(ctx.out / "corpus.tsv")]),
    Stage(name="data", cost="data", shapes="BERT vocabulary, 288 wordpieces", bound_bytes=lambda ctx: PROCESS_BYTES,
          argv=lambda ctx: _realm("real-text", "--out={R}", f"--corpus.path={ctx.out / 'corpus.tsv'}",
                                  "--corpus.format=dpr_tsv", "--stop_after=data", "--init_from={T}",
                                  "--pretrain_config=configs/pretrain/base.yaml", "--tagging.kind=rule")(ctx)),
    Stage(name="tag", cost="data", shapes=f"rule tagger, {TAG_WORKERS} workers", bound_bytes=_tag_bound,
          argv=_realm("tag", *_PRETRAIN, "--workers", str(TAG_WORKERS))),
    Stage(name="warmup", cost="per-token", shapes=f"BERT-base, batch 2, {WARM_START_STEPS} steps",
          argv=_realm("warmup", "--config", "configs/warmup/base.yaml", "--train.run_dir={R}/warmup",
                      "--tagging.kind=rule", *_WARM),
          bound_bytes=_warmup_bound),
    Stage(name="ict", cost="per-token", shapes=f"BERT-base, batch 2, {WARM_START_STEPS} steps",
          argv=_realm("ict", "--config", "configs/ict/base.yaml", "--train.run_dir={R}/ict", "--ict.loader_workers=0",
                      *_WARM),
          bound_bytes=lambda ctx: _training_bound(BERT_BASE_PARAMS, 4, 384, 12, 768)),
    # note: the trainer spawns its builder (Flat), which embeds all N blocks before step 1; the run is charged for both
    Stage(name="train", cost="per-block", shapes=f"tiny, 128-d Flat index, {TRAIN_STEPS} steps",
          argv=_realm("train", *_PRETRAIN, f"--train.max_steps={TRAIN_STEPS}", "--refresh.refresh_interval=1000"),
          bound_bytes=lambda ctx: 2 * PROCESS_BYTES + TINY_PARAMS * 4 * TRAINING_COPIES
          + 2 * _index_bytes(ctx, "Flat") + _block_lists_bytes(ctx)),
    *(_index_stage(name) for name in FACTORIES if name != BUILT_BY_TRAIN),
    *(_search_stage(name) for name in FACTORIES),
    Stage(name="evaluate", cost="per-block", shapes=f"tiny, exact streamed search, {EVAL_EXAMPLES} held-out",
          argv=_realm("evaluate-mlm", "{R}/train", "--max-examples", str(EVAL_EXAMPLES), "--json", "{R}/heldout.json"),
          bound_bytes=lambda ctx: PROCESS_BYTES + _streamed_search_bytes() + _mlm_output_bytes()
          + _block_lists_bytes(ctx)),
)
STAGE_NAMES = tuple(stage.name for stage in STAGES)
