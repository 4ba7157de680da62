"""Fixtures shared by the retrieval-table tests and the offline W&B test that logs those tables: a three-block
store, two masked queries with their retrieved slots, a fake model output, and the rows ``retrieval_rows`` makes."""

import datasets
import pytest
import torch

from realm.data.block_store import BlockStore, uid_hash
from realm.data.packing import SpecialIds
from realm.data.vocab import train_wordpiece
from realm.pretrain.batch import RealmBatch
from realm.pretrain.candidates import build_candidates
from realm.pretrain.model import RealmOutput
from realm.pretrain.retrieval_table import retrieval_rows

BLOCKS = [
    ("France", "France is a country in Europe; its capital is Paris."),
    ("Germany", "Berlin is the capital of Germany."),
    ("Franchise", "A franchise is a business model, not a country."),
]
QUERIES = [("paris is the capital of france .", "france"), ("berlin is the capital of germany .", "germany")]
RETRIEVED = [[0, 1, -1], [1, 2, 0]]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    texts = [t for pair in BLOCKS for t in pair] + [q for q, _ in QUERIES]
    return train_wordpiece(texts * 3, vocab_size=300, out_dir=tmp_path_factory.mktemp("tok"), min_frequency=1)


@pytest.fixture(scope="module")
def store(tokenizer):
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    return BlockStore(
        datasets.Dataset.from_dict(
            {
                "uid": [f"{i:040x}" for i in range(1, len(BLOCKS) + 1)],
                "doc_id": [str(i) for i in range(len(BLOCKS))],
                "title": [t for t, _ in BLOCKS],
                "text": [x for _, x in BLOCKS],
                "title_ids": [enc(t) for t, _ in BLOCKS],
                "body_ids": [enc(x) for _, x in BLOCKS],
            }
        )
    )


def _sublist_start(seq, sub):
    return next(i for i in range(len(seq)) if seq[i : i + len(sub)] == sub)


@pytest.fixture(scope="module")
def batch_and_output(tokenizer, store):
    special = SpecialIds.of(tokenizer)
    queries, positions, targets = [], [], []
    for sentence, answer in QUERIES:
        ids = tokenizer(sentence, add_special_tokens=False)["input_ids"]
        span = tokenizer(answer, add_special_tokens=False)["input_ids"]
        start = _sublist_start(ids, span)
        pos = list(range(start, start + len(span)))
        queries.append([special.cls] + [special.mask if i in pos else t for i, t in enumerate(ids)] + [special.sep])
        positions.append([p + 1 for p in pos])
        targets.append(span)
    lq, m = max(map(len, queries)), max(map(len, positions))
    padded = lambda rows, n, v: torch.tensor([r + [v] * (n - len(r)) for r in rows])  # noqa: E731
    batch = RealmBatch(
        query_input_ids=padded(queries, lq, special.pad),
        query_attention_mask=padded([[1] * len(q) for q in queries], lq, 0),
        mask_positions=padded(positions, m, 0),
        target_ids=padded(targets, m, special.pad),
        target_mask=padded([[1] * len(t) for t in targets], m, 0),
        source_uid_hashes=torch.tensor([uid_hash("nope"), 0]),
        example_ids=torch.tensor([10, 11]),
    )
    batch.candidates = build_candidates(batch, torch.tensor(RETRIEVED), store, special, max_block_length=32)
    gen = torch.Generator().manual_seed(0)
    bsz, k = batch.candidates.block_ids.shape
    logits = torch.randn(bsz, k, generator=gen).masked_fill(~batch.candidates.slot_mask, -1e4)
    token_log_probs = -torch.rand(bsz, k, m, generator=gen) * 3
    predictions = batch.target_ids.clone()
    predictions[1] = special.mask  # row 1 is wrong
    output = RealmOutput(logits, token_log_probs, predictions, predictions.clone())
    return batch, output


@pytest.fixture(scope="module")
def rows(batch_and_output, store, tokenizer):
    batch, output = batch_and_output
    return retrieval_rows(batch, output, store, tokenizer, index_version=4, staleness=2, step=6, max_rows=8)
