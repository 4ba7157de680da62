"""The ``realm`` command: dispatch, the data-preparation commands, and clear errors from the inspection commands.

Everything runs in-process through ``realm.cli.main.main``; the command modules are imported here, at collection, so
each test times the command rather than the first import of torch and transformers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import realm.cli.data  # noqa: F401 - imported at collection (see the module docstring)
import realm.cli.inspect  # noqa: F401
from realm.cli.main import COMMANDS, main, resolve
from realm.core.config import save_config
from realm.pretrain.config import PretrainConfig
from tests.helpers import FIXTURES, publish_index

DOCS = [
    {"id": "d1", "title": "Ada Lovelace", "text": "Ada Lovelace was an English mathematician. She worked with "
     "Charles Babbage on the Analytical Engine. She is often regarded as the first computer programmer."},
    {"id": "d2", "title": "Analytical Engine", "text": "The Analytical Engine was a proposed mechanical computer. "
     "It was designed by Charles Babbage. It was first described in 1837."},
    {"id": "d3", "title": "Empty", "text": "   "},
]  # fmt: skip


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A WordPiece vocabulary trained by ``realm vocab`` on the docs above."""
    folder = tmp_path_factory.mktemp("cli")
    corpus = write_jsonl(folder / "docs.jsonl", DOCS)
    argv = [
        "vocab",
        "--input",
        str(corpus),
        "--out",
        str(folder / "tok"),
        "--vocab-size",
        "200",
        "--min-frequency",
        "1",
    ]
    assert main(argv) == 0
    return folder / "tok"


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert f"  {command} " in out


def test_no_command_prints_usage_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: realm COMMAND" in capsys.readouterr().out


def test_unknown_command_exits_2_with_a_message(capsys):
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'frobnicate'" in err and "realm --help" in err


def test_a_command_group_names_its_subcommands(capsys):
    assert main(["knnlm"]) == 2
    err = capsys.readouterr().err
    assert "realm knnlm: a subcommand is needed; one of: train-lm, build, evaluate, sweep, tune, inspect" in err
    assert main(["knnlm", "nope"]) == 2
    assert "unknown subcommand 'nope'" in capsys.readouterr().err
    for flag in ("--help", "-h"):  # as `realm COMMAND --help` does for every other command
        assert main(["knnlm", flag]) == 0
        out = capsys.readouterr().out
        assert "usage: realm knnlm SUBCOMMAND" in out and "sweep" in out and "perplexity with and without" in out


def test_every_command_resolves_to_a_function():
    for command in COMMANDS:
        assert callable(resolve(command)), command
    assert resolve("world") is realm.cli.data.main_world and resolve("inspect") is realm.cli.inspect.main_inspect


def test_world_writes_its_files_and_counts(tmp_path, capsys):
    assert main(["world", "--out", str(tmp_path / "w"), "--entities", "16", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    for name in ("corpus", "pretrain", "heldout", "entities", "questions"):
        assert (tmp_path / "w" / f"{name}.jsonl").is_file()
        assert str(tmp_path / "w" / f"{name}.jsonl") in out
    corpus = (tmp_path / "w" / "corpus.jsonl").read_text().splitlines()
    assert len(corpus) == 16 and "16 records" in out
    assert json.loads((tmp_path / "w" / "world.json").read_text())["config"]["seed"] == 3


def test_world_rejects_an_invalid_size(tmp_path, capsys):
    assert main(["world", "--out", str(tmp_path / "w"), "--entities", "3"]) == 2
    assert "num_entities must be >= 8" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_vocab_trains_a_loadable_tokenizer(tokenizer_dir):
    from realm.data.vocab import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3, 4]) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tokenizer.tokenize("Ada Lovelace") == ["ada", "lovelace"]


@pytest.mark.parametrize(
    "bad_line, reason",
    [('{"text": "fine"', "invalid JSON"), ('{"body": "no text field"}', "missing field 'text'"),
     ('["a list"]', "expected a JSON object"), ('{"text": 7}', "not a string")],
)  # fmt: skip
def test_vocab_names_file_and_line_of_a_malformed_record(tmp_path, capsys, bad_line, reason):
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": "one"}, "", bad_line])
    assert main(["vocab", "--input", str(data), "--out", str(tmp_path / "tok")]) == 2
    err = capsys.readouterr().err
    assert f"realm vocab: error: {data}:3: " in err and reason in err
    assert not (tmp_path / "tok").exists()


