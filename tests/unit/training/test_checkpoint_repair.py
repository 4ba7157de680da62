"""Torn or leftover checkpoint state is repaired at start: staging folders a kill left are removed, and a step folder
without a readable manifest (never published) no longer blocks the next save of that step."""

import torch
from accelerate import Accelerator

from realm.run.layout import checkpoints_dir
from realm.run.publication import manifest_problems, read_manifest
from realm.training.checkpoint import resolve_resume, save_checkpoint
from realm.training.optim import OptimConfig
from realm.training.scaffold import LoopConfig, TrainingLoop


def _loop(tmp_path) -> TrainingLoop:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    cfg = LoopConfig(run_dir=str(tmp_path), max_steps=4, save_interval=2)
    return TrainingLoop(accelerator, cfg, OptimConfig(), model, optimizer, scheduler, cfg)


def test_leftover_staging_is_removed_and_a_torn_step_folder_does_not_block_saving(tmp_path):
    parent = checkpoints_dir(tmp_path)
    (parent / ".staging-step-00000002" / "junk").mkdir(parents=True)  # a kill mid-save
    (parent / ".staging-1234").mkdir()  # a kill mid-prune
    torn = parent / "step-00000002"
    torn.mkdir()
    (torn / "manifest.json").write_text('{"step": 2, "crea')  # a torn manifest
    loop = _loop(tmp_path)
    assert loop.resume() == {} and loop.step == 0  # the torn folder is not a checkpoint
    assert not [p for p in parent.iterdir() if p.name.startswith(".staging")]
    loop.step = 2
    final = loop.save({"note": "x"})
    loop.close()
    assert read_manifest(final)["step"] == 2 and manifest_problems(final) == []
    assert resolve_resume(tmp_path, "auto") == final


def test_every_checkpoint_file_is_listed_with_its_checksum(tmp_path):
    loop = _loop(tmp_path)
    loop.step = 2
    final = save_checkpoint(loop.accelerator, tmp_path, 2, {}, loop.config, 2, loop.scheduler)
    loop.close()
    files = read_manifest(final)["files"]
    assert {"model.safetensors", "optimizer.bin", "trainer_state.json", "scheduler.json", "config.yaml"} <= set(files)
    assert all(entry["size"] > 0 and len(entry["sha256"]) == 64 for entry in files.values())


def test_a_process_s_own_tensors_are_checkpointed_listed_and_restored(tmp_path):
    loop = _loop(tmp_path)
    loop.step = 2
    choice = {"example_ids": torch.arange(4), "block_ids": torch.tensor([[3, 1], [0, -1], [2, 2], [7, 5]])}
    final = loop.save({}, rank_tensors=choice)
    loop.close()
    assert "rank-0.safetensors" in read_manifest(final)["files"]  # checksummed like every other file

    resumed = _loop(tmp_path)
    assert resumed.resume()["step"] == 2
    assert resumed.rank_tensors.keys() == choice.keys()
    assert all(torch.equal(resumed.rank_tensors[k], v) for k, v in choice.items())
    resumed.step = 4
    resumed.save({})  # nothing of its own this time: the next resume restores none
    resumed.close()
    again = _loop(tmp_path)
    assert again.resume()["step"] == 4 and again.rank_tensors == {}
    again.close()
