"""A tiny generated world (64 entities), its vocabulary and blocks, shared by the end-to-end tests."""

from pathlib import Path

import pytest

from realm.pipeline.synthetic import make_world_data as make_world


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory) -> dict[str, Path]:
    return make_world(
        tmp_path_factory.mktemp("tiny_world"), seed=3, num_entities=64, vocab_size=2000, max_block_length=48
    )


@pytest.fixture(scope="session")
def qa_world(tmp_path_factory) -> dict[str, Path]:
    return make_world(tmp_path_factory.mktemp("qa_world"), seed=5, num_entities=12, vocab_size=600, max_block_length=64)
