"""The trainer's child builder: command line and environment for 1 and N processes (nothing is started)."""

import logging

import pytest

from realm.core.config import load_config
from realm.core.errors import ConfigError
from realm.pretrain.refresh import RefreshConfig
from realm.trainer.builder_process import builder_command, builder_env

TRAINER_ENV = {
    "PATH": "/usr/bin",
    "OMP_NUM_THREADS": "1",
    "CUDA_VISIBLE_DEVICES": "0,1,2",
    # what torchrun / accelerate launch give each trainer process
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "3",
    "LOCAL_WORLD_SIZE": "3",
    "GROUP_RANK": "0",
    "GROUP_WORLD_SIZE": "1",
    "ROLE_RANK": "1",
    "ROLE_NAME": "default",
    "ROLE_WORLD_SIZE": "3",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "abc",
    "TORCHELASTIC_ERROR_FILE": "/tmp/err.json",
    "ACCELERATE_USE_CPU": "true",
    "ACCELERATE_MIXED_PRECISION": "bf16",
}
KEPT = {"PATH", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"}


def _cmd(**refresh):
    cfg = RefreshConfig(builder_config="configs/index/tiny.yaml", builder_num_threads=2, **refresh)
    return builder_command(cfg, "/runs/r", ["--tracking.report_to=none"], parent_env=TRAINER_ENV, python="py")


def test_one_process_builder_is_a_plain_python_module_run():
    cmd, env = _cmd()
    assert cmd == [
        "py",
        "-m",
        "realm.index_builder.watch",
        "--config",
        "configs/index/tiny.yaml",
        "--run_dir=/runs/r",
        "--num_threads=2",
        "--tracking.report_to=none",
    ]
    assert set(env) == KEPT and env["CUDA_VISIBLE_DEVICES"] == "0,1,2"  # inherited, launcher variables stripped


def test_n_process_builder_runs_under_a_standalone_torchrun_with_enable_distributed():
    cmd, env = _cmd(builder_num_processes=2)
    assert cmd[:7] == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m"]
    assert cmd[7:] == [
        "realm.index_builder.watch",
        "--config",
        "configs/index/tiny.yaml",
        "--run_dir=/runs/r",
        "--num_threads=2",
        "--enable_distributed=true",
        "--tracking.report_to=none",
    ]
    assert "--device=cuda" not in cmd and set(env) == KEPT


def test_builder_devices_set_cuda_visible_devices_and_the_cuda_device():
    cmd, env = _cmd(builder_num_processes=2, builder_devices="6,7")
    assert "--nproc_per_node" in cmd and "--enable_distributed=true" in cmd and "--device=cuda" in cmd
    assert env["CUDA_VISIBLE_DEVICES"] == "6,7" and set(env) == KEPT
    cmd, env = _cmd(builder_devices="7")
    assert (
        cmd[1:3] == ["-m", "realm.index_builder.watch"]
        and "--device=cuda" in cmd
        and "--enable_distributed=true" not in cmd
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "7" and not any(a.startswith("--precision") for a in cmd)
    cmd, _ = _cmd(builder_devices="7", builder_precision="bf16")
    assert "--precision=bf16" in cmd
    with pytest.raises(ValueError, match="builder_precision must be empty or one of"):
        RefreshConfig(builder_precision="half")


def test_builder_env_strips_every_launcher_variable_and_nothing_else():
    env = builder_env({**TRAINER_ENV, "TORCHELASTIC_MAX_RESTARTS": "0", "MY_RANK": "x", "HF_HUB_OFFLINE": "1"})
    assert set(env) == KEPT | {"MY_RANK", "HF_HUB_OFFLINE"}
    assert builder_env({"RANK": "0"}, "3") == {"CUDA_VISIBLE_DEVICES": "3"}


def test_builder_devices_given_as_an_int_override_is_stored_as_a_string():
    cfg = load_config(RefreshConfig, None, ["--builder_devices=7", "--builder_num_processes=1"])
    assert cfg.builder_devices == "7"
    assert load_config(RefreshConfig, None, ["--builder_devices=6,7"]).builder_devices == "6,7"


@pytest.mark.parametrize(
    "bad",
    [dict(builder_num_processes=0), dict(builder_devices="6,,7"), dict(builder_devices="7", builder_num_processes=2)],
)
def test_bad_builder_settings_are_rejected(bad):
    with pytest.raises((ValueError, ConfigError), match="builder_"):
        RefreshConfig(**bad)


def test_a_child_builder_started_held_waits_on_its_hold_file_and_a_release_or_stop_removes_it(tmp_path):
    """The trainer starts its child builder at the beginning of its set-up, held (``RUN/index/BUILDER_HOLD``): every
    builder rank gets the file on its command line and waits while it exists; ``release`` (in ``Trainer.run``, once
    a killed run's leftovers are cleared) and ``stop`` remove it, so no later builder is held by a stale one."""
    from realm.run.layout import BUILDER_HOLD, index_dir
    from realm.trainer.builder_process import ChildBuilder

    hold = index_dir(tmp_path) / BUILDER_HOLD
    for processes in (1, 2):
        cmd, _ = builder_command(RefreshConfig(builder_num_processes=processes), tmp_path, hold_file=hold)
        assert cmd.count(f"--hold_file={hold}") == 1
    assert not any(a.startswith("--hold_file") for a in builder_command(RefreshConfig(), tmp_path)[0])
    # a builder that fails at once (its config is missing), so that nothing waits on the file here
    cfg = RefreshConfig(spawn_builder=True, builder_config=str(tmp_path / "missing.yaml"))
    child = ChildBuilder(cfg, tmp_path, [], num_trainers=1)
    child.start_held()
    assert hold.exists() and f"--hold_file={hold}" in child.process.args
    child.release()
    assert not hold.exists()
    child.start_held()
    child.stop()
    assert not hold.exists() and child.process.poll() is not None


def test_a_child_builder_that_dies_is_restarted_then_the_run_stops(tmp_path, caplog):
    from realm.trainer.builder_process import ChildBuilder

    # a builder that fails at once: its config file does not exist
    cfg = RefreshConfig(spawn_builder=True, builder_config=str(tmp_path / "missing.yaml"), builder_restarts=2)
    child = ChildBuilder(cfg, tmp_path, [], num_trainers=1)
    child.start()
    with caplog.at_level(logging.ERROR):
        for restart in (1, 2):
            child.process.wait(timeout=60)
            child.check()
            assert child.restarts == restart and "restarting it" in caplog.text
        child.process.wait(timeout=60)
        with pytest.raises(RuntimeError, match="exited with code 2 \\(restarted 2 times already\\)"):
            child.check()
    assert "config file not found" in (tmp_path / "builder.log").read_text()


def test_a_child_builder_that_gave_up_is_not_restarted_and_its_recorded_reason_stops_the_run(tmp_path):
    """A builder that gave up (retries spent, or an error retrying cannot fix) records why and exits: restarting it
    would fail the same way, so the trainer stops at once with the builder's reason in its one line."""
    from realm.core.errors import UserError
    from realm.index.build_failure import record_build_failure
    from realm.trainer.builder_process import ChildBuilder

    cfg = RefreshConfig(spawn_builder=True, builder_config=str(tmp_path / "missing.yaml"), builder_restarts=2)
    child = ChildBuilder(cfg, tmp_path, [], num_trainers=1)
    child.start()
    reason = "gave up building the index of retriever step 4 after 4 attempts: /r/index: no space left on device"
    record_build_failure(tmp_path, 4, reason)  # what the builder writes before it exits
    child.process.wait(timeout=60)
    with pytest.raises(UserError) as caught:
        child.check()
    assert str(caught.value).startswith(f"the index builder {reason}") and child.restarts == 0
