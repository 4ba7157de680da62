"""How fast the knowledge-augmented encoder learns to *read* a block, with retrieval taken out of the question.

Every query gets its gold article in slot 1 (plus the null document and random blocks), so the only thing to learn
is copying the masked fact from the block. This bounds what pre-training can reach in a given number of steps: if
the encoder cannot read an oracle block, no retriever will make it predict held-out facts.

    python -m experiments.demo.reader_oracle RUN --steps 700            # RUN = a `realm demo` output folder
    python -m experiments.demo.reader_oracle RUN --steps 400 --model.num_layers=4 --optim.lr=5e-4   # other encoder settings

Prints the loss and whole-span accuracy (moving average over 50 steps) every 50 steps. No assertions.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from realm.core.config import load_config
from realm.data.block_store import BlockStore
from realm.data.blocks import check_blocks_tokenizer, load_blocks
from realm.data.jsonl import iter_field
from realm.data.packing import SpecialIds
from realm.data.sentences import load_jsonl_dataset, prepare_sentences
from realm.data.tagging import RuleTagger
from realm.data.vocab import load_tokenizer
from realm.models.encoder import KnowledgeAugmentedEncoder
from realm.models.retriever import Retriever
from realm.pretrain.batch import PretrainCollator
from realm.pretrain.candidates import build_candidates
from realm.pretrain.config import PretrainConfig
from realm.pretrain.loss import marginal_mlm_loss
from realm.pretrain.model import RealmModel
from realm.training.optim import build_optimizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a `realm demo` output folder (world/, tokenizer/, blocks/, ict/, config.yaml)")
    parser.add_argument("--steps", type=int, default=700)
    parser.add_argument(
        "--mode", default="salient", choices=["salient", "gold"], help="mask a salient span or the fact"
    )
    parser.add_argument("--seed", type=int, default=0)
    args, overrides = parser.parse_known_args()
    torch.manual_seed(args.seed)
    cfg = load_config(PretrainConfig, f"{args.run}/config.yaml", overrides)  # e.g. --model.num_layers=4
    tokenizer = load_tokenizer(cfg.data.tokenizer)
    check_blocks_tokenizer(cfg.data.blocks, tokenizer)
    special = SpecialIds.of(tokenizer)
    blocks = load_blocks(cfg.data.blocks)
    store = BlockStore(blocks)
    block_of_title = {title: i for i, title in enumerate(blocks["title"])}
    entities = list(iter_field(cfg.data.sentences, "entity"))
    rows = prepare_sentences(
        load_jsonl_dataset(cfg.data.sentences), tokenizer, RuleTagger(), cfg.retriever.max_query_length
    )
    encoder = KnowledgeAugmentedEncoder.from_config(cfg.model.bert_config(len(tokenizer)))
    model = RealmModel(Retriever.from_pretrained(f"{args.run}/ict/retriever"), encoder)
    optimizer, scheduler = build_optimizer(model, cfg.optim, args.steps)
    collator = PretrainCollator(special, cfg.retriever.max_query_length, args.mode, args.seed)
    rng = np.random.default_rng(args.seed)
    num_random = cfg.retriever.num_retrieved - 1
    accuracy: list[float] = []
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        picked = rng.choice(len(rows), cfg.train.batch_size, replace=False)
        batch = collator([dict(rows[int(i)], idx=int(i)) for i in picked])
        gold = [block_of_title[entities[i]] for i in batch.example_ids.tolist()]
        chosen = torch.tensor([[g, *rng.choice(len(blocks), num_random).tolist()] for g in gold])
        batch.candidates = build_candidates(batch, chosen, store, special, cfg.retriever.max_block_length)
        out = model(batch)
        loss = marginal_mlm_loss(out.retrieval_logits, out.token_log_probs, batch.target_mask)
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        mask = batch.target_mask.bool()
        accuracy.append(((out.predictions == batch.target_ids) | ~mask).all(1).float().mean().item())
        if step % 50 == 0:
            print(
                f"step {step:5d}  loss {loss.item():.3f}  span accuracy (last 50) {np.mean(accuracy[-50:]):.3f}  "
                f"{time.perf_counter() - start:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
