"""A pipeline's output folders (``realm.pipeline.layout``): where each stage writes, and that the stages and the
pipelines' configs use those folders."""

from __future__ import annotations

from pathlib import Path

from realm.pipeline import layout, synthetic, warm_start
from realm.pipeline.warm_start import CopyStage, WarmStartConfig


def test_each_stage_has_its_folder_under_out(tmp_path):
    out = tmp_path / "run"
    folders = {
        layout.world_dir(out): "world", layout.world_file(out, "heldout"): "world/heldout.jsonl",
        layout.tokenizer_dir(out): "tokenizer", layout.blocks_dir(out): "blocks",
        layout.cloze_file(out, "pretrain"): "cloze/pretrain.jsonl",
        layout.heldout_articles(out): "cloze/heldout_articles.txt",
        layout.copy_stage_dir(out, 0, 20): "copy/0_words_20", layout.copy_stage_dir(out, 1, 0): "copy/1_words_all",
        layout.warmup_encoder(out): "warmup/encoder", layout.ict_retriever(out): "ict/retriever",
        layout.pretrain_run(out): ".", layout.qa_run(out): "qa",
    }  # fmt: skip
    assert {str(path.relative_to(out)): name for path, name in folders.items()} == {v: v for v in folders.values()}
    assert layout.qa_run(str(out)) == out / "qa"  # a str OUT as a config gives it


def test_the_synthetic_data_writes_where_the_layout_says(monkeypatch, tmp_path):
    written = {}
    monkeypatch.setattr(synthetic, "generate_world", lambda cfg: cfg)
    monkeypatch.setattr(synthetic, "write_world", lambda world, folder: written.setdefault("world", folder) and {
        "corpus": folder / "corpus.jsonl", "pretrain": folder / "pretrain.jsonl"})
    monkeypatch.setattr(synthetic, "iter_field", lambda paths, name: iter(()))
    monkeypatch.setattr(synthetic, "train_wordpiece", lambda texts, size, folder: written.setdefault("vocab", folder))
    monkeypatch.setattr(synthetic, "build_blocks_from_config", lambda corpus, tok, folder: written.setdefault(
        "blocks", folder))
    paths = synthetic.make_world_data(tmp_path, 0, 10, 100, 128)
    assert written == {"world": layout.world_dir(tmp_path), "vocab": layout.tokenizer_dir(tmp_path),
                       "blocks": layout.blocks_dir(tmp_path)}  # fmt: skip
    assert (paths["tokenizer"], paths["blocks"]) == (layout.tokenizer_dir(tmp_path), layout.blocks_dir(tmp_path))


def test_the_warm_start_runs_in_the_layouts_folders(monkeypatch, tmp_path):
    runs = []
    monkeypatch.setattr(warm_start, "train_warmup", lambda cfg: runs.append(cfg.train.run_dir) or
                        Path(cfg.train.run_dir) / "encoder")  # fmt: skip
    monkeypatch.setattr(warm_start, "train_ict", lambda cfg: runs.append(cfg.train.run_dir) or
                        layout.ict_retriever(tmp_path))  # fmt: skip
    monkeypatch.setattr(warm_start, "load_tokenizer", lambda path: None)
    monkeypatch.setattr(warm_start, "load_blocks", lambda path: {"text": []})
    monkeypatch.setattr(warm_start, "frequent_words", lambda *args: ["a", "b"])
    monkeypatch.setattr(warm_start, "write_copy_corpus", lambda words, path, *args: path)
    monkeypatch.setattr(warm_start, "build_blocks_from_config", lambda corpus, tok, folder: folder)
    cfg = WarmStartConfig(copy_curriculum=[CopyStage(words=2, steps=1)], warmup_steps=1, ict_steps=1)
    warm_start.warm_start(cfg, tmp_path, 0, {"tokenizer": "t", "blocks": "b"}, {})
    expected = [layout.copy_stage_dir(tmp_path, 0, 2), layout.warmup_dir(tmp_path), layout.ict_dir(tmp_path)]
    assert [Path(run) for run in runs] == expected