def test_vocab_reports_a_missing_input_file(tmp_path, capsys):
    assert main(["vocab", "--input", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "tok")]) == 2
    assert "nope.jsonl" in capsys.readouterr().err


def test_blocks_cuts_a_jsonl_corpus_and_reports_counts(tmp_path, capsys, tokenizer_dir):
    from realm.data.blocks import load_blocks

    corpus = write_jsonl(tmp_path / "docs.jsonl", DOCS)
    argv = [
        "blocks",
        "--out",
        str(tmp_path / "blocks"),
        "--tokenizer",
        str(tokenizer_dir),
        "--input",
        str(corpus),
        "--max-block-length",
        "16",
        "--max-title-length",
        "4",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    blocks = load_blocks(tmp_path / "blocks")
    assert len(blocks) > 2 and set(blocks["doc_id"]) == {"d1", "d2"}
    assert all(len(t) + len(b) + 3 <= 16 for t, b in zip(blocks["title_ids"], blocks["body_ids"]))
    assert f"{len(blocks)} blocks from 2 documents" in out and "1 empty documents, 0 malformed" in out


def test_blocks_reads_a_corpus_config_and_dpr_tsv(tmp_path, capsys, tokenizer_dir):
    config = tmp_path / "corpus.yaml"
    config.write_text(f"path: {FIXTURES / 'dpr_psgs.tsv'}\nformat: dpr_tsv\nmax_block_length: 64\n")
    argv = ["blocks", "--out", str(tmp_path / "blocks"), "--tokenizer", str(tokenizer_dir), "--config", str(config)]
    assert main(argv) == 0
    assert "3 blocks from 3 documents" in capsys.readouterr().out


def test_blocks_names_the_malformed_line_or_skips_it_when_asked(tmp_path, capsys, tokenizer_dir):
    corpus = write_jsonl(tmp_path / "docs.jsonl", [DOCS[0], '{"id": "x", "title": "T"}', DOCS[1]])
    base = ["blocks", "--tokenizer", str(tokenizer_dir), "--input", str(corpus)]
    assert main([*base, "--out", str(tmp_path / "b1")]) == 2
    assert f"{corpus}:2: missing field(s) ['text']" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "b2"), "--skip-malformed"]) == 0
    assert "0 empty documents, 1 malformed records" in capsys.readouterr().out


def test_blocks_rejects_an_unknown_config_key(tmp_path, capsys, tokenizer_dir):
    config = tmp_path / "corpus.yaml"
    config.write_text("path: x.jsonl\nmax_blocks: 3\n")
    argv = ["blocks", "--out", str(tmp_path / "b"), "--tokenizer", str(tokenizer_dir), "--config", str(config)]
    assert main(argv) == 2
    assert "unknown key(s) ['max_blocks']" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["evaluate-mlm"], ["inspect", "--k", "3"]])
def test_inspection_commands_name_a_missing_run_dir(tmp_path, capsys, command):
    missing = tmp_path / "no-such-run"
    argv = [command[0], str(missing), *(["who founded it?"] if command[0] == "inspect" else []), *command[1:]]
    assert main(argv) == 2
    assert f"run directory not found: {missing}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["evaluate-mlm", "inspect"])
