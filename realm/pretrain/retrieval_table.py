"""What each sampled query retrieved during pre-training, as rows: W&B tables and ``RUN/retrievals.jsonl``."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, TypedDict

import torch

from realm.core.atomic import disk_writes
from realm.core.tracking import log_wandb_table
from realm.run.layout import RETRIEVALS_FILE

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from realm.data.block_store import BlockStore
    from realm.pretrain.batch import RealmBatch
    from realm.pretrain.model import RealmOutput


class SlotRow(TypedDict):
    """What one slot of a query held (slot 0: the null document) and how the model used it."""

    block_id: int
    """Row of the blocks dataset (-1 for the null document and for empty slots)."""
    title: str
    snippet: str
    """The first ``SNIPPET_CHARS`` characters of the block's text."""
    p_z: float
    """p(z|x): the retriever's probability of this slot among the query's slots."""
    p_y: float
    """p(gold span|z,x): the product over the span's wordpieces."""
    has_gold: bool
    """Whether the block's text contains the gold span (``contains_answer``)."""


class RetrievalRow(TypedDict):
    """One sampled query of a training step: what it asked, what it retrieved (``slots``) and what it predicted."""

    step: int
    index_version: int
    staleness: int
    example_id: int
    query: str
    """The masked query as wordpieces decode ([MASK] kept, other special tokens dropped)."""
    gold: str
    prediction: str
    closed_book: str
    """What the encoder predicts with the null document alone."""
    correct: bool
    """Whether every wordpiece of the span was predicted."""
    slots: list[SlotRow]


TABLE_KEY = "inspect/retrievals"
"""W&B key of the retrieval table (long format: one row per query x slot, ``slot_rows``)."""
SLOT_FIELDS = tuple(SlotRow.__annotations__)
"""A slot's fields, the columns after the query's in the W&B table."""
SNIPPET_CHARS = 120
NULL_TITLE = "(null document)"
EMPTY_TITLE = "(empty)"


def fold_for_matching(text: str) -> str:
    """``text`` lower-cased, accents stripped, words and punctuation separated by single spaces: the form in which
    decoded wordpieces (``u . s .``) and raw block text (``U.S.``) compare equal. Not QA's answer normalisation
    (``realm.qa.metrics``): articles and punctuation stay."""
    text = unicodedata.normalize("NFKD", text.lower())
    text = "".join(c for c in text if not unicodedata.combining(c))
    return " ".join(re.findall(r"\w+|[^\w\s]", text))


def contains_answer(text: str, answer: str) -> bool:
    """Whether ``answer`` occurs in ``text`` on word boundaries (both ``fold_for_matching``)."""
    return contains_normalized(normalized_for_search(text), answer)


def normalized_for_search(text: str) -> str:
    """``text`` normalised once for many ``contains_normalized`` look-ups (a corpus searched for every span)."""
    return f" {fold_for_matching(text)} "


def contains_normalized(searched: str, answer: str) -> bool:
    """``contains_answer`` against a ``normalized_for_search`` text."""
    answer = fold_for_matching(answer)
    return bool(answer) and f" {answer} " in searched


def _decode(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False).strip()


