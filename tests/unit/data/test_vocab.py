"""WordPiece training, saving and reloading; tokenizer loading checks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from realm.data.packing import SpecialIds
from realm.data.vocab import (
    check_tokenizer,
    load_tokenizer,
    tokenizer_fingerprint,
    train_wordpiece,
)

TEXTS = [
    "Ada Lovelace was an English mathematician and writer.",
    "She worked with Charles Babbage on the Analytical Engine.",
    "Babbage was born in London on 26 December 1791.",
    "The Analytical Engine was a proposed mechanical computer.",
] * 5


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("vocab")
    return train_wordpiece(TEXTS, 120, out, min_frequency=1), out


def test_trained_vocab_reloads_with_auto_tokenizer(trained):
    tokenizer, out = trained
    reloaded = AutoTokenizer.from_pretrained(out)
    text = "Lovelace met Babbage in London, 1833."
    assert reloaded.is_fast
    assert reloaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert reloaded.get_vocab() == tokenizer.get_vocab()
    assert len(tokenizer) <= 120


def test_special_tokens_have_bert_ids(trained):
    tokenizer, _ = trained
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")}
    assert ids == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    assert SpecialIds.of(tokenizer) == SpecialIds(cls=2, sep=3, pad=0, mask=4)
    encoded = tokenizer("Ada", "London")["input_ids"]
    assert encoded[0] == 2 and encoded[-1] == 3 and encoded.count(3) == 2  # [CLS] a [SEP] b [SEP]


def test_uncased_vocab_lowercases_and_cased_keeps_case(trained, tmp_path):
    tokenizer, _ = trained
    assert tokenizer.tokenize("ADA") == tokenizer.tokenize("ada")
    cased = train_wordpiece(TEXTS, 120, tmp_path, lowercase=False, min_frequency=1)
    assert cased.tokenize("Ada") != cased.tokenize("ada")


def test_the_same_texts_give_the_same_vocabulary_ids_included(tmp_path):
    """The tokenizers trainer alone numbers ``##c`` pieces in hash-map order, so ties between merges fell
    differently from call to call (3 calls on this world gave 3 vocabularies before the fix); a subprocess has a
    hash seed of its own."""
    from realm.data.world import WorldConfig, generate_world

    world = generate_world(WorldConfig(seed=3, num_entities=60))
    texts = [record["text"] for record in world.corpus + world.pretrain]
    first = train_wordpiece(texts, 400, tmp_path / "a").get_vocab()
    assert len(first) == 400  # the vocabulary is cut at vocab_size, where ties decide what is kept
    for name in "bcd":
        assert train_wordpiece(iter(texts), 400, tmp_path / name).get_vocab() == first
    script = (
        "import json, sys; from realm.data.vocab import train_wordpiece;"
        "texts = json.load(sys.stdin); print(json.dumps(train_wordpiece(texts, 400, sys.argv[1]).get_vocab()))"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "e")], input=json.dumps(texts),
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(done.stdout.splitlines()[-1]) == first
    saved = load_tokenizer(tmp_path / "a")  # the ##c pieces went in as special tokens; saved, they are ordinary
    assert sorted(saved.all_special_tokens) == sorted(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    pieces = saved.tokenize("zqxzqx")  # a word no merge covers splits into continuation pieces as before
    assert pieces[0][0] == "z" and all(piece.startswith("##") for piece in pieces[1:]) and len(pieces) > 1


def test_load_tokenizer_reads_a_saved_folder_and_checks_specials(trained):
    _, out = trained
    tokenizer = load_tokenizer(str(out))
    check_tokenizer(tokenizer)
    assert tokenizer.mask_token == "[MASK]"


def test_load_tokenizer_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing-tok"):
        load_tokenizer(tmp_path / "missing-tok")
    with pytest.raises(OSError, match="could not load a tokenizer from 'no-such-org/no-such-model'"):
        load_tokenizer("no-such-org/no-such-model")  # offline in tests: fails fast


def test_check_tokenizer_rejects_missing_specials():
    bare = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")), unk_token="[UNK]"
    )
    with pytest.raises(ValueError, match="no cls, sep, pad, mask token"):
        check_tokenizer(bare)


def test_tokenizer_fingerprint_survives_saving_and_use_and_tells_vocabularies_and_casing_apart(trained, tmp_path):
    tokenizer, out = trained
    assert tokenizer.name_or_path == str(out)  # named by its folder, as a loaded one is (blocks record the name)
    reloaded = load_tokenizer(out)
    reloaded("Ada " * 50, truncation=True, max_length=8)  # sets the backend's truncation, which is not a vocabulary
    assert tokenizer_fingerprint(reloaded) == tokenizer_fingerprint(tokenizer)
    cased = train_wordpiece(TEXTS, 120, tmp_path / "cased", lowercase=False, min_frequency=1)
    smaller = train_wordpiece(TEXTS, 100, tmp_path / "smaller", min_frequency=1)
    assert len({tokenizer_fingerprint(t) for t in (tokenizer, cased, smaller)}) == 3
