"""realm.core.precision: what ``auto`` resolves to on each device, the attention kernel each precision gets, and
that a job's Accelerator computes in the precision its config names (bf16 autocast over fp32 weights on CPU)."""

import pytest
import torch
from transformers import BertConfig

from realm.core import precision
from realm.core.errors import ConfigError
from realm.core.tracking import TrackingConfig
from realm.models.retriever import RetrieverConfig
from realm.pretrain.model import RealmModel
from realm.training.accelerator import build_accelerator, use_fast_kernels
from realm.training.optim import OptimConfig
from realm.training.scaffold import LoopConfig, TrainingLoop

TINY = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip


@pytest.mark.parametrize(
    "flags, expected",
    [({"avx512f", "avx512_bf16"}, "bf16"), ({"amx_bf16", "amx_tile"}, "bf16"), ({"avx512f"}, "fp32"), (set(), "fp32")],
)
def test_auto_is_bf16_on_cpus_with_native_bf16_for_no_grad_work_only(monkeypatch, flags, expected):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(flags))
    assert precision.resolve_precision("auto", "cpu") == expected  # no-grad work: the builder's embedding
    # parity not shown: experiments/demo/log/2026-11-28-precision.md
    assert precision.resolve_precision("auto", "cpu", training=True) == "fp32"
    assert precision.resolve_precision("fp32", "cpu") == "fp32" and precision.resolve_precision("bf16", "cpu") == "bf16"


@pytest.mark.parametrize("flags, warned", [({"avx2", "fma"}, True), ({"avx512f", "avx512_bf16"}, False)])
def test_bf16_asked_for_on_a_cpu_without_bf16_instructions_warns_once(monkeypatch, caplog, flags, warned):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(flags))
    precision.warn_emulated_bf16.cache_clear()
    try:
        with caplog.at_level("WARNING", logger=precision.__name__):
            for _ in range(3):  # every job of a process resolves its precision: one warning is enough
                assert precision.resolve_precision("bf16", "cpu", training=True) == "bf16"
            assert precision.resolve_precision("auto", "cpu") == ("bf16" if not warned else "fp32")
        emulated = [r for r in caplog.records if "without a bf16 instruction" in r.getMessage()]
        assert len(emulated) == (1 if warned else 0)
    finally:
        precision.warn_emulated_bf16.cache_clear()


def test_auto_on_a_gpu_follows_its_bf16_support(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: not including_emulation)
    assert precision.resolve_precision("auto", "cuda") == "bf16"
    assert precision.resolve_precision("auto", "cuda", training=True) == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    assert precision.resolve_precision("auto", "cuda") == "fp32"
    assert precision.resolve_precision("fp16", "cuda") == "fp16"


