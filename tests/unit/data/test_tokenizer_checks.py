"""Tokenizers that load but cannot serve: a folder missing ``tokenizer.json`` (transformers falls back to a 5-entry
``BertTokenizer`` that reads every word as ``[UNK]``) or ``tokenizer_config.json`` (no special tokens), a vocabulary
too small to spell text, and one that reads none of the text it is given. Each is a one-line ``UserError`` naming
the tokenizer, raised where it is loaded or first used, never all-``[UNK]`` blocks or sentences."""

from __future__ import annotations

import shutil
from pathlib import Path

import datasets
import pytest
from transformers import BertTokenizer

from realm.core.errors import UserError
from realm.data.blocks import build_blocks
from realm.data.corpus import Document
from realm.data.sentences import prepare_sentences
from realm.data.vocab import check_reads_text, load_tokenizer
from tests.helpers import SMALL_TEXTS, small_tokenizer

TEXTS = SMALL_TEXTS


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    return small_tokenizer(tmp_path_factory.mktemp("tok") / "tok")


def _without(folder: Path, name: str, out: Path) -> Path:
    shutil.copytree(folder, out)
    (out / name).unlink()
    return out


def _word_vocab(folder: Path, size: int) -> Path:
    """A tokenizer folder whose vocabulary is the special tokens and the words ``w0``, ``w1`` ... (no letters)."""
    folder.mkdir()
    words = [f"w{i}" for i in range(size - 5)]
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    BertTokenizer(vocab=str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


def test_a_folder_without_tokenizer_json_is_refused_for_its_five_entry_fallback(trained, tmp_path):
    folder = _without(trained, "tokenizer.json", tmp_path / "tok")
    with pytest.raises(UserError) as err:
        load_tokenizer(folder)
    message = str(err.value)
    assert message.startswith(f"{folder}: its vocabulary holds its 5 special tokens alone")
    assert message.endswith("; tokenizer.json is missing from the folder")
    assert "\n" not in message


def test_a_folder_without_tokenizer_config_is_one_user_error_naming_the_file(trained, tmp_path):
    """Its message was good, but a ``ValueError``, so every command printed it below a traceback."""
    folder = _without(trained, "tokenizer_config.json", tmp_path / "tok")
    with pytest.raises(UserError) as err:
        load_tokenizer(folder)
    message = str(err.value)
    assert message.startswith(f"{folder}: ") and "tokenizer_config.json is missing" in message
    assert "\n" not in message


def test_the_vocabulary_floor_is_one_entry_besides_the_special_tokens(tmp_path):
    """Tiny test models have vocabularies of a few words; what a folder without its vocabulary file loads as has
    none."""
    assert len(load_tokenizer(_word_vocab(tmp_path / "ok", 6))) == 6
    with pytest.raises(UserError, match="holds its 5 special tokens alone, so every word would read as \\[UNK\\]$"):
        load_tokenizer(_word_vocab(tmp_path / "specials", 5))


def test_a_load_error_of_transformers_is_one_line():
    with pytest.raises(UserError) as err:
        load_tokenizer("no-such-org/no-such-model")  # offline in tests: fails fast
    assert "\n" not in str(err.value)


def test_a_tokenizer_that_reads_none_of_a_sample_is_refused(trained, tmp_path):
    words = load_tokenizer(_word_vocab(tmp_path / "words", 45))
    with pytest.raises(UserError, match=rf"^tokenizer {tmp_path / 'words'} reads none of the corpus: all 1[0-9] "):
        check_reads_text(words, TEXTS[:2], "the corpus")
    check_reads_text(words, ["w1 w2 and more"], "the corpus")  # a known word is enough
    check_reads_text(words, ["", "   "], "the corpus")  # nothing to read is not a mismatch
    check_reads_text(words, [], "the corpus")
    check_reads_text(load_tokenizer(trained), TEXTS, "the corpus")


def test_blocks_and_sentences_are_not_cut_into_unknown_wordpieces(tmp_path):
    words = load_tokenizer(_word_vocab(tmp_path / "words", 45))
    docs = [Document(id=str(i), title="Ada", text=text) for i, text in enumerate(TEXTS)]
    with pytest.raises(UserError, match="reads none of the corpus"):
        build_blocks(iter(docs), words, 64, cache_dir=tmp_path / "cache")
    with pytest.raises(UserError, match="reads none of the sentences"):
        prepare_sentences(datasets.Dataset.from_dict({"text": TEXTS}), words, None, 16)
