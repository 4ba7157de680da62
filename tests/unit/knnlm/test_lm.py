"""The LM side of kNN-LM: windows score every token once, with lambda = 0 the perplexity is the plain LM's, each key
type is the tensor it names, and bad inputs get a clear error."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from realm.core.errors import ConfigError, InputError, MissingFileError
from realm.knnlm import perplexity as ev
from realm.knnlm.lm import KeyReader, LMConfig, load_causal_lm, score_documents, tokenize_documents, windows


@pytest.mark.parametrize("length,context,stride", [(2, 4, 2), (10, 4, 1), (37, 8, 5), (64, 32, 16), (9, 9, 8)])
def test_windows_score_every_token_once_with_enough_context(length, context, stride):
    scored = []
    for start, end, first in windows(length, context, stride):
        assert end - start <= context
        assert first > start  # every target has its previous position in the window
        assert first == 1 or first - start >= context - stride  # later windows carry context - stride tokens
        scored.extend(range(first, end))
    assert scored == list(range(1, length))


def test_lambda_zero_gives_the_plain_lms_perplexity(tiny_lm):
    lm, _, heldout = tiny_lm
    cfg = LMConfig(model=str(lm), context_length=32, stride=16)
    model, tokenizer = load_causal_lm(cfg)
    text = "the museum of the city was founded long ago and is still open"
    docs = tokenize_documents(tokenizer, [text])
    assert len(docs[0]) <= 32  # one window: the plain LM's loss over the same tokens is the reference
    neighbours = ev.collect(model, docs, cfg, None, ev.KNNConfig())
    result = ev.score(neighbours, k=1, tau=1.0, lam=0.0)
    ids = torch.from_numpy(docs[0].astype(np.int64))[None]
    with torch.no_grad():
        plain = model(input_ids=ids, labels=ids).loss.item()
    assert math.isclose(result["ppl_knnlm"], math.exp(plain), rel_tol=1e-5)
    assert result["ppl_knnlm"] == result["ppl_lm"]


def test_a_long_text_is_scored_in_windows_like_a_short_one(tiny_lm):
    lm, _, _ = tiny_lm
    cfg = LMConfig(model=str(lm), context_length=32, stride=31)
    model, tokenizer = load_causal_lm(cfg)
    docs = tokenize_documents(tokenizer, ["one two three four five six seven eight nine ten " * 12])
    assert len(docs[0]) > 100
    scored = list(score_documents(model, docs, cfg))
    positions = torch.cat([s.positions for s in scored])
    assert positions.tolist() == list(range(1, len(docs[0])))


def test_each_key_type_is_the_tensor_it_names(tiny_lm):
    lm, _, _ = tiny_lm
    model, _ = load_causal_lm(LMConfig(model=str(lm), context_length=32, stride=16))
    ids = torch.tensor([[2, 10, 11, 12, 13]])
    block = model.transformer.h[-1]
    with torch.no_grad():
        h_in = model(input_ids=ids, output_hidden_states=True).hidden_states[-2]  # input of the last block
        attn = block.attn(block.ln_1(h_in))[0]
        ffn_in = block.ln_2(h_in + attn)
        expected = {"attn_output": attn, "ffn_input": ffn_in, "ffn_output": block.mlp(ffn_in)}
        for key_type, tensor in expected.items():
            reader = KeyReader(model, key_type)
            model(input_ids=ids)
            reader.close()
            torch.testing.assert_close(reader.value, tensor, atol=1e-5, rtol=1e-5)


def test_bad_inputs_get_a_clear_error(tiny_lm, tmp_path):
    lm, _, _ = tiny_lm
    model, _ = load_causal_lm(LMConfig(model=str(lm), context_length=32, stride=16))
    with pytest.raises(ConfigError, match="unknown key type 'ffn_middle'"):
        KeyReader(model, "ffn_middle")
    with pytest.raises(ConfigError, match="longer than the model's 32 positions"):
        load_causal_lm(LMConfig(model=str(lm), context_length=64, stride=32))
    with pytest.raises(MissingFileError, match="not found"):
        load_causal_lm(LMConfig(model=str(tmp_path / "nothing")))
    with pytest.raises(InputError, match="could not load a causal LM"):
        load_causal_lm(LMConfig(model=str(tmp_path)))
    with pytest.raises(ValueError, match="stride"):
        LMConfig(context_length=8, stride=8)
    with pytest.raises(ConfigError, match="no token to score"):
        ev.collect(model, [np.array([2], dtype=np.int32)], LMConfig(model=str(lm), context_length=32, stride=16), None,
                   ev.KNNConfig())  # fmt: skip
