"""The span reader, candidate and correct spans, best-span prediction and the QA model's gradients."""

from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertTokenizer

from realm.data.packing import SpecialIds, pack_pair, pad
from realm.data.vocab import load_tokenizer
from realm.models.reader import SpanReader, reader_config
from realm.models.retriever import Embedder, RetrieverConfig, embedder_config
from realm.qa.batch import QABatch, RetrievedBlocks
from realm.qa.model import OpenQAModel, best_spans
from realm.qa.spans import Wordpieces, candidate_span_mask, correct_span_mask

WORDS = ["when", "was", "born", "on", "11", "february", "1900", "dre", "##isten", "gret", "##oul", "in", "paris", ","]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> BertTokenizer:
    folder = tmp_path_factory.mktemp("vocab")
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    BertTokenizer(vocab={p: i for i, p in enumerate(pieces)}).save_pretrained(folder / "tokenizer")
    tokenizer = load_tokenizer(folder / "tokenizer")
    assert len(tokenizer) == len(pieces)
    return tokenizer


def _bert_config(tokenizer) -> BertConfig:
    return BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def _inputs(tokenizer, question: str, body: str, length: int = 40):
    q = tokenizer(question, add_special_tokens=False)["input_ids"]
    b = tokenizer(body, add_special_tokens=False)["input_ids"]
    ids, types = pack_pair(q, b, SpecialIds.of(tokenizer), length)
    return torch.tensor([ids]), torch.tensor([types]), len(q) + 2  # body starts after [CLS] q [SEP]


def test_candidate_spans_are_whole_words_inside_the_body(tokenizer) -> None:
    ids, types, b0 = _inputs(tokenizer, "when was dreisten born", "dreisten gretoul was born on 11 february 1900")
    words = Wordpieces(tokenizer)
    mask = candidate_span_mask(ids, types, words, max_span_width=3)[0]
    body = tokenizer.convert_ids_to_tokens(ids[0].tolist())[b0:-1]
    assert body[:4] == ["dre", "##isten", "gret", "##oul"]
    allowed = {(int(i) - b0, int(w)) for i, w in mask.nonzero()}
    assert (0, 1) in allowed  # "dreisten"
    assert (0, 3) not in allowed  # wider than 3 wordpieces
    assert (0, 0) not in allowed and (1, 0) not in allowed  # "dre" is cut mid-word, "##isten" starts mid-word
    assert (0, 2) not in allowed  # "dreisten gret" ends mid-word
    assert all(0 <= i and i + w < len(body) for i, w in allowed)  # never in the question or on the final [SEP]
    for i, w in allowed:
        assert not body[i].startswith("##") and (i + w + 1 == len(body) or not body[i + w + 1].startswith("##"))


def test_correct_spans_for_text_and_regex_answers(tokenizer) -> None:
    ids, types, b0 = _inputs(tokenizer, "when was dreisten born", "dreisten was born on 11 february 1900 in paris")
    words = Wordpieces(tokenizer)
    text_answer = [tokenizer("11 february 1900", add_special_tokens=False)["input_ids"]]
    got = correct_span_mask(ids, types, [text_answer], [False], words, 10)[0]
    position = ids[0].tolist().index(tokenizer.convert_tokens_to_ids("11"))
    assert {(int(i), int(w)) for i, w in got.nonzero()} == {(position, 2)}

    regex = correct_span_mask(ids, types, [[r"1[0-9]{3}", "Dreisten", "dre", "paris|nowhere"]], [True], words, 10)[0]
    found = {(int(i) - b0, int(w)) for i, w in regex.nonzero()}
    # "1900"; "Dreisten" (IGNORECASE, across two wordpieces); "dre" ends mid-word, so it is not a span; "paris"
    body = tokenizer.convert_ids_to_tokens(ids[0].tolist())[b0:-1]
    assert found == {(body.index("1900"), 0), (0, 1), (body.index("paris"), 0)}


def test_body_text_offsets_point_at_each_piece(tokenizer) -> None:
    words = Wordpieces(tokenizer)
    ids = tokenizer("dreisten was born, 1900", add_special_tokens=False)["input_ids"]
    text, starts, ends = words.body_text(ids)
    assert text == "dreisten was born , 1900"
    assert [text[s:e] for s, e in zip(starts, ends)] == ["dre", "isten", "was", "born", ",", "1900"]


