"""A training loop trains its model in train mode whatever mode the start came in: transformers' ``from_pretrained``
returns a model in eval mode, a model built from a config is in train mode, and dropout must not depend on which."""

import torch
from accelerate import Accelerator
from transformers import BertConfig, BertModel

from realm.training.optim import OptimConfig
from realm.training.scaffold import LoopConfig, TrainingLoop


def test_a_start_loaded_with_from_pretrained_trains_with_its_dropout(tmp_path):
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, hidden_dropout_prob=0.5)  # fmt: skip
    BertModel(config).save_pretrained(tmp_path / "bert")
    model = BertModel.from_pretrained(tmp_path / "bert")
    assert not model.training  # the premise: a loaded model comes in eval mode
    loop = TrainingLoop.prepare(Accelerator(cpu=True), LoopConfig(run_dir=str(tmp_path / "run"), max_steps=2),
                                OptimConfig(), model, None)  # fmt: skip
    dropouts = [m for m in loop.model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(m.training for m in dropouts)
    ids = torch.tensor([[1, 5, 7, 9, 2]])
    first, second = (loop.model(input_ids=ids).last_hidden_state for _ in range(2))
    assert not torch.allclose(first, second)  # dropout is active: the same input gives two different outputs
    loop.close()
