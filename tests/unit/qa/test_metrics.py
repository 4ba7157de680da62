"""QA metrics: SQuAD v1.1 normalisation parity (plus NFD), ORQA regex EM, DPR has_answer and top-k accuracy."""

import re
import string
import unicodedata

import pytest

from realm.qa.metrics import (
    aggregate,
    exact_match,
    has_answer,
    normalize_answer,
    reader_oracle,
    regex_match,
    simple_tokenize,
    top_k_accuracy,
)


def _squad_reference(s):
    """The official SQuAD v1.1 evaluate script's normalisation, rewritten from its described logic."""

    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


PARITY_STRINGS = [
    "",
    "   ",
    "The Beatles",
    "the beatles",
    "A dog",
    "an apple a day",
    "Beatles, The",
    "in the middle of the night",
    "the",
    "a an the",
    "theater",
    "Anathema",
    "atheist",
    "U.S.",
    "U.S.A.",
    "Dr. Who?",
    "rock-n-roll",
    "the-end",
    "a-team",
    "New   York\tCity\nUSA",
    "  leading and trailing  ",
    "$1,000,000",
    "3.14",
    "O'Neil",
    "(parenthesised)",
    'quote "this"',
    "under_score",
    "back\\slash",
    "A.B.C. the D",
    "THE END",
    "x = {a: 1}",
    "tab\t\tseparated\tthe\twords",
]


@pytest.mark.parametrize("s", PARITY_STRINGS)
def test_normalize_matches_official_squad_when_nfd_changes_nothing(s):
    assert unicodedata.normalize("NFD", s) == s
    assert normalize_answer(s) == _squad_reference(s)


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("U.S.", "us"),  # punctuation inside words is dropped, joining the letters
        ("The Beatles", "beatles"),  # article at the start
        ("Sgt. Pepper and the Lonely", "sgt pepper and lonely"),  # in the middle
        ("Beatles, The", "beatles"),  # at the end (comma removed first, then the article)
        ("theater", "theater"),  # 'the' inside a word stays
        ("Anathema", "anathema"),
        ("the-end", "theend"),  # hyphen removed before articles, so 'the' is no longer a word
        ("a - team", "team"),
        ("New   York\tCity\n\nUSA", "new york city usa"),
        ("", ""),
        ("   \t\n", ""),
        ("the a an", ""),
    ],
)
def test_normalize_edge_cases(raw, expected):
    assert normalize_answer(raw) == expected


def test_nfd_accents_are_not_stripped():
    # NFD decomposes "é" into "e" + U+0301 (COMBINING ACUTE ACCENT). The combining mark is not in
    # string.punctuation (which is ASCII only), so it survives: "café" and "cafe" do NOT match under NFD + SQuAD.
    assert normalize_answer("café") == "cafe\u0301"
    assert normalize_answer("Café") == normalize_answer("cafe\u0301")  # composed and decomposed forms agree
    assert normalize_answer("café") != normalize_answer("cafe")
    assert not exact_match("cafe", ["café"])
    assert exact_match("CAFÉ", ["cafe\u0301"])


def test_curly_quotes_and_dashes_stay():
    # Only ASCII punctuation is removed; typographic quotes and dashes are not in string.punctuation.
    assert normalize_answer("\u201cHello\u201d") == "\u201chello\u201d"
    assert normalize_answer("it\u2019s") == "it\u2019s"
    assert normalize_answer("1990\u20131995") == "1990\u20131995"
    assert not exact_match("\u201chello\u201d", ["hello"])
    assert exact_match('"hello"', ["hello"])


def test_exact_match_max_over_references():
    assert exact_match("The Beatles!", ["Rolling Stones", "beatles"])
    assert not exact_match("Beatles", ["Rolling Stones"])
    assert not exact_match("anything", [])
    assert exact_match("", [""])


def test_regex_match_is_anchored_at_start_and_case_insensitive():
    assert regex_match("Paris", ["paris"])
    assert regex_match("PARIS, France", ["paris"])  # anchored at the start only
    assert not regex_match("in Paris", ["paris"])  # match in the middle does not count for EM
    assert has_answer("in Paris", ["paris"], regex=True)  # ... but does for has_answer's re.search
    assert regex_match("1984", [r"19[0-9]{2}"])
    assert regex_match("foo\nbar", ["^bar"]) is False  # re.match anchors at position 0 even with MULTILINE
    assert has_answer("foo\nbar", ["^bar"], regex=True)  # re.search with MULTILINE: ^ matches after a newline
    assert regex_match("x", ["nope", "X"])
    assert not regex_match("x", [])


def test_invalid_regex_raises_naming_the_pattern():
    with pytest.raises(ValueError, match=re.escape("'(unclosed'")):
        regex_match("anything", ["(unclosed"])
    with pytest.raises(ValueError, match="unclosed"):
        has_answer("anything", ["(unclosed"], regex=True)