def test_cpu_flags_are_read_from_cpuinfo(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n\nprocessor\t: 1\nflags\t: fpu\n")
    monkeypatch.setattr(precision, "CPUINFO", info)
    precision.cpu_flags.cache_clear()
    try:
        assert precision.cpu_flags() == {"fpu", "sse2", "avx512f", "avx512_bf16"}
        monkeypatch.setattr(precision, "CPUINFO", tmp_path / "missing")
        precision.cpu_flags.cache_clear()
        assert precision.cpu_flags() == frozenset()
    finally:
        precision.cpu_flags.cache_clear()


@pytest.mark.parametrize("bad", ["fp8", "", "BF16"])
def test_unknown_precisions_and_fp16_on_cpu_are_refused(bad):
    with pytest.raises(ValueError, match="precision"):
        precision.resolve_precision(bad, "cpu")
    with pytest.raises(ValueError, match="precision"):
        LoopConfig(precision=bad)
    with pytest.raises(ConfigError, match="fp16 needs a CUDA GPU"):  # a user error: one line, exit 2
        precision.resolve_precision("fp16", "cpu")


def test_attention_kernel_is_eager_for_short_bf16_sequences_on_cpu_and_sdpa_elsewhere():
    demo, paper = RetrieverConfig(max_query_length=16, max_block_length=96), RetrieverConfig()  # 96 + 288
    assert (demo.max_reader_length, paper.max_reader_length) == (112, 384)
    assert precision.attention_implementation("cpu", "bf16", demo.max_reader_length) == "eager"
    assert precision.attention_implementation("cpu", "bf16", paper.max_reader_length) == "sdpa"
    assert precision.attention_implementation("cpu", "bf16", 128) == "eager"
    assert precision.attention_implementation("cpu", "bf16", precision.EAGER_MAX_LENGTH + 1) == "sdpa"
    assert precision.attention_implementation("cpu", "bf16", 0) == "sdpa"  # length unknown
    assert precision.attention_implementation("cpu", "fp32", 128) == "sdpa"
    assert precision.attention_implementation("cuda", "bf16", 128) == "sdpa"


def test_set_attention_reaches_every_tower_and_leaves_the_outputs_unchanged():
    torch.manual_seed(0)
    model = RealmModel.from_config(TINY, RetrieverConfig(embed_dim=8, share_embedders=False)).eval()
    ids, mask = torch.randint(5, 64, (3, 7)), torch.ones(3, 7, dtype=torch.long)
    mask[0, 4:] = 0
    before = model.retriever.embed_queries(ids, mask)
    assert precision.set_attention(model, "cpu", "bf16", 64) == "eager"
    towers = [model.retriever.query_embedder, model.retriever.doc_embedder, model.encoder.mlm]
    assert [t.config._attn_implementation for t in towers] == ["eager"] * 3
    torch.testing.assert_close(model.retriever.embed_queries(ids, mask), before, rtol=1e-5, atol=1e-6)
    precision.set_attention(model, "cpu", "fp32")
    assert [t.config._attn_implementation for t in towers] == ["sdpa"] * 3


def test_a_bf16_job_trains_under_autocast_with_fp32_weights_and_optimizer_state(tmp_path):
    accelerator = build_accelerator(TrackingConfig(), tmp_path, "bf16")
    assert accelerator.mixed_precision == "bf16"
    torch.manual_seed(0)
    model = RealmModel.from_config(TINY, RetrieverConfig(embed_dim=8)).retriever.query_embedder
    loop = TrainingLoop.prepare(accelerator, LoopConfig(run_dir=str(tmp_path), max_steps=2), OptimConfig(lr=1e-3),
                                model, {}, max_length=6)  # fmt: skip
    # the job's model got the kernel of its precision and device (eager on CPU at this length; a GPU keeps sdpa)
    want = "eager" if accelerator.device.type == "cpu" else "sdpa"
    assert loop.model.config._attn_implementation == want
    ids, mask = torch.randint(5, 64, (4, 6)), torch.ones(4, 6, dtype=torch.long)
    seen = []
    loop.model.projection.register_forward_hook(lambda module, args, output: seen.append(output.dtype))
    out = loop.model(ids, mask)
    assert seen == [torch.bfloat16]  # the prepared forward runs under bf16 autocast (its output upcast after)
    out.float().pow(2).sum().backward()
    loop.optimizer.step()
    assert all(p.dtype == torch.float32 for p in loop.model.parameters())
    states = [v for s in loop.optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim()]
    assert states and all(v.dtype == torch.float32 for v in states)
    # the next job of the same process may run another precision (the pipelines run every stage in one process)
    assert build_accelerator(TrackingConfig(), tmp_path, "fp32").mixed_precision == "no"
    use_fast_kernels(loop.model, build_accelerator(TrackingConfig(), tmp_path, "fp32"), 6)
    assert loop.model.config._attn_implementation == "sdpa"


def test_every_training_job_records_its_precision_in_its_config(tmp_path):
    from realm.core.config import load_config, save_config, to_dict
    from realm.finetune.train import FinetuneConfig
    from realm.pretrain.config import PretrainConfig
    from realm.warmstart.ict_train import ICTConfig
    from realm.warmstart.warmup import WarmupConfig

    for cls in (PretrainConfig, FinetuneConfig, ICTConfig, WarmupConfig):
        assert to_dict(cls())["train"]["precision"] == "auto", cls
    cfg = load_config(PretrainConfig, overrides=["--train.precision=bf16"])
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(PretrainConfig, tmp_path / "config.yaml").train.precision == "bf16"


def test_the_pipelines_give_every_stage_their_precision(tmp_path):
    from realm.pipeline.demo import DemoConfig, finetune_config, pretrain_config
    from realm.pipeline.warm_start import stage_config
    from realm.warmstart.ict_train import ICTConfig

    cfg = DemoConfig(out=str(tmp_path), precision="fp32")
    paths = {name: tmp_path / name for name in ("tokenizer", "blocks", "pretrain", "heldout", "questions_train",
                                                "questions_heldout")}  # fmt: skip
    assert pretrain_config(cfg, paths).train.precision == "fp32"
    assert finetune_config(cfg, paths).train.precision == "fp32"
    ict = stage_config(ICTConfig, cfg.warm_start.ict_config, tmp_path / "ict", 0, {}, 1, {}, "bf16")
    assert ict.train.precision == "bf16"
