"""The ``realm`` command on inputs it cannot use (issue 57, part 4): a tokenizer folder with a file missing, a blocks
Arrow file cut short or with flipped bytes, a run whose checkpoints all fail verification. Each is one line on
stderr that names the file and says what to do, with exit code 2 and no traceback."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import realm.cli.data  # noqa: F401 - imported at collection, so each test times the command, not the imports
import realm.cli.inspect  # noqa: F401
import realm.trainer.pretrain  # noqa: F401
from realm.cli.main import main
from realm.core.config import load_config, save_config
from realm.core.errors import RunError
from realm.data.blocks import BLOCKS_MANIFEST, load_blocks
from realm.data.vocab import load_tokenizer, tokenizer_fingerprint
from realm.pretrain.config import PretrainConfig
from realm.run import layout
from realm.run.publication import file_entries, new_staging, publish_folder
from realm.training.checkpoint import resolve_resume
from tests.helpers import SMALL_TEXTS, make_run, small_tokenizer


LOG_RECORD = re.compile(r"^\d\d:\d\d:\d\d \[realm ")
"""A log record's line (``realm.core.logging``'s format): progress the command logged before it failed, which
reaches stderr when an earlier test in the same worker process set up the CLI's log handler."""


def _error_line(capsys: pytest.CaptureFixture) -> str:
    """The one line a command wrote to stderr besides its log records (it fails the test on a traceback or any
    other line)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not LOG_RECORD.match(line)]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def _saved_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(run_dir, blocks, tokenizer): a run directory with its config and tiny blocks, and no checkpoint yet."""
    run, blocks, tokenizer = make_run(tmp_path, 12)
    run.mkdir()
    manifest = {"tokenizer": str(tokenizer), "tokenizer_fingerprint": tokenizer_fingerprint(load_tokenizer(tokenizer))}
    (blocks / BLOCKS_MANIFEST).write_text(json.dumps(manifest))  # (blocks without one are warned about)
    overrides = [f"--data.tokenizer={tokenizer}", f"--data.blocks={blocks}"]
    save_config(load_config(PretrainConfig, None, overrides), run / "config.yaml")
    return run, blocks, tokenizer


def _unread_checkpoint(run: Path) -> None:
    """A published checkpoint of empty weights: the tokenizer and blocks are loaded before the weights are read."""
    staging = new_staging(layout.checkpoints_dir(run))
    (staging / "model.safetensors").write_bytes(b"")
    publish_folder(staging, layout.checkpoints_dir(run) / "step-00000001", {"step": 1})


def _checkpoint_failing_verification(run: Path) -> Path:
    """A published ``step-00000001`` whose weights no longer match the checksum its manifest lists."""
    staging = new_staging(layout.checkpoints_dir(run))
    (staging / "model.safetensors").write_bytes(b"weights")
    manifest = {"step": 1, "files": file_entries(staging, ["model.safetensors"])}
    folder = publish_folder(staging, layout.checkpoints_dir(run) / "step-00000001", manifest)
    (folder / "model.safetensors").write_bytes(b"weightz")  # one flipped byte
    return folder


@pytest.mark.parametrize("command", [["evaluate-mlm"], ["inspect", "--index", "exact"]])
def test_no_verified_checkpoint_advises_what_the_inspection_commands_take(tmp_path, capsys, command):
    """It advised ``--train.resume=never``, an option of ``realm train`` that these commands do not take."""
    run, _, _ = _saved_run(tmp_path)
    _checkpoint_failing_verification(run)
    argv = [command[0], str(run), *(["a query"] if command[0] == "inspect" else []), *command[1:]]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # (above it, the error logged for each checkpoint rejected)
    assert err.startswith(f"realm {command[0]}: error: no checkpoint under {layout.checkpoints_dir(run)} passes ")
    assert "--train.resume" not in err and "--checkpoint" in err


def test_no_verified_checkpoint_still_advises_resume_never_to_the_trainer(tmp_path):
    run, _, _ = _saved_run(tmp_path)
    _checkpoint_failing_verification(run)
    with pytest.raises(RunError, match="passes verification .*rerun with --train.resume=never to start over"):
        resolve_resume(run, "auto")


# ---------------------------------------------------------------------------------------------- tokenizers

TEXTS = SMALL_TEXTS


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    return small_tokenizer(tmp_path_factory.mktemp("tok") / "tok")


def _blocks_argv(tmp_path: Path, tokenizer: Path) -> list[str]:
    """``realm blocks`` of a small jsonl corpus into ``tmp_path / "blocks"`` with ``tokenizer``."""
    corpus = tmp_path / "docs.jsonl"
    records = [{"id": str(n), "title": "Ada", "text": text} for n, text in enumerate(TEXTS)]
    corpus.write_text("".join(json.dumps(record) + "\n" for record in records))
    return ["blocks", "--out", str(tmp_path / "blocks"), "--tokenizer", str(tokenizer), "--input", str(corpus)]


