"""A checkpoint saved on a full or read-only disk is one ``DiskError`` naming the path (no traceback through
``run_command``); nothing of that step is published, and the run resumes from the checkpoint before it. Disks are
simulated: the tests may run as root (chmod stops nothing) and cannot fill a real disk."""

import errno
import os
import shutil
from pathlib import Path

import pytest

from realm.core.errors import UserError
from realm.run.layout import checkpoints_dir
from realm.run.publication import list_published
from realm.training.checkpoint import resolve_resume
from tests.unit.training.test_checkpoint_repair import _loop


def _partial_then(error: Exception):
    """An ``accelerator.save_state`` that writes part of the state, then fails."""

    def save_state(folder: str) -> None:
        (Path(folder) / "model.safetensors").write_bytes(b"half")
        raise error

    return save_state


@pytest.mark.parametrize("failure", ["no space for the state", "read-only publish", "torch.save on a full disk"])
def test_a_checkpoint_on_a_full_or_read_only_disk_is_one_disk_error_and_the_previous_one_resumes(
    tmp_path, monkeypatch, failure
):
    loop = _loop(tmp_path)
    loop.step = 2
    previous = loop.save()
    loop.step = 4
    if failure == "no space for the state":
        optimizer = str(checkpoints_dir(tmp_path) / ".staging-step-00000004" / "optimizer.bin")
        error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), optimizer)
        monkeypatch.setattr(loop.accelerator, "save_state", _partial_then(error))
    elif failure == "read-only publish":

        def read_only(src, dst):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(src), None, str(dst))

        monkeypatch.setattr(os, "rename", read_only)
    else:  # torch.save says only "unexpected pos" when its write fails; the disk tells why
        usage = shutil.disk_usage(tmp_path)
        monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=0))
        error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        monkeypatch.setattr(loop.accelerator, "save_state", _partial_then(error))
    with pytest.raises(UserError) as caught:
        loop.save()
    monkeypatch.undo()
    loop.close()
    message = str(caught.value)
    assert str(checkpoints_dir(tmp_path)) in message and "resume" in message and "\n" not in message
    assert [step for step, _ in list_published(checkpoints_dir(tmp_path), "step-")] == [2]
    assert resolve_resume(tmp_path, "auto") == previous