def test_inspection_commands_name_a_missing_config_or_checkpoint(tmp_path, capsys, command):
    run = tmp_path / "run"
    run.mkdir()
    query = ["a query"] if command == "inspect" else []
    assert main([command, str(run), *query]) == 2
    assert f"{run} has no config.yaml" in capsys.readouterr().err

    save_config(PretrainConfig(), run / "config.yaml")
    assert main([command, str(run), *query]) == 2
    assert f"no complete checkpoint under {run / 'checkpoints'}" in capsys.readouterr().err

    half_written = run / "checkpoints" / "step-00000010"
    half_written.mkdir(parents=True)  # no manifest.json: never published
    assert main([command, str(run), *query, "--checkpoint", str(half_written)]) == 2
    assert "is not a complete checkpoint" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """A run directory as the trainer leaves it: config.yaml, a published checkpoint whose model.safetensors is
    written the way ``accelerator.save_state`` writes it (tied tensors dropped), and a live index version."""
    import torch
    from safetensors.torch import save_file

    from realm.core.config import load_config
    from realm.data.blocks import load_blocks
    from realm.data.packing import SpecialIds
    from realm.data.vocab import load_tokenizer
    from realm.index.build_version import blocks_fingerprint
    from realm.pretrain.heldout_eval import embed_corpus
    from realm.pretrain.model import RealmModel
    from realm.run import layout, live_index, publication

    root = tmp_path_factory.mktemp("tiny-run")
    world, run = root / "world", root / "run"
    assert main(["world", "--out", str(world), "--entities", "12"]) == 0
    assert (
        main(
            [
                "vocab",
                "--input",
                str(world / "corpus.jsonl"),
                "--input",
                str(world / "pretrain.jsonl"),
                "--out",
                str(root / "tok"),
                "--vocab-size",
                "300",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "blocks",
                "--out",
                str(root / "blocks"),
                "--tokenizer",
                str(root / "tok"),
                "--input",
                str(world / "corpus.jsonl"),
                "--max-block-length",
                "48",
            ]
        )
        == 0
    )
    cfg = load_config(
        PretrainConfig,
        "configs/pretrain/tiny.yaml",
        [
            f"--train.run_dir={run}",
            f"--data.tokenizer={root / 'tok'}",
            f"--data.blocks={root / 'blocks'}",
            f"--data.sentences={world / 'pretrain.jsonl'}",
            f"--data.heldout={world / 'heldout.jsonl'}",
        ],
    )
    run.mkdir()
    save_config(cfg, run / "config.yaml")
    tokenizer = load_tokenizer(root / "tok")
    torch.manual_seed(0)
    model = RealmModel.from_config(cfg.model.bert_config(len(tokenizer)), cfg.retriever)
    staging = publication.new_staging(layout.checkpoints_dir(run))
    # as accelerate's clean_state_dict_for_safetensors: of tensors sharing storage only the first name is kept
    state, seen = {}, set()
    for name, tensor in model.state_dict().items():
        if tensor.untyped_storage().data_ptr() not in seen:
            seen.add(tensor.untyped_storage().data_ptr())
            state[name] = tensor.contiguous()
    assert "encoder.mlm.cls.predictions.decoder.weight" not in state
    save_file(state, staging / "model.safetensors")
    (staging / "trainer_state.json").write_text(json.dumps({"step": 6}))
    publication.publish_folder(staging, layout.checkpoints_dir(run) / "step-00000006", {"step": 6, "kind": "checkpoint"})

    blocks = load_blocks(root / "blocks")
    embeddings = embed_corpus(model.retriever.doc_embedder, blocks, SpecialIds.of(tokenizer), 48)
    version = publish_index(run, embeddings.numpy(), 6, corpus_fingerprint=blocks_fingerprint(blocks))
    live_index.set_current_index(run, version)
    return run


