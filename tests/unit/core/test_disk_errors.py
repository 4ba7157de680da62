"""A write that fails for want of space or permission (a full disk or quota, a read-only or foreign folder) is one
``DiskError`` naming the path and saying that the run resumes once it is fixed; every other error is left alone. A
full disk is simulated: these tests may run as root (chmod stops nothing) and cannot fill a real disk."""

import errno
import os
import shutil

import pytest

from realm.core.atomic import check_free_space, disk_writes, write_text_atomic
from realm.core.config import save_config
from realm.core.errors import DiskError, UserError, run_command
from realm.pretrain.config import PretrainConfig

DISK_ERRNOS = [errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES]


@pytest.mark.parametrize("code", DISK_ERRNOS)
def test_a_write_that_fails_for_want_of_space_or_permission_is_one_disk_error_naming_the_file(tmp_path, code):
    target = tmp_path / "index" / "embeddings.npy"
    with pytest.raises(DiskError) as caught:
        with disk_writes(tmp_path / "index"):
            raise OSError(code, os.strerror(code), str(target))
    message = str(caught.value)
    assert isinstance(caught.value, UserError) and caught.value.errno == code
    assert str(target) in message and os.strerror(code).lower() in message.lower() and "\n" not in message
    assert "resume" in message


def test_an_error_without_a_file_names_the_folder_written_to(tmp_path):
    with pytest.raises(DiskError, match=f"^{tmp_path / 'index'}: "):
        with disk_writes(tmp_path / "index"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_faiss_and_safetensors_write_errors_that_only_name_the_os_error_in_their_text_are_disk_errors(tmp_path):
    faiss_text = (
        "Error in void faiss::write_index(const Index*, IOWriter*, int) at index_write.cpp:499: Error: 'ret == "
        "(size * 4)' failed: write error in /run/index/x: 4051 != 64000 (No space left on device)"
    )
    with pytest.raises(DiskError, match="no space left on device"):
        with disk_writes(tmp_path / "index.faiss"):
            raise RuntimeError(faiss_text)
    with pytest.raises(DiskError, match="read-only file system"):
        with disk_writes(tmp_path / "model.safetensors"):
            raise RuntimeError("Error while serializing: I/O error: Read-only file system (os error 30)")


def test_other_errors_pass_through_unchanged(tmp_path):
    with pytest.raises(FileNotFoundError):
        with disk_writes(tmp_path):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(tmp_path / "x"))
    with pytest.raises(RuntimeError, match="unexpected pos"):
        with disk_writes(tmp_path):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")


def test_a_writer_that_hides_the_errno_on_a_disk_with_no_space_left_is_a_disk_error(tmp_path, monkeypatch):
    """torch.save reports a failed write as 'unexpected pos' with no errno; with the disk full it is the disk."""
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=0))
    with pytest.raises(DiskError, match=f"{tmp_path}: .*no space left"):
        with disk_writes(tmp_path, opaque_writer=True):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    with pytest.raises(RuntimeError, match="unexpected pos"):  # only where the writer is known to hide the errno
        with disk_writes(tmp_path):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")


def test_too_little_free_space_for_a_file_of_known_size_is_refused_before_writing(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=3 * 2**20))
    check_free_space(tmp_path / "small.npy", 2**20)  # fits
    with pytest.raises(DiskError) as caught:
        check_free_space(tmp_path / "big.npy", 5 * 2**30)
    message = str(caught.value)
    assert str(tmp_path / "big.npy") in message and "5.0 GiB" in message and "3.0 MiB" in message
    assert "resume" in message and not (tmp_path / "big.npy").exists()


def test_a_config_saved_on_a_full_disk_is_one_line_and_the_old_file_stays(tmp_path, monkeypatch, capsys):
    path = tmp_path / "config.yaml"
    path.write_text("old: true\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what a delayed allocation reports at fsync

    monkeypatch.setattr(os, "fsync", full)
    assert run_command("realm train", lambda argv: save_config(PretrainConfig(), path), []) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"realm train: error: {path}") and "no space left" in err
    assert path.read_text() == "old: true\n" and sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_a_pointer_written_on_a_read_only_folder_is_a_disk_error(tmp_path, monkeypatch):
    def read_only(src, dst):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(src), None, str(dst))

    monkeypatch.setattr(os, "replace", read_only)
    with pytest.raises(DiskError, match="read-only file system"):
        write_text_atomic(tmp_path / "CURRENT", "v-00000010\n")
    assert list(tmp_path.iterdir()) == []


def test_a_log_record_the_disk_has_no_room_for_is_one_disk_error_naming_the_log(tmp_path, monkeypatch):
    from realm.core.logging import MetricsLogger, read_metrics

    log = MetricsLogger(tmp_path / "metrics.jsonl")
    log.log({"train/loss": 1.0}, step=1)

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(DiskError) as caught:
        log.log({"train/loss": 0.5}, step=2)
    monkeypatch.undo()
    log.close()
    assert str(tmp_path / "metrics.jsonl") in str(caught.value) and "\n" not in str(caught.value)
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1]


def test_a_retrieval_table_the_disk_has_no_room_for_is_one_disk_error_naming_the_file(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from realm.pretrain.retrieval_table import log_retrieval_table

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "retrievals.jsonl"))

    monkeypatch.setattr("builtins.open", full)
    with pytest.raises(DiskError) as caught:
        log_retrieval_table(SimpleNamespace(trackers=[], is_main_process=True), [{"query": "q", "rank": 0}], 1, tmp_path)
    assert "retrievals.jsonl" in str(caught.value)