@pytest.mark.parametrize("lost", ["tokenizer.json", "tokenizer_config.json"])
def test_blocks_refuses_a_tokenizer_folder_with_a_file_missing(tmp_path, capsys, trained, lost):
    """Without tokenizer.json it wrote all-[UNK] blocks; without tokenizer_config.json it printed a traceback."""
    folder = tmp_path / "tok"
    shutil.copytree(trained, folder)
    (folder / lost).unlink()
    assert main(_blocks_argv(tmp_path, folder)) == 2
    err = _error_line(capsys)
    assert err.startswith(f"realm blocks: error: {folder}: ") and f"{lost} is missing" in err
    assert not (tmp_path / "blocks").exists()


def test_blocks_refuses_a_tokenizer_that_reads_none_of_the_corpus(tmp_path, capsys):
    (tmp_path / "given").mkdir()
    _, _, words = make_run(tmp_path / "given", 1)  # its vocabulary is w0 ... w39: no word of the corpus
    capsys.readouterr()
    assert main(_blocks_argv(tmp_path, words)) == 2
    err = _error_line(capsys)
    assert err.startswith(f"realm blocks: error: tokenizer {words} reads none of the corpus: ")
    assert not (tmp_path / "blocks").exists()


def test_inspect_refuses_a_run_whose_tokenizer_lost_its_tokenizer_json(tmp_path, capsys):
    """It loaded the 5-entry fallback tokenizer; a model of the run's vocabulary then failed to load its weights."""
    run, _, tokenizer = _saved_run(tmp_path)
    (tokenizer / "tokenizer.json").unlink()
    _unread_checkpoint(run)
    capsys.readouterr()  # (the progress bars of saving the blocks)
    assert main(["inspect", str(run), "a query"]) == 2
    err = _error_line(capsys)
    assert err.startswith(f"realm inspect: error: data.tokenizer of {run / 'config.yaml'} ")
    assert f"{tokenizer}: " in err and "tokenizer.json is missing" in err


def test_train_refuses_a_tokenizer_that_lost_its_tokenizer_json_instead_of_blaming_the_blocks(tmp_path, capsys):
    """It advised cutting the blocks again, with the same 5-entry tokenizer, which makes all-[UNK] blocks."""
    run, blocks, tokenizer = _saved_run(tmp_path)
    (tokenizer / "tokenizer.json").unlink()
    capsys.readouterr()
    argv = ["train", "--config", "configs/pretrain/tiny.yaml", f"--train.run_dir={tmp_path / 'new'}",
            f"--data.tokenizer={tokenizer}", f"--data.blocks={blocks}"]  # fmt: skip
    assert main(argv) == 2
    err = _error_line(capsys)
    assert err.startswith(f"realm train: error: {tokenizer}: ") and "tokenizer.json is missing" in err
    assert not (tmp_path / "new").exists()


# ---------------------------------------------------------------------------------------------- blocks

ARROW = "data-00000-of-00001.arrow"


def _run_argv(command: str, tmp_path: Path, run: Path, blocks: Path, tokenizer: Path) -> list[str]:
    if command == "inspect":
        _unread_checkpoint(run)
        return ["inspect", str(run), "a query"]
    return ["train", "--config", "configs/pretrain/tiny.yaml", f"--train.run_dir={tmp_path / 'new'}",
            f"--data.tokenizer={tokenizer}", f"--data.blocks={blocks}"]  # fmt: skip


@pytest.mark.parametrize("command", ["inspect", "train"])
def test_a_blocks_arrow_file_cut_short_is_one_line_naming_it(tmp_path, capsys, command):
    """It was pyarrow's OSError as a traceback."""
    run, blocks, tokenizer = _saved_run(tmp_path)
    data = (blocks / ARROW).read_bytes()
    (blocks / ARROW).write_bytes(data[: len(data) // 2])
    argv = _run_argv(command, tmp_path, run, blocks, tokenizer)
    capsys.readouterr()
    assert main(argv) == 2
    err = _error_line(capsys)
    assert err.startswith(f"realm {command}: error: {blocks / ARROW}: unreadable (")
    assert err.endswith("cut them again with `realm blocks`")


@pytest.mark.parametrize("command", ["inspect", "train"])
def test_a_flipped_wordpiece_id_in_the_blocks_is_one_line_naming_its_block(tmp_path, capsys, command):
    """It was ``IndexError: index out of range in self`` in the embedder, as a traceback."""
    run, blocks, tokenizer = _saved_run(tmp_path)
    first = load_blocks(blocks)[5]["body_ids"][:3]
    data = (blocks / ARROW).read_bytes()
    at = data.find(np.array(first, dtype="<i4").tobytes())
    (blocks / ARROW).write_bytes(data[:at] + b"\xff\xff\xff\x7f" + data[at + 4 :])
    argv = _run_argv(command, tmp_path, run, blocks, tokenizer)
    capsys.readouterr()
    assert main(argv) == 2
    err = _error_line(capsys)
    assert err.startswith(f"realm {command}: error: {blocks}: block 5 holds wordpiece id 2147483647 in body_ids, ")