def test_evaluate_mlm_loads_the_newest_checkpoint_and_writes_json(tiny_run, tmp_path, capsys):
    out = tmp_path / "metrics.json"
    assert main(["evaluate-mlm", str(tiny_run), "--max-examples", "8", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "checkpoint step-00000006 (step 6)" in printed and "span accuracy, closed book" in printed
    metrics = json.loads(out.read_text())
    assert metrics["num_examples"] == 8 and metrics["step"] == 6 and metrics["k"] == 3
    assert 0.0 <= metrics["span_accuracy"] <= 1.0 and metrics["gold_recall_at_k"] is not None


def test_evaluate_mlm_reads_bm25s_blocks_with_the_runs_model(tiny_run, tmp_path, capsys):
    """The lexical baseline: on the generated world the masked sentence still names its entity, so BM25 finds the
    gold article (the run's tiny retriever, 6 steps old, does not); the model then reads those blocks."""
    outs = {name: tmp_path / f"{name}.json" for name in ("own", "bm25")}
    for name, out in outs.items():
        argv = ["evaluate-mlm", str(tiny_run), "--max-examples", "16", "--retriever", name, "--json", str(out)]
        assert main(argv) == 0
    assert "retriever bm25" in capsys.readouterr().out
    own, bm25 = (json.loads(out.read_text()) for out in outs.values())
    assert bm25["retriever"] == "bm25" and bm25["num_examples"] == own["num_examples"] == 8  # all of them
    assert bm25["gold_recall_at_k"] == 1.0 and bm25["gold_recall_at_1"] > own["gold_recall_at_1"]


def test_evaluate_mlm_over_the_published_flat_index_gives_the_exact_figures(tiny_run, tmp_path, capsys):
    """eval.search: the live Flat index built from the checkpoint's step gives the held-out figures of the streamed
    exact search; auto takes that index, and an index of another step is refused (index) or passed over (auto)."""
    figures = {}
    for search in ("exact", "index", "auto"):
        out = tmp_path / f"{search}.json"
        argv = ["evaluate-mlm", str(tiny_run), "--max-examples", "8", "--search", search, "--json", str(out)]
        assert main(argv + ["--eval.exact_chunk_blocks=5"]) == 0
        figures[search] = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert "search exact (streamed)" in printed and "search index v-00000006" in printed
    assert figures["exact"]["search"] == "exact (streamed)" and figures["auto"]["search"] == "index v-00000006"
    names = ("span_accuracy", "token_accuracy", "gold_recall_at_1", "gold_recall_at_k", "num_examples")
    assert [figures["exact"][n] for n in names] == [figures["index"][n] for n in names] == [
        figures["auto"][n] for n in names
    ]
    from realm.run import layout, publication

    other = ["evaluate-mlm", str(tiny_run), "--max-examples", "2", "--checkpoint"]
    stale = publication.new_staging(layout.checkpoints_dir(tiny_run))
    for name in ("model.safetensors", "trainer_state.json"):
        (stale / name).write_bytes((tiny_run / "checkpoints" / "step-00000006" / name).read_bytes())
    (stale / "trainer_state.json").write_text(json.dumps({"step": 5}))
    folder = publication.publish_folder(stale, tmp_path / "step-00000005", {"step": 5, "kind": "checkpoint"})
    assert main(other + [str(folder), "--search", "index"]) == 2
    assert "built from step 6, not step 5" in capsys.readouterr().err
    assert main(other + [str(folder), "--search", "auto"]) == 0
    assert "search exact (streamed)" in capsys.readouterr().out


def test_streamed_exact_evaluation_equals_the_in_memory_exact_one(tiny_run):
    """The held-out outcomes of the streamed exact search (chunks of 1, 4 and all blocks) are those of the old
    in-memory BruteForceIndex over embed_corpus."""
    import numpy as np

    from realm.data.sentences import load_jsonl_dataset, prepare_sentences
    from realm.index.mips import BruteForceIndex
    from realm.pretrain.heldout_eval import embed_corpus, heldout_outcomes
    from realm.pretrain.saved_run import load_run

    run = load_run(tiny_run)
    rows = prepare_sentences(load_jsonl_dataset(run.cfg.data.heldout), run.tokenizer, None, 24).select(range(8))
    shape = run.cfg.retriever
    embeddings = embed_corpus(run.model.retriever.doc_embedder, run.store.blocks, run.special, 48)
    want = heldout_outcomes(run.model, rows, run.store, run.special, shape, index=BruteForceIndex(embeddings))
    for chunk in (1, 4, len(run.store)):
        got = heldout_outcomes(run.model, rows, run.store, run.special, shape, chunk_blocks=chunk)
        assert np.array_equal(got.retrieved, want.retrieved) and np.array_equal(got.span_correct, want.span_correct)


def test_inspect_prints_the_same_ranking_from_the_live_and_an_exact_index(tiny_run, capsys):
    from realm.cli.inspect import _open_index, embed_query
    from realm.pretrain.saved_run import load_run

    printed = {}
    for which in ("current", "exact"):
        assert main(["inspect", str(tiny_run), "Who founded the bank?", "--k", "4", "--index", which]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert ("index v-00000006 (Flat" if which == "current" else "exact search over") in lines[1]
        assert lines[2].split()[:3] == ["rank", "score", "block"] and len(lines) == 4 + 4
        printed[which] = [int(line.split()[2]) for line in lines[4:]]
    # The fixture's model is untrained, so its scores are close together (all print as the same 3 decimals) and
    # near-ties may order differently on another CPU: compare at full precision, over every block, ties allowed.
    loaded = load_run(tiny_run, None)
    query = embed_query(loaded, "Who founded the bank?")
    searched = {}
    for which in ("current", "exact"):
        index, _ = _open_index(loaded, which)
        scores, ids = index.search(query, len(loaded.store))
        searched[which] = (scores[0].double(), ids[0].tolist())
        assert printed[which] == ids[0].tolist()[:4], which
    (live_scores, live_ids), (exact_scores, exact_ids) = searched["current"], searched["exact"]
    assert sorted(live_ids) == sorted(exact_ids) == list(range(len(loaded.store)))
    tie = 1e-6  # float32 noise on scores near 0.16; the untrained model's neighbouring scores lie ~1e-5 apart
    assert (live_scores - exact_scores).abs().max() < tie
    exact_by_block = dict(zip(exact_ids, exact_scores.tolist()))
    # the live ranking is an exact ranking: each block it puts at rank r scores what exact's rank r scores (to noise)
    live_as_exact = torch.tensor([exact_by_block[i] for i in live_ids], dtype=torch.double)
    assert (live_as_exact - exact_scores).abs().max() < tie
    assert (exact_scores[:-1] - exact_scores[1:]).max() > 10 * tie, "the scores must not all tie: nothing compared"


def test_inspect_exact_streams_the_blocks_and_ranks_as_the_in_memory_search(tiny_run, tmp_path, capsys, monkeypatch):
    """``--index exact`` embeds the blocks ``eval.exact_chunk_blocks`` at a time through ``realm.index.streamed``
    (one pass for every query, never the [N, D] matrix) and prints the top-k of the old in-memory search."""
    from realm.cli.inspect import embed_query
    from realm.index.mips import BruteForceIndex
    from realm.index.streamed import RunningTopK
    from realm.pretrain.heldout_eval import embed_corpus
    from realm.pretrain.saved_run import load_run

    queries = ["Who founded the bank?", "where was the painter born", "the river [MASK] flows north"]
    loaded = load_run(tiny_run)
    embeddings = embed_corpus(loaded.model.retriever.doc_embedder, loaded.store.blocks, loaded.special, 48)
    want = BruteForceIndex(embeddings).search(torch.cat([embed_query(loaded, q) for q in queries]), 4)[1].tolist()
    chunks = []
    add = RunningTopK.add

    def recording_add(top, scored, chunk, first_id):
        chunks.append(chunk.shape[0])
        return add(top, scored, chunk, first_id)

    monkeypatch.setattr(RunningTopK, "add", recording_add)
    (tmp_path / "queries.txt").write_text("\n".join(queries) + "\n")
    argv = ["inspect", str(tiny_run), "--queries", str(tmp_path / "queries.txt"), "--k", "4", "--json"]
    assert main(argv + ["--index", "exact", "--eval.exact_chunk_blocks=3"]) == 0
    got = [[block["block"] for block in json.loads(line)["blocks"]] for line in capsys.readouterr().out.splitlines()]
    assert got == want
    num_blocks = len(loaded.store)
    assert num_blocks > 3 and chunks == [min(3, num_blocks - start) for start in range(0, num_blocks, 3)]


def test_a_checkpoint_that_does_not_fit_the_config_fails_loudly(tiny_run, tmp_path, capsys):
    import shutil

    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    weights = run / "checkpoints" / "step-00000006" / "model.safetensors"
    state = load_file(weights)
    state.pop("retriever.query_embedder.projection.bias")
    save_file(state, weights)
    assert main(["inspect", str(run), "a query", "--index", "exact"]) == 2
    err = capsys.readouterr().err
    assert "does not match the model" in err and "retriever.query_embedder.projection.bias" in err
