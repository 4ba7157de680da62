"""The token datastore: one entry per token with the right value, search parity with exact enumeration, exact
re-scoring of approximate neighbours, nothing published by a stopped build, corrupt or foreign datastores refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from realm.core.errors import ConfigError, InputError, RunError
from realm.data.corpus import CorpusConfig
from realm.index.embedding import BuildCancelled
from realm.index.mips import IndexConfig
from realm.knnlm import perplexity as ev
from realm.knnlm.datastore import DatastoreConfig, current_version, load_datastore
from realm.knnlm.datastore_build import build_datastore, read_texts
from realm.knnlm.learned import LearnedConfig, learned_log_probs, train_learned
from realm.knnlm.lm import LMConfig, load_causal_lm, score_documents, tokenize_documents
from realm.run import publication

LM_CFG = dict(context_length=32, stride=16, batch_size=8)


@pytest.fixture(scope="module")
def built(tiny_lm, tmp_path_factory):
    """(LM config, corpus config, datastore root) of an exact L2 datastore over the training corpus."""
    lm, train, _ = tiny_lm
    lm_cfg, corpus = LMConfig(model=str(lm), **LM_CFG), CorpusConfig(path=str(train))
    root = tmp_path_factory.mktemp("ds")
    build_datastore(root, lm_cfg, corpus, DatastoreConfig())
    return lm_cfg, corpus, root


def test_one_entry_per_token_keyed_by_the_hidden_state_it_was_predicted_from(built):
    lm_cfg, corpus, root = built
    store = load_datastore(root)
    model, tokenizer = load_causal_lm(lm_cfg)
    docs = tokenize_documents(tokenizer, read_texts(corpus))
    assert store.num_entries == sum(len(d) - 1 for d in docs)
    assert np.array_equal(store.values, np.concatenate([d[1:] for d in docs]))
    keys = torch.cat([s.keys for s in score_documents(model, docs, lm_cfg)])
    np.testing.assert_allclose(np.asarray(store.keys, dtype=np.float32), keys.half().float().numpy(), atol=1e-3)
    assert store.keys.dtype == np.float16 and store.manifest["metric"] == "l2" and store.manifest["factory"] == "Flat"


def test_exact_search_equals_enumerating_every_entry(built):
    _, _, root = built
    store = load_datastore(root)
    keys = torch.from_numpy(np.asarray(store.keys, dtype=np.float32))
    queries = keys[:7] + 0.01 * torch.randn(7, keys.shape[1], generator=torch.Generator().manual_seed(0))
    scores, values, ids = store.search(queries, k=20)
    every = -((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)  # [7, N]: every entry's score
    expected = every.topk(20, dim=1).values
    torch.testing.assert_close(scores, expected, atol=1e-3, rtol=1e-4)
    assert torch.equal(values, torch.from_numpy(store.values.astype(np.int64))[ids])


def test_approximate_neighbours_are_rescored_exactly_from_the_stored_keys(built, tmp_path):
    lm_cfg, corpus, _ = built
    cfg = DatastoreConfig(index=IndexConfig(metric="l2", factory="IVF8,PQ4", nprobe=2, train_sample=4096))
    build_datastore(tmp_path, lm_cfg, corpus, cfg)
    store = load_datastore(tmp_path, IndexConfig(nprobe=2))
    keys = torch.from_numpy(np.asarray(store.keys, dtype=np.float32))
    approx, _, ids = store.search(keys[:5], k=10)
    exact, _, exact_ids = store.search(keys[:5], k=10, recompute=True)
    assert torch.equal(ids, exact_ids)
    valid = ids >= 0
    truth = -((keys[ids.clamp(min=0)] - keys[:5, None, :]) ** 2).sum(-1)
    torch.testing.assert_close(exact[valid], truth[valid], atol=1e-3, rtol=1e-4)
    assert not torch.allclose(approx[valid], truth[valid], atol=1e-3)  # PQ scores are approximate
    # the index's own scores of any ids: the search's PQ scores back for its ids, and the exact neighbours scored
    # the way PQ scores them (seed 001's exact-neighbours x PQ-scores cell)
    torch.testing.assert_close(store.index_scores(keys[:5], ids)[valid], approx[valid], atol=1e-3, rtol=1e-4)
    assert torch.isneginf(store.index_scores(keys[:5], ids)[~valid]).all()
    exact_ids = (-((keys[None, :, :] - keys[:5, None, :]) ** 2).sum(-1)).topk(10, dim=1).indices
    reconstructed = torch.from_numpy(store.index.reconstruct(exact_ids.numpy().ravel())).view(5, 10, -1)
    pq_of_exact = -((reconstructed - keys[:5, None, :]) ** 2).sum(-1)
    torch.testing.assert_close(store.index_scores(keys[:5], exact_ids), pq_of_exact)
    assert not torch.allclose(pq_of_exact, -((keys[exact_ids] - keys[:5, None, :]) ** 2).sum(-1), atol=1e-3)


def test_keys_can_come_from_another_layer_or_the_softmax_input(built, tmp_path):
    lm_cfg, corpus, _ = built
    model, tokenizer = load_causal_lm(lm_cfg)
    docs = tokenize_documents(tokenizer, read_texts(corpus))[:3]
    inputs = torch.from_numpy(docs[0][None, :20].astype(np.int64))
    with torch.no_grad():
        hidden = model(input_ids=inputs, output_hidden_states=True).hidden_states
        first = model.transformer.h[0]
        attn = first.attn(first.ln_1(hidden[0]))[0]
        expected = {0: first.ln_2(hidden[0] + attn)[0], "h_sm": hidden[-1][0]}  # GPT-2's last state is after ln_f
    for name, cfg in ((0, DatastoreConfig(layer=0)), ("h_sm", DatastoreConfig(key_type="h_sm"))):
        store = load_datastore(build_datastore(tmp_path / str(name), lm_cfg, corpus, cfg))
        assert (store.manifest["layer"], store.key_layer) == ((0, 0) if name == 0 else (-1, -1))
        keys = torch.from_numpy(np.asarray(store.keys[:19], dtype=np.float32))  # the first document's first keys
        torch.testing.assert_close(keys, expected[name][:19], atol=2e-3, rtol=2e-3)  # note: stored in fp16
        nb = ev.collect(model, docs, lm_cfg, store, ev.KNNConfig(k=1))
        assert torch.allclose(nb.scores[:19, 0], torch.zeros(19), atol=1e-2)  # evaluation reads the same keys
    with pytest.raises(ValueError, match="h_sm is read at the output layer"):
        DatastoreConfig(key_type="h_sm", layer=0)
    with pytest.raises(ConfigError, match="layer 7 does not exist: the model has 2 decoder blocks"):
        build_datastore(tmp_path / "bad", lm_cfg, corpus, DatastoreConfig(layer=7))


def test_a_memory_budget_chooses_ivf_pq_and_says_so(built, tmp_path):
    lm_cfg, corpus, _ = built
    tiny = IndexConfig(metric="l2", memory_budget_gb=5e-4, train_sample=4096)
    version = build_datastore(tmp_path, lm_cfg, corpus, DatastoreConfig(index=tiny))
    manifest = publication.read_manifest(version)
    assert manifest["factory"].startswith("IVF") and ",PQ" in manifest["factory"]
    assert manifest["expected_index_bytes"] <= 5e-4 * (1 << 30) < 4 * 32 * manifest["num_entries"]  # Flat would not fit


def test_a_stopped_build_publishes_nothing_and_the_next_one_reuses_nothing_torn(built, tmp_path):
    lm_cfg, corpus, _ = built
    with pytest.raises(BuildCancelled):
        build_datastore(tmp_path, lm_cfg, corpus, DatastoreConfig(), should_stop=lambda: True)
    assert current_version(tmp_path) is None and not (tmp_path / publication.CURRENT).exists()
    shards = list(tmp_path.glob(".shards-*/*.json"))
    assert shards == []  # the half-written shard has no marker, so it is never taken as done
    version = build_datastore(tmp_path, lm_cfg, corpus, DatastoreConfig())
    assert current_version(tmp_path) == version and load_datastore(tmp_path).num_entries > 0


def test_a_corrupt_or_foreign_datastore_is_refused(built, tmp_path, tiny_lm):
    lm_cfg, corpus, root = built
    copy = tmp_path / "copy"
    version = current_version(root)
    import shutil

    shutil.copytree(version, copy)
    raw = bytearray((copy / "values.npy").read_bytes())
    raw[-1] ^= 0xFF
    (copy / "values.npy").write_bytes(bytes(raw))
    with pytest.raises(RunError, match="values.npy does not match its sha256"):
        load_datastore(copy)
    with pytest.raises(RunError, match="holds no published datastore"):
        load_datastore(tmp_path)
    store = load_datastore(root)
    other, _ = load_causal_lm(lm_cfg)
    with torch.no_grad():
        other.lm_head.weight.add_(0.01)  # tied: other weights, so other keys
    with pytest.raises(ConfigError, match="built from other LM weights"):
        ev.check_compatible(other, store)


def test_an_empty_corpus_is_a_clear_error(built, tmp_path):
    lm_cfg, _, _ = built
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"id": "a", "title": "t", "text": "  "}) + "\n")
    with pytest.raises(InputError, match="empty.jsonl: the corpus has no text"):
        build_datastore(tmp_path / "ds", lm_cfg, CorpusConfig(path=str(empty)), DatastoreConfig())


def test_the_learned_datastore_trains_and_is_far_smaller(built, tiny_lm):
    lm_cfg, corpus, root = built
    store = load_datastore(root)
    model, tokenizer = load_causal_lm(lm_cfg)
    docs = tokenize_documents(tokenizer, read_texts(corpus))
    scored = list(score_documents(model, docs, lm_cfg))
    keys = torch.cat([s.keys for s in scored])
    targets = torch.cat([s.targets for s in scored])
    lm_log = torch.cat([s.lm_log_probs for s in scored])
    cfg = LearnedConfig(k=64, tau=1.0, lambda_=0.25, steps=60, batch_size=256)
    module, history = train_learned(keys, targets, lm_log, len(tokenizer), cfg)
    assert module.num_parameters == len(tokenizer) * keys.shape[1] < store.num_entries * keys.shape[1]
    assert history[-1] < history[0]  # the interpolated NLL falls while W_ds trains
    ds_log = learned_log_probs(module, keys, targets, cfg.k, cfg.tau)
    mixed = torch.logaddexp(lm_log + np.log(0.75), ds_log + np.log(0.25))
    assert mixed.mean() > lm_log.mean()  # on its training data the learned datastore helps the LM


def test_version_folders_are_immutable_and_current_flips(built, tmp_path):
    lm_cfg, corpus, _ = built
    first = build_datastore(tmp_path, lm_cfg, corpus, DatastoreConfig())
    second = build_datastore(tmp_path, lm_cfg, corpus, DatastoreConfig())
    assert first != second and current_version(tmp_path) == second
    assert (tmp_path / publication.CURRENT).read_text().strip() == Path(second).name


def test_a_build_that_died_after_its_shard_reuses_it(built, tmp_path, monkeypatch):
    lm_cfg, corpus, _ = built
    from realm.knnlm import datastore as ds

    real = ds.publish_datastore

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed while indexing")

    monkeypatch.setattr(ds, "publish_datastore", crash)
    with pytest.raises(KeyboardInterrupt):
        build_datastore(tmp_path, lm_cfg, corpus, DatastoreConfig())
    assert current_version(tmp_path) is None and not list(tmp_path.glob(".staging-*"))
    assert len(list(tmp_path.glob(".shards-*/*.json"))) == 1  # the finished shard survived, with its marker
    monkeypatch.setattr(ds, "publish_datastore", real)
    version = build_datastore(tmp_path, lm_cfg, corpus, DatastoreConfig())
    assert publication.read_manifest(version)["reused_shards"] == [0]


def test_the_search_batch_changes_nothing_but_speed(built, tiny_lm):
    lm_cfg, _, root = built
    _, _, heldout = tiny_lm
    store = load_datastore(root)
    model, tokenizer = load_causal_lm(lm_cfg)
    docs = tokenize_documents(tokenizer, read_texts(CorpusConfig(path=str(heldout))))[:5]
    small = ev.collect(model, docs, lm_cfg, store, ev.KNNConfig(k=16, search_batch=7))
    large = ev.collect(model, docs, lm_cfg, store, ev.KNNConfig(k=16, search_batch=4096))
    assert torch.equal(small.values, large.values) and torch.allclose(small.scores, large.scores)
    assert len(small.targets) == len(small.scores)


def test_gpu_search_takes_realm_index_torch_path_and_finds_the_same_neighbours(built, monkeypatch):
    from realm.index import torch_search
    from realm.knnlm import knn

    lm_cfg, _, root = built
    monkeypatch.setattr(torch_search, "search_devices", lambda: ["cpu", "cpu"])  # stands in for 2 GPUs
    on_cpu = load_datastore(root, IndexConfig(nprobe=8))
    on_gpus = load_datastore(root, IndexConfig(nprobe=8, enable_gpu_search=True))
    assert type(on_cpu.index).__name__ == "FaissIndex" and isinstance(on_gpus.index, torch_search.TorchIndex)
    queries = torch.from_numpy(np.asarray(on_cpu.keys[::97][:12], dtype=np.float32)) + 0.01
    want_scores, want_values, want_ids = on_cpu.search(queries, 10)
    scores, values, ids = on_gpus.search(queries, 10)
    assert knn.recall_at_k(ids, want_ids, 10) >= 0.9  # note: the torch path multiplies in fp16
    torch.testing.assert_close(scores[:, 0], want_scores[:, 0], atol=5e-2, rtol=1e-2)
    assert torch.equal(values, torch.from_numpy(on_cpu.values.astype(np.int64))[ids])
    monkeypatch.setattr(torch_search, "search_devices", lambda: [])  # no CUDA: FAISS on the CPU, as asked or not
    assert type(load_datastore(root, IndexConfig(enable_gpu_search=True)).index).__name__ == "FaissIndex"
