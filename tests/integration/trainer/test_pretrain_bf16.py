"""bf16 mixed precision through accelerate (the GPU recipe), exercised on CPU: the towers run in bf16 under autocast,
the weights and the optimizer stay fp32, both towers learn, and the losses track the fp32 run's."""

import math

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState

from realm.core.config import load_config
from realm.core.logging import read_metrics
from realm.pretrain.config import PretrainConfig
from realm.trainer.pretrain_loop import Trainer
from tests.helpers import data_overrides

pytestmark = pytest.mark.slow
TINY = "configs/pretrain/tiny.yaml"


@pytest.fixture()
def fresh_accelerate_state():
    """accelerate keeps its state per process; each run here sets its own precision, and later tests get a clean one."""
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def _train(world, run_dir, precision: str) -> tuple[dict[int, float], set, dict, dict]:
    """3 steps; returns (loss by step, matmul output dtypes in both towers, parameters before, parameters after)."""
    AcceleratorState._reset_state(reset_partial_state=True)
    cfg = load_config(
        PretrainConfig,
        TINY,
        [
            f"--train.run_dir={run_dir}",
            "--train.max_steps=3",
            "--train.log_interval=1",
            "--train.save_interval=100",
            "--refresh.refresh_interval=1000",  # both runs search index v0 (fp32 builder) throughout
            *data_overrides(world),
        ],
    )
    trainer = Trainer(cfg, Accelerator(cpu=True, mixed_precision=precision))
    model = trainer.unwrapped
    seen: set[tuple[str, torch.dtype]] = set()
    # note: a Linear's output shows the autocast dtype (LayerNorm outputs, e.g. last_hidden_state, stay fp32)
    towers = [("query", model.retriever.query_embedder.bert), ("encoder", model.encoder.mlm.bert)]
    hooks = [
        bert.encoder.layer[0].intermediate.dense.register_forward_hook(
            lambda m, i, o, name=name: seen.add((name, o.dtype))
        )
        for name, bert in towers
    ]
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    try:
        trainer.run()
    finally:
        trainer.close()
        for hook in hooks:
            hook.remove()
    after = {k: v.detach().clone() for k, v in model.named_parameters()}
    losses = {r["step"]: r["train/loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "train/loss" in r}
    return losses, seen, before, after


def test_bf16_autocast_runs_both_towers_in_bf16_keeps_fp32_weights_and_tracks_fp32(
    tiny_world, tmp_path, fresh_accelerate_state
):
    fp32, seen32, _, _ = _train(tiny_world, tmp_path / "fp32", "no")
    bf16, seen16, before, after = _train(tiny_world, tmp_path / "bf16", "bf16")
    assert {dtype for _, dtype in seen32} == {torch.float32}
    assert seen16 == {("query", torch.bfloat16), ("encoder", torch.bfloat16)}  # autocast reached both towers
    assert all(p.dtype == torch.float32 for p in after.values())  # master weights and updates stay fp32
    for tower in ("retriever.query_embedder", "encoder.mlm"):
        assert any(not torch.equal(before[k], after[k]) for k in after if k.startswith(tower)), tower
    assert sorted(bf16) == sorted(fp32) == [1, 2, 3]
    for step in fp32:
        assert math.isfinite(bf16[step])
        assert abs(bf16[step] - fp32[step]) < 0.05 * fp32[step], (step, bf16[step], fp32[step])
