"""ict.prepare=lazy: a block is split and tokenised when its key is read; one too short for a cloze reads the next."""

from __future__ import annotations

import datasets
import numpy as np

from realm.pretrain.ict import LazyICTExamples


class WordIds:
    """A stand-in tokenizer: one id per word (its length)."""

    def __call__(self, texts: list[str], add_special_tokens: bool = False) -> dict:
        return {"input_ids": [[len(w) for w in t.split()] for t in texts]}


def test_a_short_block_reads_the_next_block_that_poses_a_cloze_and_skipped_blocks_are_never_read():
    texts = ["Only one sentence here.", "First of two. Second of two.", "Held out. Never read.", "Lone block."]
    blocks = datasets.Dataset.from_dict({"text": texts, "title_ids": [[i] for i in range(4)]})
    lazy = LazyICTExamples(blocks, WordIds(), skipped=np.array([False, False, True, False]))
    assert len(lazy) == 3 and lazy.rows.tolist() == [0, 1, 3]
    made = [lazy[(2, position)] for position in range(3)]
    assert [ex["title_ids"] for ex in made] == [[1], [1], [1]]  # 0 and 3 (wrapping round) fall through to 1
    assert made[0]["sentence_ids"] == [[5, 2, 4], [6, 2, 4]] and made[2]["epoch"] == 2 and made[2]["idx"] == 2
