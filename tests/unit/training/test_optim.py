"""The width rule of the demo's rates: lr x lr_base_width / width, for every parameter group, from the widest model
inside; the demo hands a --model shape to every stage."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import BertConfig

from realm.models.retriever import RetrieverConfig
from realm.pretrain.model import RealmModel
from realm.training.optim import OptimConfig, build_optimizer, model_width, peak_lr, retriever_lr


def _realm(width: int) -> RealmModel:
    bert = BertConfig(vocab_size=50, hidden_size=width, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=2 * width, max_position_embeddings=32)  # fmt: skip
    return RealmModel.from_config(bert, RetrieverConfig(embed_dim=8, max_query_length=8, max_block_length=16))


@pytest.mark.parametrize("width", [64, 128, 256])
def test_rates_scale_inversely_with_width(width):
    model = _realm(width)
    assert model_width(model) == width
    cfg = OptimConfig(lr=1e-3, lr_base_width=128, retriever_lr_scale=0.1, warmup_steps=0)
    optimizer, _ = build_optimizer(model, cfg, 10)
    expected = 1e-3 * 128 / width
    assert peak_lr(model, cfg) == pytest.approx(expected)
    rates = sorted({round(g["lr"], 12) for g in optimizer.param_groups})
    assert rates == sorted({round(expected, 12), round(expected * 0.1, 12)})  # retriever groups keep their share
    off, _ = build_optimizer(model, OptimConfig(lr=1e-3, warmup_steps=0), 10)
    assert {g["lr"] for g in off.param_groups} == {1e-3}  # 0: the rate as given


def test_a_model_without_a_width_is_a_clear_error():
    with pytest.raises(ValueError, match="lr_base_width=0"):
        build_optimizer(torch.nn.Linear(2, 2), OptimConfig(lr=1e-3, lr_base_width=128), 10)


def test_tf32_is_enabled_for_cuda_processes_only(monkeypatch):
    from realm.training import accelerator

    # The flags are properties of torch's backend modules, set and restored through their setters: monkeypatch's
    # setattr deletes the attribute on undo since pytest 9.2, which these modules refuse.
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        assert accelerator.enable_tf32() is False and torch.backends.cuda.matmul.allow_tf32 is False
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
        assert accelerator.enable_tf32() is False and torch.backends.cuda.matmul.allow_tf32 is False  # CPU process
        monkeypatch.delenv("ACCELERATE_USE_CPU")
        assert accelerator.enable_tf32() is True
        assert torch.backends.cuda.matmul.allow_tf32 is True and torch.backends.cudnn.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _trained(implementation: str, steps: int = 5) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = _realm(32)
    cfg = OptimConfig(lr=1e-2, warmup_steps=0, retriever_lr_scale=0.1, implementation=implementation)
    optimizer, scheduler = build_optimizer(model, cfg, steps)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_the_fused_and_foreach_kernels_make_the_for_loop_update():
    """Every kernel applies AdamW with the groups' rates and decays: the same weights after 5 steps up to rounding
    (a kernel ignoring a group's lr or weight decay would be off by far more)."""
    reference = _trained("for_loop")
    torch.manual_seed(0)
    start = {name: p.detach().clone() for name, p in _realm(32).named_parameters()}
    assert max((reference[n] - start[n]).abs().max().item() for n in start) > 1e-3  # the weights moved
    for implementation in ("fused", "foreach"):
        weights = _trained(implementation)
        for name, value in reference.items():
            torch.testing.assert_close(weights[name], value, rtol=1e-5, atol=1e-6, msg=f"{implementation}: {name}")
    optimizer, _ = build_optimizer(_realm(32), OptimConfig(lr=1e-3), 10)
    assert optimizer.defaults["fused"] is True  # the default
    with pytest.raises(ValueError, match="implementation"):
        OptimConfig(implementation="apex")


def _factors(scheduler, optimizer, steps: int) -> list[tuple[float, float]]:
    """(encoder rate, retriever rate) after each of ``steps`` scheduler steps, from the step-0 rates on."""
    def rates():
        encoder = next(g["lr"] for g in optimizer.param_groups if not g["retriever"])
        return encoder, retriever_lr(optimizer)

    seen = [rates()]
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        seen.append(rates())
    return seen


@pytest.mark.parametrize("schedule", ["linear", "wsd"])
def test_the_retriever_warms_up_on_its_own_schedule(schedule):
    """optim.retriever_warmup_steps: the embedders' rate rises over its own steps to lr x retriever_lr_scale, then
    follows the same decay; the encoder's rate is the schedule it would be without the option."""
    model = _realm(32)
    common = dict(lr=1e-3, warmup_steps=2, retriever_lr_scale=0.5, schedule=schedule, decay_steps=4)
    plain = _factors(*reversed(build_optimizer(model, OptimConfig(**common), 10)), 10)
    optimizer, scheduler = build_optimizer(model, OptimConfig(**common, retriever_warmup_steps=5), 10)
    seen = _factors(scheduler, optimizer, 10)
    assert [e for e, _ in seen] == pytest.approx([e for e, _ in plain])  # the encoder is untouched
    assert [r for _, r in plain][:3] == pytest.approx([0.0, 0.25e-3, 0.5e-3])  # default: the encoder's warm-up
    retriever = [r for _, r in seen]
    assert retriever[:6] == pytest.approx([0.5e-3 * s / 5 for s in range(6)])  # 5 steps to its own peak
    decay_start = 5 if schedule == "linear" else 6  # linear decays from the end of the warm-up, wsd over the last 4
    assert retriever[decay_start] == pytest.approx(0.5e-3) and retriever[10] == 0.0
    assert all(a >= b for a, b in zip(retriever[5:], retriever[6:]))


@pytest.mark.parametrize("schedule", ["linear", "wsd"])
def test_a_delayed_retriever_is_still_until_its_start_then_warms_up(schedule):
    """optim.retriever_delay_steps: the embedders' rate is 0 for the first steps, then rises over
    retriever_warmup_steps and decays to 0 at the last step as before; the encoder's schedule is untouched."""
    model = _realm(32)
    common = dict(lr=1e-3, warmup_steps=2, retriever_lr_scale=0.5, schedule=schedule, decay_steps=3)
    plain = _factors(*reversed(build_optimizer(model, OptimConfig(**common), 12)), 12)
    optimizer, scheduler = build_optimizer(model, OptimConfig(**common, retriever_warmup_steps=4,
                                                              retriever_delay_steps=3), 12)  # fmt: skip
    seen = _factors(scheduler, optimizer, 12)
    assert [e for e, _ in seen] == pytest.approx([e for e, _ in plain])
    retriever = [r for _, r in seen]
    assert retriever[:4] == [0.0] * 4  # still through step 3
    assert retriever[3:8] == pytest.approx([0.5e-3 * s / 4 for s in range(5)])  # then 4 steps to its peak
    assert retriever[9 if schedule == "wsd" else 7] == pytest.approx(0.5e-3) and retriever[12] == 0.0
    assert all(a >= b for a, b in zip(retriever[7:], retriever[8:]))


def test_the_linear_schedule_is_transformers_linear_warmup_decay():
    from transformers import get_linear_schedule_with_warmup

    model = torch.nn.Linear(2, 2)
    optimizer, scheduler = build_optimizer(model, OptimConfig(lr=1.0, warmup_steps=3, lr_base_width=0), 9)
    reference = get_linear_schedule_with_warmup(torch.optim.SGD(model.parameters(), lr=1.0), 3, 9)
    for step in range(12):
        assert scheduler.lr_lambdas[0](step) == pytest.approx(reference.lr_lambdas[0](step)), step


def _resumed(state: dict, cfg: OptimConfig, max_steps: int):
    """A scheduler built from ``cfg`` and loaded with ``state`` after a JSON round trip, as realm.training.checkpoint
    saves and loads it."""
    optimizer, scheduler = build_optimizer(_realm(32), cfg, max_steps)
    scheduler.load_state_dict(json.loads(json.dumps(state)))
    return optimizer, scheduler


def test_a_checkpoint_restores_the_step_and_the_config_the_schedules():
    """The scheduler's state is saved as JSON: a resume continues at the saved step, each group on the schedule its
    config builds, so a run resumed with more max_steps extends its decay (with the schedule's parameters restored
    from the checkpoint, the rate stayed at 0 after the old last step)."""
    cfg = OptimConfig(lr=1.0, warmup_steps=2, retriever_warmup_steps=5, lr_base_width=0)
    optimizer, scheduler = build_optimizer(_realm(32), cfg, 6)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    same_optimizer, same = _resumed(scheduler.state_dict(), cfg, 6)
    assert same.last_epoch == 3 and same.get_last_lr() == pytest.approx(scheduler.get_last_lr())
    factors = {g["retriever"]: f(3) for f, g in zip(same.lr_lambdas, same_optimizer.param_groups)}
    assert factors == {False: pytest.approx((6 - 3) / (6 - 2)), True: pytest.approx(3 / 5)}  # retriever warming up
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr() == [0.0] * len(scheduler.get_last_lr())  # the 6-step run ends at 0
    longer_optimizer, longer = _resumed(scheduler.state_dict(), cfg, 8)
    longer_optimizer.step()
    longer.step()
    assert retriever_lr(longer_optimizer) == pytest.approx((8 - 7) / (8 - 5))  # decaying to 0 at the new step 8
    assert longer.get_last_lr()[0] == pytest.approx((8 - 7) / (8 - 2))


def test_a_checkpoint_written_with_schedule_parameters_still_loads():
    """Checkpoints written before the factors were partials hold each factor's parameters; they load, and the
    config's schedule applies."""
    cfg = OptimConfig(lr=1.0, warmup_steps=2, lr_base_width=0)
    _, scheduler = build_optimizer(_realm(32), cfg, 10)
    state = scheduler.state_dict() | {"last_epoch": 5, "_step_count": 6}
    state["lr_lambdas"] = [{"warmup": 2, "decay_start": 2, "max_steps": 6}] * len(state["lr_lambdas"])
    _, resumed = _resumed(state, cfg, 10)
    assert resumed.last_epoch == 5 and resumed.lr_lambdas[0](5) == pytest.approx((10 - 5) / (10 - 2))


def test_a_negative_retriever_warmup_or_delay_is_refused():
    with pytest.raises(ValueError, match="retriever_warmup_steps"):
        OptimConfig(retriever_warmup_steps=-1)
    with pytest.raises(ValueError, match="retriever_delay_steps"):
        OptimConfig(retriever_delay_steps=-1)


@pytest.mark.parametrize("field", ["lr", "retriever_lr_scale", "max_grad_norm", "weight_decay"])
def test_an_optim_config_built_in_python_refuses_nan(field):
    """The config files are checked for finite floats; an OptimConfig built in code must not let NaN through either
    (``lr <= 0`` is False for NaN, and a NaN max_grad_norm turned clipping off)."""
    with pytest.raises(ValueError):
        OptimConfig(**{field: float("nan")})