@torch.no_grad()
def retrieval_rows(
    batch: RealmBatch,
    output: RealmOutput,
    store: BlockStore,
    tokenizer: PreTrainedTokenizerBase,
    *,
    index_version: int,
    staleness: int,
    step: int,
    max_rows: int,
) -> list[RetrievalRow]:
    """One row per query (the first ``max_rows`` of ``batch``) describing what was retrieved and how it was used.

    Args:
        batch: The batch the model was run on, with its candidates; ``output``: the model's output for it.
        store: Titles and texts of the retrieved blocks (its ``.blocks`` dataset).

    Returns:
        A ``RetrievalRow`` per query, its ``slots`` one ``SlotRow`` per slot (0 = the null document). The only device
        syncs of the inspection path happen here.
    """
    cand = batch.candidates
    if cand is None:
        raise ValueError("batch has no candidates: retrieval_rows needs the batch the model was run on")
    n = min(max_rows, batch.query_input_ids.shape[0])
    # one transfer per tensor
    query_ids = batch.query_input_ids[:n].cpu().tolist()
    query_mask = batch.query_attention_mask[:n].cpu().tolist()
    target_mask = batch.target_mask[:n].cpu().bool()
    targets = batch.target_ids[:n].cpu()
    predictions = output.predictions[:n].cpu()
    closed_book = output.closed_book_predictions[:n].cpu()
    p_z = torch.softmax(output.retrieval_logits[:n].detach().float(), dim=-1).cpu()
    log_p_y = (output.token_log_probs[:n].detach().float() * batch.target_mask[:n, None, :].float()).sum(-1).cpu()
    block_ids = cand.block_ids[:n].cpu().tolist()
    slot_mask = cand.slot_mask[:n].cpu().tolist()
    example_ids = batch.example_ids[:n].cpu().tolist()

    present = sorted({i for row in block_ids for i in row if i >= 0})
    texts = {}
    if present:
        columns = store.blocks[present]
        texts = {i: (t, x) for i, t, x in zip(present, columns["title"], columns["text"])}
    drop = set(tokenizer.all_special_ids) - {tokenizer.mask_token_id}

    rows: list[RetrievalRow] = []
    for b in range(n):
        query = [t for t, m in zip(query_ids[b], query_mask[b]) if m and t not in drop]
        tmask = target_mask[b]
        gold = _decode(tokenizer, targets[b][tmask].tolist())
        prediction = _decode(tokenizer, predictions[b][tmask].tolist())
        slots: list[SlotRow] = []
        for k, block in enumerate(block_ids[b]):
            if k == 0:
                title, text = NULL_TITLE, ""
            elif block < 0 or not slot_mask[b][k]:
                title, text = EMPTY_TITLE, ""
            else:
                title, text = texts[block]
            slots.append(
                {
                    "block_id": int(block),
                    "title": title,
                    "snippet": text[:SNIPPET_CHARS],
                    "p_z": float(p_z[b, k]),
                    "p_y": float(torch.exp(log_p_y[b, k])),
                    "has_gold": k > 0 and block >= 0 and contains_answer(text, gold),
                }
            )
        rows.append(
            {
                "step": int(step),
                "index_version": int(index_version),
                "staleness": int(staleness),
                "example_id": int(example_ids[b]),
                "query": _decode(tokenizer, query),
                "gold": gold,
                "prediction": prediction,
                "closed_book": _decode(tokenizer, closed_book[b][tmask].tolist()),
                "correct": bool(torch.equal(predictions[b][tmask], targets[b][tmask])),
                "slots": slots,
            }
        )
    return rows


def slot_rows(row: RetrievalRow) -> list[dict[str, Any]]:
    """A row of ``retrieval_rows`` in long format: one dict per slot, the query's fields repeated, then ``slot``
    (0 = the null document) and the slot's ``SLOT_FIELDS``; so a W&B table can be filtered by slot or grouped by
    ``has_gold``."""
    query = {key: value for key, value in row.items() if key != "slots"}
    return [{**query, "slot": k, **{f: slot[f] for f in SLOT_FIELDS}} for k, slot in enumerate(row.get("slots", []))]


def _table(rows: Sequence[RetrievalRow]) -> tuple[list[str], list[list[Any]]]:
    long = [r for row in rows for r in slot_rows(row)]
    columns: list[str] = []
    for r in long:
        columns.extend(c for c in r if c not in columns)
    return columns, [[r.get(c) for c in columns] for r in long]


def log_retrieval_table(accelerator: Any, rows: Sequence[RetrievalRow], step: int, run_dir: str | Path) -> None:
    """Appends ``rows`` to ``RUN/retrievals.jsonl`` (one query a line, its slots nested) and, when a W&B tracker is
    active, logs them as a long ``wandb.Table`` (one row per query x slot) under ``inspect/retrievals`` at ``step``.
    Main process only (others return)."""
    if not rows or not accelerator.is_main_process:
        return
    path = Path(run_dir) / RETRIEVALS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with disk_writes(path), open(path, "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(dict(r)) + "\n" for r in rows))
    log_wandb_table(accelerator, TABLE_KEY, _table(list(rows)), step)
