"""A second standalone builder (``realm index``) on a run that already has one is a user error: one line naming the
run directory and the builder holding it, exit code 2, no traceback."""

import os

from realm.core.errors import USER_ERROR_EXIT_CODE, run_command
from realm.index_builder.watch import LOCK_FILE, main
from realm.run import layout, publication


def test_a_second_builder_on_a_run_is_refused_in_one_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with publication.exclusive_lock(layout.index_dir(run_dir) / LOCK_FILE):  # the run's builder
        code = run_command("realm index", main, [f"--run_dir={run_dir}", "--lock_timeout_s=0", "--once=true"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("realm index")]
    assert code == USER_ERROR_EXIT_CODE, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(run_dir) in lines[0] and "another index builder" in lines[0] and f"pid {os.getpid()}" in lines[0]