def test_span_scores_equal_the_mlp_on_concatenated_endpoints(tokenizer) -> None:
    torch.manual_seed(0)
    reader = SpanReader(reader_config(_bert_config(tokenizer), 16)).eval()
    ids, types, _ = _inputs(tokenizer, "when was dreisten born", "dreisten was born on 11 february 1900")
    mask = torch.ones_like(ids)
    width = 4
    with torch.no_grad():
        scores = reader(ids, mask, types, width)[0]
        hidden = reader.bert(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state[0]
        first = torch.nn.Linear(2 * hidden.shape[1], 16)
        first.weight.copy_(torch.cat([reader.start_projection.weight, reader.end_projection.weight], dim=1))
        first.bias.copy_(reader.start_projection.bias)
        length = ids.shape[1]
        for i in range(length):
            for w in range(width):
                if i + w < length:
                    span = torch.cat([hidden[i], hidden[i + w]])
                    want = reader.span_output(reader.span_norm(torch.relu(first(span))))
                    assert scores[i, w].item() == pytest.approx(want.item(), abs=1e-5)


def test_reader_starts_from_a_masked_lm_and_round_trips(tokenizer, tmp_path: Path) -> None:
    mlm = BertForMaskedLM(_bert_config(tokenizer))
    mlm.save_pretrained(tmp_path / "mlm")
    reader = SpanReader.from_pretrained(tmp_path / "mlm", config=reader_config(mlm.config, 16))
    for name, value in mlm.bert.state_dict().items():
        if name in reader.bert.state_dict():
            assert torch.equal(reader.bert.state_dict()[name], value), name
    reader.save_pretrained(tmp_path / "reader")
    again = SpanReader.from_pretrained(tmp_path / "reader")
    assert again.config.span_hidden_size == 16
    for name, value in reader.state_dict().items():
        assert torch.equal(again.state_dict()[name], value), name


def test_best_spans_is_the_masked_argmax() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 2, 5, 3, generator=g)
    valid = torch.rand(3, 2, 5, 3, generator=g) < 0.5
    valid[2] = False
    got = best_spans(logits, valid)
    assert got[2] is None
    for b in range(2):
        best = max(
            (
                (logits[b, k, i, w].item(), k, i, w)
                for k in range(2)
                for i in range(5)
                for w in range(3)
                if valid[b, k, i, w]
            ),
        )
        assert (got[b].score, got[b].slot, got[b].start, got[b].end) == pytest.approx(
            (best[0], best[1], best[2], best[2] + best[3])
        )


def test_gradients_reach_query_tower_and_reader_not_the_frozen_documents(tokenizer) -> None:
    torch.manual_seed(1)
    config = _bert_config(tokenizer)
    embedder = Embedder(embedder_config(config, RetrieverConfig(embed_dim=8)))
    model = OpenQAModel(embedder, SpanReader(reader_config(config, 16)), 4)
    special = SpecialIds.of(tokenizer)
    question = tokenizer("when was dreisten born", add_special_tokens=False)["input_ids"]
    query_ids, query_mask = pad([[special.cls, *question, special.sep]] * 2, special.pad)
    body = tokenizer("dreisten was born on 11 february 1900", add_special_tokens=False)["input_ids"]
    packed = [pack_pair(question, body, special, 30) for _ in range(4)]
    reader_ids, reader_mask = pad([p[0] for p in packed], special.pad)
    reader_types, _ = pad([p[1] for p in packed], 0, reader_ids.shape[1])
    words = Wordpieces(tokenizer)
    answer = [tokenizer("1900", add_special_tokens=False)["input_ids"]]
    valid = candidate_span_mask(reader_ids, reader_types, words, 4)
    correct = correct_span_mask(reader_ids, reader_types, [answer] * 4, [False] * 4, words, 4)
    docs = torch.randn(2, 3, 8, requires_grad=True)
    batch = QABatch(query_ids, query_mask, torch.arange(2))
    batch.blocks = RetrievedBlocks(
        block_ids=torch.tensor([[0, 1, 2], [2, 1, 0]]),
        block_valid=torch.ones(2, 3, dtype=torch.bool),
        doc_embeddings=docs,
        has_answer=torch.tensor([[True, False, False], [False, False, False]]),
        reader_input_ids=reader_ids.view(2, 2, -1),
        reader_attention_mask=reader_mask.view(2, 2, -1),
        reader_token_type_ids=reader_types.view(2, 2, -1),
        span_valid=valid.view(2, 2, *valid.shape[1:]),
        span_correct=correct.view(2, 2, *correct.shape[1:]),
    )
    out = model(batch)
    loss = out.loss(batch)
    assert loss.retriever_loss > 0 and loss.reader_loss > 0
    loss.loss.backward()
    assert model.query_embedder.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert model.reader.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert model.reader.span_output.weight.grad.abs().sum() > 0
    # the documents are an input, not a parameter: the optimizer never sees them
    assert all(p is not docs for p in model.parameters())
