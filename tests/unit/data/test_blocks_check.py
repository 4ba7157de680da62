"""Saved blocks that are corrupt: an Arrow file cut short (pyarrow's ``OSError`` / ``ArrowInvalid`` tracebacks, or no
rows at all), or bytes flipped in a wordpiece id (``IndexError: index out of range in self`` in the embedder). Each
is a one-line ``UserError`` naming the folder or file and saying to cut the blocks again, raised where they load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from realm.core.errors import UserError
from realm.data.blocks import check_blocks_tokenizer, load_blocks
from realm.data.vocab import load_tokenizer
from tests.helpers import make_run

ARROW = "data-00000-of-00001.arrow"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, Path]:
    """(blocks, tokenizer) of ``make_run``: 12 blocks of wordpiece ids 5 ... 44, a vocabulary of 45 entries."""
    _, blocks, tokenizer = make_run(tmp_path_factory.mktemp("saved"), 12)
    return blocks, tokenizer


def _copy(blocks: Path, out: Path) -> Path:
    shutil.copytree(blocks, out)
    return out


def _set_id(blocks: Path, row: int, column: str, value: int) -> None:
    """Overwrites the first wordpiece id of ``row``'s ``column`` in the Arrow file itself (4 bytes flipped)."""
    first = load_blocks(blocks)[row][column][:3]
    data = bytearray((blocks / ARROW).read_bytes())
    at = bytes(data).find(np.array(first, dtype="<i4").tobytes())
    assert at > 0 and bytes(data).count(np.array(first, dtype="<i4").tobytes()) == 1
    data[at : at + 4] = np.array([value], dtype="<i4").tobytes()
    (blocks / ARROW).write_bytes(bytes(data))


@pytest.mark.parametrize("keep", [0.5, 0.1])
def test_an_arrow_file_cut_short_is_one_error_naming_it(saved, tmp_path, keep):
    blocks = _copy(saved[0], tmp_path / "blocks")
    data = (blocks / ARROW).read_bytes()
    (blocks / ARROW).write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(UserError) as err:
        load_blocks(blocks)
    message = str(err.value)
    assert message.startswith(f"{blocks / ARROW}: unreadable (")
    assert message.endswith("cut them again with `realm blocks`")
    assert "\n" not in message


def test_blocks_with_fewer_rows_than_their_stats_say_are_refused(saved, tmp_path):
    """An Arrow file cut right after its schema reads as no rows at all, without an error from pyarrow."""
    blocks = _copy(saved[0], tmp_path / "blocks")
    (blocks / "corpus_stats.json").write_text(json.dumps({"num_blocks": 12}))
    load_blocks(blocks)
    (blocks / "corpus_stats.json").write_text(json.dumps({"num_blocks": 13}))
    with pytest.raises(UserError, match=r"holds 12 blocks, but corpus_stats.json says 13 .*`realm blocks`$"):
        load_blocks(blocks)
    (blocks / "corpus_stats.json").write_text('{"num_blocks": 1')
    with pytest.raises(UserError, match=r"corpus_stats.json: unreadable \(.*\); cut them again with `realm blocks`$"):
        load_blocks(blocks)


@pytest.mark.parametrize("column, value", [("body_ids", 2**31 - 1), ("title_ids", 45), ("body_ids", -7)])
def test_a_wordpiece_id_outside_the_vocabulary_names_its_block_and_id(saved, tmp_path, column, value):
    blocks = _copy(saved[0], tmp_path / "blocks")
    _set_id(blocks, 7, column, value)
    tokenizer = load_tokenizer(saved[1])
    with pytest.raises(UserError) as err:
        check_blocks_tokenizer(blocks, tokenizer)
    assert str(err.value) == (
        f"{blocks}: block 7 holds wordpiece id {value} in {column}, outside the 45 entries of tokenizer {saved[1]} "
        "(corrupt, or cut with another tokenizer): cut them again with `realm blocks`"
    )
    with pytest.raises(UserError, match=f"^{blocks}: block 7 holds wordpiece id {value} in {column}, outside "):
        load_blocks(blocks, tokenizer)
    load_blocks(blocks)  # without a tokenizer, nothing to check the ids against


def test_intact_blocks_pass_every_check(saved):
    blocks, tokenizer = saved
    check_blocks_tokenizer(blocks, load_tokenizer(tokenizer))
    assert len(load_blocks(blocks, load_tokenizer(tokenizer))) == 12
