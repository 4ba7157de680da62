"""Vocabularies: load a pretrained BERT tokenizer, or train a small WordPiece one for runs built from scratch.

Everything downstream (block building, sentence preparation, collators) needs a *fast* tokenizer: character offsets
are what keep block texts, salient spans and gold answers consistent with the wordpiece ids.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from itertools import repeat
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from tokenizers import Tokenizer, normalizers, pre_tokenizers, trainers
from tokenizers.models import WordPiece
from transformers import AutoTokenizer, BertTokenizerFast, PreTrainedTokenizerBase

from realm.core.errors import InputError, MissingFileError, UserError

logger = logging.getLogger(__name__)

SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""BERT's special tokens, in the order that gives [PAD] id 0 (padding masks and embeddings assume it)."""
CONTINUATION = "##"
"""WordPiece's prefix of a piece that continues a word."""


class TokenizerError(UserError, ValueError):
    """A tokenizer that loads but cannot serve: not fast, a special token missing, a vocabulary of the special tokens
    alone, or one that reads none of the text it is given. The message names it and what is wrong."""


def train_wordpiece(
    texts: Iterable[str],
    vocab_size: int,
    out_dir: str | Path,
    lowercase: bool = True,
    min_frequency: int = 2,
) -> BertTokenizerFast:
    """Trains a BERT WordPiece vocabulary and saves it so ``AutoTokenizer.from_pretrained(out_dir)`` reloads it.

    The normalizer and pre-tokenizer are BERT's (``BertNormalizer`` / ``BertPreTokenizer``), so the trained
    tokenizer splits text exactly as the one it is wrapped in; special tokens take ids 0-4
    (``[PAD]``, ``[UNK]``, ``[CLS]``, ``[SEP]``, ``[MASK]``).

    Args:
        texts: Training text; iterated once, so a generator over a large corpus is fine.
        vocab_size: Target vocabulary size, special tokens included (the result may be smaller on little text).
        out_dir: Folder the tokenizer is saved to (created if needed).
        lowercase: Uncased vocabulary (lower-case and strip accents), as ``bert-base-uncased``.
        min_frequency: Minimum pair count for a merge.

    Returns:
        The trained tokenizer, a fast ``BertTokenizer``.

    Reproducible: the same texts give the same vocabulary, ids included, in every process. The ``tokenizers``
    trainer alone does not (huggingface/tokenizers#1794): it numbers the ``##c`` continuation pieces in the order
    of a randomly seeded hash map, and those ids break ties between merges of equal count, so the vocabulary kept
    at ``vocab_size`` changed from run to run. Here the ``##c`` pieces are numbered first, in sorted order (passed
    with the special tokens; the saved tokenizer treats them as ordinary entries), which fixes every later id.
    """
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}")
    model = Tokenizer(WordPiece(unk_token="[UNK]"))
    model.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=lowercase)
    model.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    counts = word_counts(model, texts)
    continuations = sorted({CONTINUATION + char for word in counts for char in word[1:]})
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[*SPECIAL_TOKENS, *continuations],
        continuing_subword_prefix=CONTINUATION,
        show_progress=False,
    )
    model.train_from_iterator(_repeated_words(counts), trainer=trainer)
    vocab = model.get_vocab()
    for index, token in enumerate(SPECIAL_TOKENS):
        if vocab.get(token) != index:
            raise RuntimeError(f"WordPiece trainer put {token} at id {vocab.get(token)}, expected {index}")
    # note: BertTokenizer rebuilds BERT's normalizer, pre-tokenizer, decoder and [CLS]/[SEP] template from the
    # vocabulary, so the saved tokenizer.json and tokenizer_config.json are those of a stock BERT tokenizer.
    # model_max_length matches BertConfig's default max_position_embeddings.
    tokenizer = BertTokenizerFast(vocab=vocab, do_lower_case=lowercase, model_max_length=512)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out_dir))
    tokenizer.name_or_path = str(out_dir)  # note: as if loaded from there, so messages (and blocks) can name it
    logger.info("trained a WordPiece vocabulary of %d entries (lowercase=%s) into %s", len(vocab), lowercase, out_dir)
    return tokenizer


def word_counts(model: Tokenizer, texts: Iterable[str]) -> Counter[str]:
    """How often each word occurs in ``texts`` once normalized and pre-tokenized by ``model`` (what the trainer
    counts): one pass over ``texts``, memory in the number of distinct words."""
    counts: Counter[str] = Counter()
    for text in texts:
        normalized = model.normalizer.normalize_str(text)
        counts.update(word for word, _ in model.pre_tokenizer.pre_tokenize_str(normalized))
    return counts


def _repeated_words(counts: Counter[str], chunk: int = 4096) -> Iterator[str]:
    """The words of ``counts``, each as often as it was counted, in sorted order, as space-joined texts of at most
    ``chunk`` copies: normalizing and pre-tokenizing a normalized word gives it back, so the trainer counts the same
    words as from the original texts."""
    for word in sorted(counts):
        remaining = counts[word]
        while remaining:
            take = min(remaining, chunk)
            yield " ".join(repeat(word, take))
            remaining -= take


