"""kNN-LM in ``generate``: for GPT-2, Llama-style and GPT-NeoX (parallel residual) tiny random models the hook reads
the key it names, each step's mixture equals a brute-force dense computation, lambda = 0 is plain generation, the KV
cache changes nothing, a datastore pointing at one token steers greedy decoding to it, and no vocabulary-wide kNN
tensor is ever built."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    LogitsProcessor,
    LogitsProcessorList,
)

from realm.core.errors import ConfigError, RunError
from realm.index.mips import FaissIndex, IndexConfig
from realm.knnlm import knn
from realm.knnlm.datastore import Datastore, model_fingerprint
from realm.knnlm.generation import KNNGenerationConfig, KNNLogitsProcessor, mix_sparse
from realm.knnlm.lm import KeyReader

VOCAB, WIDTH = 64, 32
COMMON = dict(vocab_size=VOCAB, bos_token_id=0, eos_token_id=None, initializer_range=0.2)  # peaked: no greedy ties
ARCHS = {
    "gpt2": lambda: GPT2LMHeadModel(GPT2Config(n_embd=WIDTH, n_layer=2, n_head=2, n_positions=64, **COMMON)),
    "llama": lambda: LlamaForCausalLM(
        LlamaConfig(hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                    num_key_value_heads=1, max_position_embeddings=64, **COMMON)  # fmt: skip
    ),
    "neox": lambda: GPTNeoXForCausalLM(
        GPTNeoXConfig(hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      max_position_embeddings=64, use_parallel_residual=True, **COMMON)  # fmt: skip
    ),
}
# (last block, its attention, feed-forward and the LayerNorm before it, the final norm), read off the HF classes
PARTS = {
    "gpt2": lambda m: (m.transformer.h[-1].attn, m.transformer.h[-1].ln_2, m.transformer.h[-1].mlp, m.transformer.ln_f),
    "llama": lambda m: (m.model.layers[-1].self_attn, m.model.layers[-1].post_attention_layernorm,
                        m.model.layers[-1].mlp, m.model.norm),  # fmt: skip
    "neox": lambda m: (m.gpt_neox.layers[-1].attention, m.gpt_neox.layers[-1].post_attention_layernorm,
                       m.gpt_neox.layers[-1].mlp, m.gpt_neox.final_layer_norm),  # fmt: skip
}
PROMPTS = torch.tensor([[3, 17, 42, 8, 25], [11, 5, 60, 33, 2]])


def _model(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return ARCHS[arch]().eval()


def _store(model, values: np.ndarray | None = None, metric: str = "l2", key_type: str = "ffn_input") -> Datastore:
    """An in-memory exact datastore over the model's own keys of 4 random 16-token documents (60 entries), as
    ``realm knnlm build`` makes one: key of position t, value the token at t + 1."""
    docs = torch.randint(0, VOCAB, (4, 16), generator=torch.Generator().manual_seed(1))
    reader = KeyReader(model, key_type)
    with torch.no_grad():
        model(input_ids=docs)
    reader.close()
    keys = reader.value[:, :-1].reshape(-1, WIDTH).float().numpy()
    values = docs[:, 1:].reshape(-1).numpy().astype(np.int32) if values is None else values
    index = FaissIndex.build(keys, IndexConfig(metric=metric, factory="Flat"))
    manifest = {"metric": metric, "key_type": key_type, "lm_sha256": model_fingerprint(model)}
    return Datastore(None, manifest, index, keys.astype(np.float16), values)


class _Recorder(LogitsProcessor):
    """Keeps what the processor before it returned at each step."""

    def __init__(self) -> None:
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids, scores):
        self.steps.append(scores.clone())
        return scores


def _generate(model, processor=None, use_cache=True, steps=6, recorder=None):
    chain = [p for p in (processor, recorder) if p is not None]
    out = model.generate(PROMPTS, max_new_tokens=steps, do_sample=False, use_cache=use_cache, pad_token_id=0,
                         logits_processor=LogitsProcessorList(chain))  # fmt: skip
    return out[:, -steps:]  # the new tokens (no EOS: every row runs all steps)


def _brute_force(model, store: Datastore, prefix: torch.Tensor, k: int, tau: float, lam: float) -> torch.Tensor:
    """[B, V] float64 mixture: a forward on the whole prefix (no cache), every datastore entry scored by enumeration,
    p_kNN summed neighbour by neighbour into a dense row, mixed in probability space."""
    reader = KeyReader(model, store.manifest["key_type"])
    with torch.no_grad():
        logits = model(input_ids=prefix, use_cache=False).logits[:, -1].double()
    reader.close()
    query = reader.value[:, -1].double()
    keys = torch.from_numpy(store.index.index.reconstruct_n(0, store.num_entries)).double()  # the indexed keys
    every = -((query[:, None] - keys[None]) ** 2).sum(-1) if store.metric == "l2" else query @ keys.T
    top = every.topk(min(k, store.num_entries), dim=1)
    p_knn = torch.zeros(len(prefix), VOCAB, dtype=torch.float64)
    for row in range(len(prefix)):
        weights = torch.softmax(top.values[row] / tau, 0)
        for weight, entry in zip(weights, top.indices[row]):
            p_knn[row, int(store.values[entry])] += weight
    return ((1 - lam) * torch.softmax(logits, -1) + lam * p_knn).log()


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_each_key_type_is_the_tensor_it_names_in_every_layout(arch):
    # the block's own arithmetic ties the three hooks together: GPT-2 and Llama feed the feed-forward the LayerNorm of
    # input + attention, GPT-NeoX's parallel residual the LayerNorm of the input alone; the block sums all three
    model = _model(arch)
    attn, ln, mlp, final_norm = PARTS[arch](model)
    keys = {}
    for key_type in ("attn_output", "ffn_input", "ffn_output"):
        reader = KeyReader(model, key_type)
        with torch.no_grad():
            out = model(input_ids=PROMPTS, output_hidden_states=True)
        reader.close()
        keys[key_type] = reader.value
    h_in = out.hidden_states[-2]  # the input of the last block
    with torch.no_grad():
        ffn_in = ln(h_in) if arch == "neox" else ln(h_in + keys["attn_output"])
        torch.testing.assert_close(keys["ffn_input"], ffn_in, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(keys["ffn_output"], mlp(ffn_in), atol=1e-5, rtol=1e-5)
        block_out = h_in + keys["attn_output"] + keys["ffn_output"]
        torch.testing.assert_close(final_norm(block_out), out.hidden_states[-1], atol=1e-5, rtol=1e-5)
    assert attn is not None and keys["attn_output"].shape == (*PROMPTS.shape, WIDTH)


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("metric,k,tau,lam", [("l2", 8, 1.0, 0.4), ("ip", 5, 3.0, 0.75), ("l2", 1000, 10.0, 0.25)])
def test_every_step_equals_a_brute_force_dense_mixture(arch, metric, k, tau, lam):
    model = _model(arch)
    store = _store(model, metric=metric)
    recorder = _Recorder()
    with KNNLogitsProcessor(model, store, KNNGenerationConfig(k=k, lambda_=lam, tau=tau)) as processor:
        tokens = _generate(model, processor, use_cache=True, steps=4, recorder=recorder)
    for step, got in enumerate(recorder.steps):
        prefix = torch.cat([PROMPTS, tokens[:, :step]], 1)
        expected = _brute_force(model, store, prefix, k, tau, lam)
        torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=1e-5)
        assert torch.allclose(got.double().exp().sum(1), torch.ones(2, dtype=torch.float64), atol=1e-5)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_lambda_zero_is_plain_generation(arch):
    model = _model(arch)
    plain_recorder, knn_recorder = _Recorder(), _Recorder()
    plain = _generate(model, recorder=plain_recorder)
    with KNNLogitsProcessor(model, _store(model), KNNGenerationConfig(k=8, lambda_=0.0)) as processor:
        tokens = _generate(model, processor, recorder=knn_recorder)
    assert torch.equal(tokens, plain)
    for raw, mixed in zip(plain_recorder.steps, knn_recorder.steps):
        assert torch.equal(mixed, torch.log_softmax(raw, -1))  # exactly the LM's distribution, not merely close


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_the_kv_cache_changes_nothing(arch):
    model = _model(arch)
    with KNNLogitsProcessor(model, _store(model), KNNGenerationConfig(k=8, lambda_=0.5, tau=5.0)) as processor:
        cached, cached_steps = _Recorder(), _Recorder()
        with_cache = _generate(model, processor, use_cache=True, steps=8, recorder=cached)
        without_cache = _generate(model, processor, use_cache=False, steps=8, recorder=cached_steps)
    assert torch.equal(with_cache, without_cache)
    for a, b in zip(cached.steps, cached_steps.steps):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_a_left_padded_row_generates_as_it_would_alone(arch):
    # the key is the last position of each row, which left padding keeps real; beam search runs through it too.
    # k covers the whole datastore: padding moves keys by ~1e-6, enough to swap two near-tied neighbours at a k cut
    model = _model(arch)
    ids, mask = torch.tensor([[3, 17, 42, 8, 25], [0, 0, 60, 33, 2]]), torch.tensor([[1] * 5, [0, 0, 1, 1, 1]])
    with KNNLogitsProcessor(model, _store(model), KNNGenerationConfig(k=1000, lambda_=0.5, tau=5.0)) as processor:
        batched, alone = _Recorder(), _Recorder()
        chain = LogitsProcessorList([processor, batched])
        together = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0,
                                  logits_processor=chain)  # fmt: skip
        single = model.generate(ids[1:, 2:], max_new_tokens=4, do_sample=False, pad_token_id=0,
                                logits_processor=LogitsProcessorList([processor, alone]))  # fmt: skip
        beams = model.generate(ids, attention_mask=mask, max_new_tokens=3, num_beams=3, do_sample=False,
                               pad_token_id=0, logits_processor=LogitsProcessorList([processor]))  # fmt: skip
    assert torch.equal(together[1, 5:], single[0, 3:]) and beams.shape == (2, 8)
    for a, b in zip(batched.steps, alone.steps):
        torch.testing.assert_close(a[1], b[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_a_datastore_of_one_token_steers_greedy_decoding_to_it(arch):
    model = _model(arch)
    plain = _generate(model)
    target = next(t for t in range(VOCAB) if not (plain == t).any())  # a token the LM alone never picks
    store = _store(model, values=np.full(60, target, dtype=np.int32))
    with KNNLogitsProcessor(model, store, KNNGenerationConfig(k=4, lambda_=0.99)) as processor:
        tokens = _generate(model, processor)
    assert (tokens == target).all()


def test_the_sparse_knn_part_equals_the_dense_distribution_at_its_ids():
    # ties, duplicate tokens, an unfilled slot (-inf, value 0) and a query with no neighbour at all
    scores = torch.tensor([[-0.5, -0.5, -2.0, -math.inf], [-1.0, -300.0, -1.5, -1.0], [-math.inf] * 4])
    values = torch.tensor([[3, 3, 1, 0], [7, 2, 7, 2], [0, 0, 0, 0]])
    ids, log_probs = knn.knn_neighbour_log_probs(scores, values, tau=2.0)
    assert ids.shape == log_probs.shape == (3, 4)
    dense = knn.knn_log_probs(scores, values, VOCAB, tau=2.0)
    torch.testing.assert_close(log_probs, dense.gather(1, ids), atol=1e-6, rtol=1e-6)
    assert torch.isneginf(log_probs[2]).all() and torch.isneginf(log_probs[0, 3])


def test_mix_sparse_equals_the_dense_mixture():
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(0))
    scores = torch.randn(3, 6, generator=torch.Generator().manual_seed(1))
    values = torch.tensor([[1, 1, 5, 9, 9, 9], [0, 63, 2, 3, 4, 5], [7, 7, 7, 7, 7, 7]])
    for lam in (0.0, 0.3, 1.0):
        ids, knn_log = knn.knn_neighbour_log_probs(scores, values)
        dense = knn.interpolate(torch.log_softmax(logits, -1), knn.knn_log_probs(scores, values, VOCAB), lam)
        torch.testing.assert_close(mix_sparse(logits, ids, knn_log, lam), dense, atol=1e-6, rtol=1e-6)


class _VocabWideTensors(TorchFunctionMode):
    """Records every [B, V] tensor a call makes that does not derive from the LM's scores: a dense kNN tensor would
    have to start as one (a ``full``/``zeros``/``*_like`` buffer to scatter p_kNN into)."""

    def __init__(self, scores: torch.Tensor) -> None:
        super().__init__()
        self.derived = [scores]  # note: a list, not ids, so freed tensors cannot alias a tracked id
        self.fresh: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        shape = tuple(self.derived[0].shape)
        if isinstance(out, torch.Tensor) and tuple(out.shape) == shape:
            inputs = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
            name = getattr(func, "__name__", str(func))
            factory = name.endswith("_like") or name.startswith(("new_", "full", "zeros", "ones", "empty"))
            if factory or not any(a is d for a in inputs for d in self.derived):
                self.fresh.append(name)
            else:
                self.derived.append(out)
        return out


def test_no_vocabulary_wide_knn_tensor_is_built(monkeypatch):
    model = _model("gpt2")
    processor = KNNLogitsProcessor(model, _store(model), KNNGenerationConfig(k=8, lambda_=0.5))
    monkeypatch.setattr(knn, "knn_log_probs", lambda *a, **kw: pytest.fail("the dense p_kNN was computed"))
    with torch.no_grad():
        logits = model(input_ids=PROMPTS).logits[:, -1]
    ids, log_probs = processor.neighbours(processor.reader.value[:, -1])
    assert ids.shape == log_probs.shape == (2, 8)  # the kNN part is [batch, k]
    spy = _VocabWideTensors(logits)
    with spy:
        mixed = processor(PROMPTS, logits)
    processor.close()
    assert spy.fresh == [] and len(spy.derived) > 1 and mixed.shape == (2, VOCAB)


def test_misuse_is_refused_with_a_clear_error():
    model = _model("gpt2")
    store = _store(model)
    with pytest.raises(ConfigError, match="built with metric 'l2'"):
        KNNLogitsProcessor(model, store, KNNGenerationConfig(metric="ip"))
    with pytest.raises(ConfigError, match="other LM weights"):
        KNNLogitsProcessor(_model("llama"), store, KNNGenerationConfig())
    with pytest.raises(ValueError, match="lambda_"):
        KNNGenerationConfig(lambda_=1.5)
    with KNNLogitsProcessor(model, store, KNNGenerationConfig(k=4)) as processor:
        with pytest.raises(RunError, match="no key captured"):
            processor(PROMPTS, torch.zeros(2, VOCAB))  # no forward ran: there is no key to search with
