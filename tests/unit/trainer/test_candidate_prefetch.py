"""The candidate pipeline: which weights each micro-batch is searched with, on which thread, and what resume keeps."""

import threading

import pytest
import torch

from realm.pretrain.batch import Candidates, RealmBatch
from realm.trainer.candidate_prefetch import CandidatePipeline

CPU = torch.device("cpu")


def host_batch(first_id: int, size: int = 2) -> RealmBatch:
    ids = torch.arange(first_id, first_id + size)
    return RealmBatch(
        query_input_ids=ids[:, None].repeat(1, 3),
        query_attention_mask=torch.ones(size, 3, dtype=torch.long),
        mask_positions=torch.ones(size, 1, dtype=torch.long),
        target_ids=torch.ones(size, 1, dtype=torch.long),
        target_mask=torch.ones(size, 1, dtype=torch.long),
        source_uid_hashes=torch.zeros(size, dtype=torch.long),
        example_ids=ids,
    )


def with_choice(batch: RealmBatch, chosen: torch.Tensor) -> RealmBatch:
    """A stand-in for the packing: candidates whose block ids are ``chosen`` (other fields empty)."""
    empty = torch.zeros(0)
    block_ids = torch.cat([torch.full((batch.size, 1), -1), chosen], dim=1)
    batch.candidates = Candidates(block_ids, block_ids >= 0, *[empty] * 7)
    return batch


class FakeRetrieval:
    """Records, per batch (by its first example id), the weight version its queries were embedded with and the
    thread its search ran on; the "search" picks block id = 100 x version + example id."""

    def __init__(self) -> None:
        self.version = 0  # bumped by the test where the trainer would step the optimizer
        self.embedded_at: dict[int, int] = {}
        self.searched_on: dict[int, str] = {}
        self.chosen_given: dict[int, torch.Tensor | None] = {}
        self.host_hook = lambda batch: None

    def __call__(self, batch: RealmBatch, chosen: torch.Tensor | None):
        key = int(batch.example_ids[0])
        self.chosen_given[key] = chosen
        version = self.version
        self.embedded_at[key] = version

        def host_part() -> RealmBatch:
            self.host_hook(batch)
            self.searched_on[key] = threading.current_thread().name
            ids = chosen if chosen is not None else (100 * version + batch.example_ids)[:, None]
            return with_choice(batch, ids)

        return host_part


def run_steps(pipeline: CandidatePipeline, fake: FakeRetrieval, steps: list[list[RealmBatch]]) -> list[RealmBatch]:
    """Drives the pipeline as the trainer does: each step's micro-batches, the next step's first searched ahead."""
    trained = []
    for s, micro_batches in enumerate(steps):
        following = steps[s + 1][0] if s + 1 < len(steps) else None
        trained += list(pipeline.batches(micro_batches, following))
        fake.version += 1  # the optimizer step
    return trained


def test_without_prefetch_every_micro_batch_is_searched_with_the_current_weights_in_the_training_thread():
    fake = FakeRetrieval()
    pipeline = CandidatePipeline(fake, CPU, prefetch=False)
    steps = [[host_batch(0), host_batch(10)], [host_batch(20), host_batch(30)]]
    trained = run_steps(pipeline, fake, steps)
    assert fake.embedded_at == {0: 0, 10: 0, 20: 1, 30: 1}
    assert set(fake.searched_on.values()) == {threading.current_thread().name}
    assert [int(b.candidates.block_ids[0, 1]) for b in trained] == [0, 10, 120, 130]


def test_prefetch_searches_in_a_worker_one_step_stale_only_across_steps():
    fake = FakeRetrieval()
    pipeline = CandidatePipeline(fake, CPU, prefetch=True)
    steps = [[host_batch(0), host_batch(10)], [host_batch(20), host_batch(30)], [host_batch(40), host_batch(50)]]
    try:
        trained = run_steps(pipeline, fake, steps)
    finally:
        pipeline.close()
    # within a step the weights are those of the step; a step's first micro-batch was searched during the step before
    assert fake.embedded_at == {0: 0, 10: 0, 20: 0, 30: 1, 40: 1, 50: 2}
    assert fake.searched_on[0] == threading.current_thread().name  # nothing was ahead of the very first
    assert all(fake.searched_on[k].startswith("candidates") for k in (10, 20, 30, 40, 50))
    assert [b.example_ids.tolist() for b in trained] == [b.example_ids.tolist() for step in steps for b in step]
    assert [int(b.candidates.block_ids[0, 1]) for b in trained] == [0, 10, 20, 130, 140, 250]


def test_the_next_search_runs_while_the_caller_trains_on_the_current_batch():
    fake = FakeRetrieval()
    started, training_done = threading.Event(), threading.Event()

    def hook(batch):
        if int(batch.example_ids[0]) == 10:
            started.set()
            training_done.wait(timeout=10)

    fake.host_hook = hook
    pipeline = CandidatePipeline(fake, CPU, prefetch=True)
    try:
        batches = pipeline.batches([host_batch(0), host_batch(10)])
        next(batches)
        # the caller's forward and backward of batch 0: the search of batch 10 is already under way
        assert started.wait(timeout=10)
        training_done.set()
        assert next(batches).example_ids.tolist() == [10, 11]
    finally:
        pipeline.close()


def test_a_failed_search_is_raised_in_the_training_thread():
    fake = FakeRetrieval()

    def fail(batch):
        if int(batch.example_ids[0]) == 10:
            raise RuntimeError("search broke")

    fake.host_hook = fail
    pipeline = CandidatePipeline(fake, CPU, prefetch=True)
    batches = pipeline.batches([host_batch(0), host_batch(10)])
    next(batches)
    with pytest.raises(RuntimeError, match="search broke"):
        next(batches)
    pipeline.close()


def test_resume_attaches_the_saved_choice_to_its_own_batch_only(caplog):
    fake = FakeRetrieval()
    pipeline = CandidatePipeline(fake, CPU, prefetch=True)
    list(pipeline.batches([host_batch(0)], following=host_batch(10)))
    choice = pipeline.pending_choice()
    pipeline.close()
    assert choice["example_ids"].tolist() == [10, 11] and choice["block_ids"].tolist() == [[10], [11]]

    resumed = FakeRetrieval()
    resumed.version = 7  # the checkpoint's weights: searching with them would choose 710, 711
    pipeline = CandidatePipeline(resumed, CPU, prefetch=True)
    pipeline.restore(choice)
    (batch,) = pipeline.batches([host_batch(10)])
    assert batch.candidates.block_ids[:, 1].tolist() == [10, 11]  # the uninterrupted run's choice, not a new search
    pipeline.close()

    other = CandidatePipeline(resumed, CPU, prefetch=True)
    other.restore(choice)
    (batch,) = other.batches([host_batch(20)])  # e.g. another number of processes: other examples come next
    other.close()
    assert batch.candidates.block_ids[:, 1].tolist() == [720, 721] and resumed.chosen_given[20] is None
    assert "searching them with the restored weights" in caplog.text


def test_the_worker_pins_for_this_process_s_gpu(monkeypatch):
    """The worker thread makes the pipeline's CUDA device current before it pins anything (a new thread starts on
    device 0). The logic only: torch.cuda is stood in for."""
    made_current = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: made_current.append((threading.current_thread().name, d)))
    pipeline = CandidatePipeline(FakeRetrieval(), torch.device("cuda", 3), prefetch=True)
    pipeline._pool.submit(lambda: None).result()  # starts the worker thread
    pipeline.close()
    assert made_current == [("candidates_0", torch.device("cuda", 3))]