def check_tokenizer(tokenizer: PreTrainedTokenizerBase, name: str = "tokenizer") -> None:
    """Raises ``TokenizerError`` (a ``ValueError``) unless ``tokenizer`` is fast, has [CLS], [SEP], [PAD] and [MASK]
    tokens, and a vocabulary beyond them."""
    if not getattr(tokenizer, "is_fast", False):
        raise TokenizerError(f"{name}: a fast tokenizer is required (offset mappings align texts and wordpieces)")
    missing = [role for role in ("cls", "sep", "pad", "mask") if getattr(tokenizer, f"{role}_token_id", None) is None]
    if missing:
        raise TokenizerError(f"{name}: tokenizer has no {', '.join(missing)} token(s); REALM's input layouts need them")
    # note: the floor is "one entry that is not a special token", not a size: what transformers loads from a folder
    # without its vocabulary file is the special tokens alone (a BERT tokenizer of 5 entries that reads every word as
    # [UNK]), while tiny test models have real vocabularies of 6 to 50 entries. A vocabulary of other text is caught
    # where text is read (check_reads_text).
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)):
        raise TokenizerError(
            f"{name}: its vocabulary holds its {len(tokenizer)} special tokens alone, so every word would read as "
            f"{tokenizer.unk_token}"
        )


def check_reads_text(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], what: str) -> None:
    """Raises ``TokenizerError`` when ``tokenizer`` cuts ``texts``, a sample of ``what`` it is about to read, into
    [UNK] alone: a vocabulary of other text (another language or script) would turn all of it into [UNK] blocks or
    queries without a word. Texts of no wordpieces at all are no evidence either way."""
    rows = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"] if texts else []
    pieces = [piece for row in rows for piece in row]
    if pieces and all(piece == tokenizer.unk_token_id for piece in pieces):
        raise TokenizerError(
            f"tokenizer {tokenizer.name_or_path or '(unnamed)'} reads none of {what}: all {len(pieces)} wordpieces of "
            f"its first {len(texts)} texts are {tokenizer.unk_token}; use a vocabulary of this text (`realm vocab` "
            "trains one)"
        )


def _lost_files(folder: Path) -> str:
    """What a tokenizer folder lacks of what ``realm vocab`` saves, as the tail of an error ("" when nothing).
    transformers loads such a folder without a word: without ``tokenizer.json`` (and ``vocab.txt``) as a tokenizer of
    the special tokens alone, without ``tokenizer_config.json`` with no special tokens."""
    lost = [] if (folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file() else ["tokenizer.json"]
    lost += [] if (folder / "tokenizer_config.json").is_file() else ["tokenizer_config.json"]
    return "".join(f"; {name} is missing from the folder" for name in lost)


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """SHA-256 hex of what decides a text's wordpiece ids: the vocabulary in id order (added tokens included), the
    normalizer (lower-casing, accents), the pre-tokenizer and the model's settings.

    Two tokenizers with one fingerprint cut every text into the same ids. The fingerprint is the same in every
    process and after ``save_pretrained`` / ``load_tokenizer``: runtime state (truncation, padding) is left out.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("tokenizer_fingerprint needs a fast tokenizer")
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    settings = {key: value for key, value in spec["model"].items() if key != "vocab"}
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    payload = {"vocab": vocab, "model": settings, "normalizer": spec["normalizer"], "pre": spec["pre_tokenizer"]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def looks_local(name_or_path: str | Path) -> bool:
    """Whether ``name_or_path`` names a local path rather than a hub model: absolute, starting with ``.`` or ``~``,
    or existing (the rule every loader of a tokenizer or model folder follows)."""
    name = str(name_or_path)
    path = Path(name).expanduser()
    return path.is_absolute() or name.startswith((".", "~")) or path.exists()


def load_tokenizer(name_or_path: str | Path) -> PreTrainedTokenizerBase:
    """Loads a pretrained fast tokenizer from a local folder or (when online) a hub name.

    Raises:
        FileNotFoundError: ``name_or_path`` looks like a local path but does not exist.
        OSError: Nothing could be loaded under that name (offline, or no such model).
        TokenizerError: The tokenizer fails ``check_tokenizer`` (a ``ValueError``; the message names what a local
            folder lacks of ``realm vocab``'s files).
    """
    name = str(name_or_path)
    path = Path(name).expanduser()
    local = looks_local(name)
    if local and not path.is_dir():
        raise MissingFileError(f"tokenizer folder not found: {path}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path) if local else name)
    except (OSError, ValueError) as err:
        # note: on one line; transformers' messages run over several
        raise InputError(
            f"could not load a tokenizer from {name!r} (a local folder, or a hub name when online): "
            + " ".join(str(err).split())
        ) from err
    try:
        check_tokenizer(tokenizer, name)
    except TokenizerError as err:
        raise TokenizerError(f"{err}{_lost_files(path) if local else ''}") from None
    return tokenizer
