"""``realm export``: the exported folders load with transformers, sentence-transformers and FAISS, and embed and rank
exactly as the run's own model does."""

from __future__ import annotations

import json
import shutil

import faiss
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer, BertConfig

import realm.cli.export  # noqa: F401 - imported at collection, so tests time the command, not the import
from realm.cli.inspect import _open_index, embed_query
from realm.cli.main import main
from realm.data.packing import SpecialIds, block_batch
from realm.data.vocab import train_wordpiece
from realm.models.retriever import Retriever, RetrieverConfig
from realm.pretrain.heldout_eval import embed_corpus
from realm.pretrain.saved_run import load_run
from realm.run import publication
from realm.run.export_retrieval import dpr_records, trec_run
from realm.run.export_st import write_sentence_transformer
from tests.unit.cli.test_cli import tiny_run  # noqa: F401 - the fixture: a run with a checkpoint and a live index

sentence_transformers = pytest.importorskip("sentence_transformers")

QUERIES = ["Who founded the bank?", "where was the painter born"]
SENTENCE = "paris is the capital of france"


def _round_trips(folder, original) -> None:
    """``AutoTokenizer`` reads the run's own vocabulary from ``folder`` (not a stand-in that maps words to [UNK])."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer(SENTENCE)["input_ids"]
    assert len(tokenizer) == len(original) and ids == original(SENTENCE)["input_ids"], folder
    assert tokenizer.unk_token_id not in ids and tokenizer.decode(ids, skip_special_tokens=True) == SENTENCE


@pytest.fixture(scope="module")
def exports(tiny_run, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("exports")
    for fmt in ("hf", "sentence-transformers", "pyserini"):
        assert main(["export", str(tiny_run), str(out / fmt), "--format", fmt]) == 0
    return out


def test_sentence_transformers_embeds_as_the_runs_embedder(tiny_run, exports):  # noqa: F811
    loaded = load_run(tiny_run)
    model = sentence_transformers.SentenceTransformer(str(exports / "sentence-transformers"), device="cpu")
    expected = torch.cat([embed_query(loaded, q) for q in QUERIES])
    assert torch.allclose(model.encode_query(QUERIES, convert_to_tensor=True), expected, atol=1e-5)
    assert torch.allclose(model.encode(QUERIES, convert_to_tensor=True), expected, atol=1e-5)
    # documents: the pair (title, text) packs as the builder packs a block
    rows = loaded.store.blocks.select(range(4))
    packed = block_batch(rows["title_ids"], rows["body_ids"], loaded.special, loaded.cfg.retriever.max_block_length)
    with torch.inference_mode():
        blocks = loaded.model.retriever.embed_docs(**packed)
    pairs = list(zip(rows["title"], rows["text"]))
    assert torch.allclose(model.encode_document(pairs, convert_to_tensor=True), blocks, atol=1e-5)
    manifest = json.loads((exports / "sentence-transformers" / "manifest.json").read_text())
    assert manifest["step"] == 6 and manifest["format"] == "sentence-transformers" and manifest["files"]


def test_the_exported_index_ranks_as_realm_inspect(tiny_run, exports, capsys):  # noqa: F811
    folder = exports / "pyserini"
    index = faiss.read_index(str(folder / "index.faiss"))
    assert faiss.read_index(str(folder / "index")).ntotal == index.ntotal  # pyserini's name for the same file
    docids = (folder / "docid").read_text().split()
    blocks = pq.read_table(folder / "blocks.parquet").to_pandas()
    assert list(blocks.columns[:3]) == ["id", "title", "text"] and len(docids) == index.ntotal == len(blocks)
    model = sentence_transformers.SentenceTransformer(str(exports / "sentence-transformers"), device="cpu")
    scores, rows = index.search(model.encode_query(QUERIES[:1]), 4)
    assert main(["inspect", str(tiny_run), QUERIES[0], "--k", "4"]) == 0
    printed = [line.split() for line in capsys.readouterr().out.splitlines()[4:]]
    assert [docids[r] for r in rows[0]] == [line[2] for line in printed]
    # and at full precision against the project's own search of the live index
    loaded = load_run(tiny_run)
    by_id = blocks.set_index("id")
    titles, texts = loaded.store.texts([int(docids[r]) for r in rows[0]])
    assert [by_id.loc[docids[r], "title"] for r in rows[0]] == titles
    assert [by_id.loc[docids[r], "text"] for r in rows[0]] == texts
    live, _ = _open_index(loaded, "current")
    expected_scores, expected_ids = live.search(embed_query(loaded, QUERIES[0]), 4)
    assert [int(docids[r]) for r in rows[0]] == expected_ids[0].tolist()
    np.testing.assert_allclose(scores[0], expected_scores[0].numpy(), atol=1e-5)


def test_the_hf_encoder_loads_with_auto_classes(tiny_run, exports):  # noqa: F811
    loaded = load_run(tiny_run)
    mlm = AutoModelForMaskedLM.from_pretrained(exports / "hf").eval()
    ids = torch.tensor([loaded.tokenizer(SENTENCE)["input_ids"]])
    with torch.inference_mode():
        expected = loaded.model.encoder.mlm(input_ids=ids).logits
        assert torch.allclose(mlm(input_ids=ids).logits, expected, atol=1e-5)


def test_autotokenizer_round_trips_on_every_exported_folder(tiny_run, exports):  # noqa: F811
    tokenizer = load_run(tiny_run).tokenizer
    _round_trips(exports / "hf", tokenizer)
    _round_trips(exports / "sentence-transformers", tokenizer)


def test_separate_towers_are_one_folder_with_a_query_and_a_document_route(tmp_path):
    """ORQA-style towers (share_embedders=False), mean pooling and the cosine score: a Router folder whose routes
    embed as each tower does, Normalize included."""
    tokenizer = train_wordpiece([SENTENCE, "berlin is the capital of germany ."] * 5, vocab_size=150,
                                out_dir=tmp_path / "tok", min_frequency=1)  # fmt: skip
    cfg = RetrieverConfig(embed_dim=8, share_embedders=False, pooling="mean", score="cosine", max_query_length=12,
                          max_block_length=24)  # fmt: skip
    bert = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32)  # fmt: skip
    torch.manual_seed(0)
    retriever = Retriever.from_config(bert, cfg).eval()
    out = write_sentence_transformer(retriever, tokenizer, cfg, tmp_path / "st")
    model = sentence_transformers.SentenceTransformer(str(out), device="cpu")
    special = SpecialIds.of(tokenizer)
    enc = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    packed = block_batch([enc("France")], [enc(SENTENCE)], special, 24)
    query = tokenizer([SENTENCE], return_tensors="pt")
    with torch.inference_mode():
        docs = retriever.embed_docs(**packed)
        queries = retriever.embed_queries(query["input_ids"], query["attention_mask"])
    assert not torch.allclose(docs, queries, atol=1e-3)  # the towers differ, so the routes are told apart
    assert torch.allclose(model.encode_document([("France", SENTENCE)], convert_to_tensor=True), docs, atol=1e-5)
    assert torch.allclose(model.encode_query([SENTENCE], convert_to_tensor=True), queries, atol=1e-5)
    assert torch.allclose(queries.norm(dim=-1), torch.ones(1)) and model.similarity_fn_name == "cosine"
    _round_trips(out, tokenizer)
    _round_trips(out / "query_0_Transformer", tokenizer)


def test_a_backbone_outside_berts_family_is_refused_in_one_line(tiny_run, tmp_path, capsys):  # noqa: F811
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    roberta = tmp_path / "roberta"
    roberta.mkdir()
    (roberta / "config.json").write_text(json.dumps({"model_type": "roberta", "vocab_size": 300, "hidden_size": 32}))
    config = (run / "config.yaml").read_text().replace("init_from: null", f"init_from: {roberta}")
    assert f"init_from: {roberta}" in config
    (run / "config.yaml").write_text(config)
    assert main(["export", str(run), str(tmp_path / "out"), "--format", "hf"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a 'roberta' model; realm exports BERT backbones only" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_is_kept_and_a_missing_step_is_named(tiny_run, exports, capsys):  # noqa: F811
    assert main(["export", str(tiny_run), str(exports / "hf"), "--format", "hf"]) == 2
    assert "exists and is not empty; pass --overwrite" in capsys.readouterr().err
    assert main(["export", str(tiny_run), str(exports / "x"), "--format", "hf", "--step", "4"]) == 2
    assert "the run has steps [6]" in capsys.readouterr().err


def test_predictions_become_dpr_records_and_a_trec_run(tiny_run):  # noqa: F811
    store = load_run(tiny_run).store
    records = [{"id": "q 1", "question": "who?", "answers": ["x"], "block_ids": [2, 0, -1], "scores": [1.5, 0.25, 0.0],
                "has_answer": [False, True, False]}]  # fmt: skip
    (dpr,) = dpr_records(records, store)
    titles, texts = store.texts([2, 0])
    assert dpr["id"] == "q 1" and dpr["answers"] == ["x"]
    assert dpr["ctxs"] == [{"id": "2", "title": titles[0], "text": texts[0], "score": 1.5, "has_answer": False},
                           {"id": "0", "title": titles[1], "text": texts[1], "score": 0.25, "has_answer": True}]
    assert trec_run(records) == "q_1 Q0 2 1 1.500000 realm\nq_1 Q0 0 2 0.250000 realm\n"


def test_pretraining_writes_its_model_folder_and_replaces_it(tiny_run, tmp_path):  # noqa: F811
    """``RUN/model/`` as ``realm train`` leaves it at its last step: the encoder (hf) and the retriever
    (sentence-transformers), each published with its manifest and replaced by a later invocation of the run."""
    from realm.pretrain.export import write_run_model

    loaded = load_run(tiny_run)
    folder = write_run_model(tmp_path, loaded.model, loaded.tokenizer, loaded.cfg, step=6)
    assert json.loads((folder / "encoder" / "manifest.json").read_text())["format"] == "hf"
    _round_trips(folder / "encoder", loaded.tokenizer)
    with torch.no_grad():
        loaded.model.retriever.query_embedder.projection.bias.add_(1.0)  # a later invocation's weights
    write_run_model(tmp_path, loaded.model, loaded.tokenizer, loaded.cfg, step=8)
    assert json.loads((folder / "retriever" / "manifest.json").read_text())["step"] == 8
    model = sentence_transformers.SentenceTransformer(str(folder / "retriever"), device="cpu")
    expected = embed_query(loaded, QUERIES[0])
    assert torch.allclose(model.encode_query(QUERIES[:1], convert_to_tensor=True), expected, atol=1e-5)
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no staging or trash left behind


def test_the_usage_pages_three_lines_run_on_an_exported_run(tiny_run, exports):  # noqa: F811
    """docs/usage.md's "Taking the model out" snippet, as printed there, with its two folders pointed at this run's."""
    from tests.helpers import ROOT

    readme = (ROOT / "docs" / "usage.md").read_text()
    code = readme.split("**Taking the model out.**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.strip().splitlines()) == 3
    code = code.replace("runs/demo/model/retriever", str(exports / "sentence-transformers"))
    code = code.replace("runs/demo/export/index.faiss", str(exports / "pyserini" / "index.faiss"))
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the project's own README, not data
    docids = (exports / "pyserini" / "docid").read_text().split()
    rows, scores = namespace["rows"], namespace["scores"]
    assert rows.shape == (1, 5) and all(0 <= r < len(docids) for r in rows[0])
    assert list(scores[0]) == sorted(scores[0], reverse=True)


@pytest.mark.parametrize("where", ["ict/retriever", "retriever/step-00000006"])
def test_a_bare_retriever_folder_exports_its_towers_and_an_exact_index(tiny_run, tmp_path, capsys, where):  # noqa: F811
    """``realm ict``'s ``OUT/retriever`` and a trainer's ``RUN/retriever/step-N``: the towers, with the tokenizer and
    lengths of the run whose config.yaml is above the folder; the index embeds that run's blocks; hf is refused."""
    loaded = load_run(tiny_run)
    job = tmp_path / "job"
    folder = job / where
    job.mkdir()
    shutil.copy(tiny_run / "config.yaml", job / "config.yaml")
    staging = publication.new_staging(folder.parent)
    loaded.model.retriever.save_pretrained(staging)
    publication.publish_folder(staging, folder, {"kind": "ict_retriever", "steps": 6})
    for fmt in ("sentence-transformers", "pyserini"):
        assert main(["export", str(folder), str(tmp_path / fmt), "--format", fmt]) == 0
    model = sentence_transformers.SentenceTransformer(str(tmp_path / "sentence-transformers"), device="cpu")
    expected = torch.cat([embed_query(loaded, q) for q in QUERIES])
    assert torch.allclose(model.encode_query(QUERIES, convert_to_tensor=True), expected, atol=1e-5)
    manifest = json.loads((tmp_path / "sentence-transformers" / "manifest.json").read_text())
    assert manifest["retriever"] == str(folder.resolve()) and manifest["run"] == str(job.resolve())
    assert (manifest["step"], manifest["max_query_length"], manifest["max_block_length"]) == (6, 32, 48)
    index = faiss.read_index(str(tmp_path / "pyserini" / "index.faiss"))
    blocks = embed_corpus(loaded.model.retriever.doc_embedder, loaded.store.blocks, loaded.special, 48)
    np.testing.assert_allclose(index.reconstruct_n(0, index.ntotal), blocks.numpy(), atol=1e-6)
    assert (tmp_path / "pyserini" / "docid").read_text().split() == [str(i) for i in range(len(loaded.store))]
    assert json.loads((tmp_path / "pyserini" / "manifest.json").read_text())["index"] == "exact"
    capsys.readouterr()
    assert main(["export", str(folder), str(tmp_path / "hf"), "--format", "hf"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a bare retriever: --format hf" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "hf").exists()


def test_the_exact_index_is_filled_chunk_by_chunk(tiny_run, tmp_path):  # noqa: F811
    """``--index exact`` adds ``exact_chunk_blocks`` blocks at a time to the FAISS index (no [N, D] copy beside it),
    and gives the index the whole corpus would."""
    from realm.pretrain.export import ExportConfig, export_run

    added = []
    add = faiss.IndexFlatIP.add

    def recording_add(index, vectors):
        added.append(len(vectors))
        return add(index, vectors)

    loaded = load_run(tiny_run)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(faiss.IndexFlatIP, "add", recording_add)
        export_run(tiny_run, tmp_path / "out", ExportConfig(format="pyserini", index="exact", exact_chunk_blocks=5))
    num_blocks = len(loaded.store)
    assert num_blocks > 5 and added == [min(5, num_blocks - start) for start in range(0, num_blocks, 5)]
    index = faiss.read_index(str(tmp_path / "out" / "index.faiss"))
    blocks = embed_corpus(loaded.model.retriever.doc_embedder, loaded.store.blocks, loaded.special, 48)
    np.testing.assert_allclose(index.reconstruct_n(0, index.ntotal), blocks.numpy(), atol=1e-6)
