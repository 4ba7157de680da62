"""The ``realm`` command on input it cannot use: one line naming what is wrong and where, exit code 2, nothing
written. A corpus with a repeated document id, blocks cut with another tokenizer than the run's, an ``index/CURRENT``
that names something outside the run."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import realm.cli.data  # noqa: F401 - imported at collection, so each test times the command, not the imports
import realm.cli.inspect  # noqa: F401
from realm.cli.inspect import _open_index
from realm.cli.main import main
from realm.core.config import load_config, save_config
from realm.core.errors import RunError
from realm.data.vocab import train_wordpiece
from realm.pretrain.config import PretrainConfig
from realm.run import layout, publication

TEXTS = ["Ada Lovelace worked with Charles Babbage.", "The Analytical Engine was a proposed computer."] * 3


def _tokenizer(folder: Path, cased: bool = False) -> Path:
    """A small WordPiece vocabulary (``realm vocab``'s), saved where ``realm blocks --tokenizer`` reads it."""
    train_wordpiece(TEXTS, 80, folder, lowercase=not cased, min_frequency=1)
    return folder


def _corpus(path: Path, ids: list[str]) -> Path:
    records = [{"id": doc_id, "title": "Ada", "text": TEXTS[n % 2]} for n, doc_id in enumerate(ids)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture()
def tokenizer_dir(tmp_path) -> Path:
    return _tokenizer(tmp_path / "tok")


def test_blocks_refuses_repeated_document_ids_naming_both_lines(tmp_path, capsys, tokenizer_dir):
    corpus = _corpus(tmp_path / "docs.jsonl", ["a", "b", "a"])
    argv = ["blocks", "--out", str(tmp_path / "blocks"), "--tokenizer", str(tokenizer_dir), "--input", str(corpus)]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # (above it, any log lines of reading the corpus)
    assert err == (
        f"realm blocks: error: {corpus}:3: document id 'a' repeats {corpus}:1 (1 document(s) repeat an earlier id; "
        "ids must be unique)"
    )
    assert not (tmp_path / "blocks").exists()


def test_a_run_whose_blocks_were_cut_with_another_tokenizer_is_refused(tmp_path, capsys, tokenizer_dir):
    other = _tokenizer(tmp_path / "other", cased=True)
    corpus = _corpus(tmp_path / "docs.jsonl", ["a", "b"])
    argv = ["blocks", "--out", str(tmp_path / "blocks"), "--tokenizer", str(other), "--input", str(corpus)]
    assert main(argv) == 0
    run = tmp_path / "run"
    run.mkdir()
    overrides = [f"--data.tokenizer={tokenizer_dir}", f"--data.blocks={tmp_path / 'blocks'}"]
    save_config(load_config(PretrainConfig, None, overrides), run / "config.yaml")
    staging = publication.new_staging(layout.checkpoints_dir(run))
    (staging / "model.safetensors").write_bytes(b"")  # the check comes before the model is read
    publication.publish_folder(staging, layout.checkpoints_dir(run) / "step-00000001", {"step": 1})
    capsys.readouterr()
    assert main(["inspect", str(run), "a query"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"realm inspect: error: blocks {tmp_path / 'blocks'} were cut with tokenizer {other} ")
    assert f"not with {tokenizer_dir} " in err


def test_inspect_says_what_is_wrong_with_a_current_pointer_out_of_the_run(tmp_path):
    run = tmp_path / "run"
    (run / "index").mkdir(parents=True)
    with pytest.raises(RunError, match=r"index/CURRENT is missing \(is the builder running\?\)"):
        _open_index(SimpleNamespace(run_dir=run), "current")
    (run / "index" / "CURRENT").write_text("/etc\n")
    with pytest.raises(RunError) as err:
        _open_index(SimpleNamespace(run_dir=run), "current")
    assert str(err.value) == (
        f"no usable index: {run / 'index' / 'CURRENT'} names '/etc', which is not a version folder inside "
        f"{run / 'index'}; use --index exact to embed the blocks now"
    )