def test_simple_tokenizer():
    assert simple_tokenize("President Barack Obama, said: 'hi'!") == [
        "president", "barack", "obama", ",", "said", ":", "'", "hi", "'", "!",
    ]  # fmt: skip
    assert simple_tokenize("U.S.") == ["u", ".", "s", "."]
    assert simple_tokenize("a_b") == ["a", "_", "b"]
    assert simple_tokenize("tab\tnew\nline\u00a0nbsp") == ["tab", "new", "line", "nbsp"]
    # Combining marks belong to the word (\p{M}), unlike Python's \w
    assert simple_tokenize(unicodedata.normalize("NFD", "Café au lait")) == ["cafe\u0301", "au", "lait"]
    assert simple_tokenize("Abc", uncased=False) == ["Abc"]
    assert simple_tokenize("") == []


def test_has_answer_token_sequence_semantics():
    assert has_answer("President Barack Obama said", ["Barack Obama"])
    assert has_answer("president barack obama said", ["BARACK OBAMA"])
    assert not has_answer("barackobama", ["Barack Obama"])
    assert not has_answer("Barack Hussein Obama", ["Barack Obama"])  # must be contiguous
    assert not has_answer("barack was here", ["bar"])  # no match inside a token
    assert has_answer("born in the U.S. in 1961", ["U.S."])
    assert has_answer("Obama (born 1961)", ["1961"])
    assert has_answer("x", ["nope", "x"])
    assert not has_answer("anything", [])
    assert not has_answer("anything", ["", "  "])  # an answer with no tokens never matches
    # NFD on both sides: composed and decomposed accents agree, but the accent is part of the token.
    assert has_answer("le caf\u00e9 est", ["cafe\u0301"])
    assert not has_answer("le café est", ["cafe"])


def test_top_k_accuracy():
    matrix = [
        [True, False, False],
        [False, False, True],
        [False, False, False],
        [False, True],
    ]
    acc = top_k_accuracy(matrix, ks=(1, 2, 3, 100))
    assert acc == {1: 0.25, 2: 0.5, 3: 0.75, 100: 0.75}
    assert top_k_accuracy([], ks=(1, 5)) == {1: 0.0, 5: 0.0}
    assert set(top_k_accuracy(matrix)) == {1, 5, 20, 100}
    with pytest.raises(ValueError):
        top_k_accuracy(matrix, ks=(0,))


def test_reader_oracle():
    blocks = [
        ["nothing here", "The Beatles were a band from Liverpool."],
        ["Paris is the capital of France"],
        ["the answer is hidden in barackobama"],
    ]
    answers = [["Liverpool"], ["capital of France"], ["Barack Obama"]]
    assert reader_oracle(blocks, answers, k=2) == pytest.approx(2 / 3)
    assert reader_oracle(blocks, answers, k=1) == pytest.approx(1 / 3)  # Liverpool is in the 2nd block
    assert reader_oracle(blocks, answers, k=2, max_span_words=2) == pytest.approx(1 / 3)  # 3-word answer too long
    assert reader_oracle([["it was in 1984 or so"]], [["19[0-9]{2}"]], regex_flags=[True]) == 1.0
    assert reader_oracle([], []) == 0.0
    with pytest.raises(ValueError):
        reader_oracle(blocks, answers[:2])


def test_aggregate():
    out = aggregate(
        ["The Beatles", "in Paris", "Paris", "1984"],
        [["beatles"], ["paris"], ["paris"], [r"19\d\d"]],
        [False, True, True, True],
    )
    assert out == {"exact_match": 0.75, "num": 4}
    assert aggregate([], [], []) == {"exact_match": 0.0, "num": 0}
    with pytest.raises(ValueError):
        aggregate(["a"], [["a"]], [])


def test_shards_of_the_questions_are_contiguous_cover_every_row_once_and_differ_by_at_most_one():
    from realm.qa.qa_eval import shard_rows

    for n, world in [(33, 2), (7, 3), (2, 4), (0, 2), (100, 8)]:
        shards = [shard_rows(n, r, world) for r in range(world)]
        assert [row for shard in shards for row in shard] == list(range(n))
        assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_qa_metrics_over_records():
    from realm.qa.qa_eval import qa_metrics

    records = [
        {"correct": True, "has_answer": [False, True], "span_in_read_blocks": True},
        {"correct": False, "has_answer": [False, False], "span_in_read_blocks": False},
        {"correct": False, "has_answer": [True, False], "span_in_read_blocks": True},
        {"correct": False, "has_answer": [], "span_in_read_blocks": False},
    ]
    metrics = qa_metrics(records, top_k=(1, 2))
    assert metrics == {
        "exact_match": 0.25,
        "num_questions": 4,
        "top1_accuracy": 0.25,
        "top2_accuracy": 0.5,
        "correct_span_in_read_blocks": 0.5,
    }
