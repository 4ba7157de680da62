"""The N-process builder, really started as two CPU processes over gloo (DESIGN.md section 3: ``accelerate launch
--multi_gpu ... `` with ACCELERATE_USE_CPU=true, or ``torchrun --standalone``): it publishes what the 1-process
builder publishes, and a rank SIGKILLed mid-shard is not taken as done; the next run redoes that shard only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import datasets
import numpy as np
import psutil
import pytest
import torch
from transformers import AutoTokenizer

from realm.data.packing import SpecialIds
from realm.index import versions
from realm.index.embedding import embed_blocks
from realm.index.shards import SHARDS_PREFIX, read_marker
from realm.index_builder.watch import IndexBuilderConfig, run_builder
from realm.models.retriever import Retriever
from realm.run import layout, live_index, publication
from tests.helpers import MAX_BLOCK_LENGTH, ROOT, export_tiny, make_run, publish_index

REPO = ROOT

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
        "ACCELERATE_USE_CPU": "true",  # note: without it accelerate's launcher starts processes that never meet
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _builder_args(run_dir: Path, *extra: str) -> list[str]:
    return [
        "-m",
        "realm.index_builder.watch",
        "--config",
        str(REPO / "configs/index/tiny.yaml"),
        "--run_dir",
        str(run_dir),
        "--once=true",
        "--precision=fp32",  # note: the embeddings are compared with an fp32 forward in this process, to 1e-5
        "--enable_distributed=true",
        "--collective_timeout_s=60",
        *extra,
    ]


def _accelerate(run_dir: Path, *extra: str) -> list[str]:
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    return [*launch, "--main_process_port", str(_free_port()), *_builder_args(run_dir, *extra)]


def _torchrun(run_dir: Path, *extra: str) -> list[str]:
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    return [*launch, *_builder_args(run_dir, *extra)]


def _run(cmd: list[str], timeout: float = 240) -> None:
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd[2]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


def _reference(run_dir: Path, step: int) -> np.ndarray:
    """Every block embedded in this process by the export's document embedder."""
    export_path = layout.retriever_dir(run_dir) / publication.folder_name(layout.RETRIEVER_PREFIX, step)
    export = publication.read_manifest(export_path)
    embedder = Retriever.from_pretrained(export_path).doc_embedder
    blocks = datasets.load_from_disk(export["blocks"])
    out = np.zeros((len(blocks), embedder.projection.out_features), dtype=np.float32)
    special = SpecialIds.of(AutoTokenizer.from_pretrained(export["tokenizer"]))
    embed_blocks(embedder, blocks, special, MAX_BLOCK_LENGTH, 100, out)
    return out


def _no_leftovers(run_dir: Path) -> bool:
    return not [p for p in layout.index_dir(run_dir).iterdir() if p.name.startswith((publication.STAGING_PREFIX, SHARDS_PREFIX))]


def test_two_process_builder_publishes_what_the_one_process_builder_does(tmp_path):
    run_dir, blocks, tokenizer = make_run(tmp_path, 300, max_body=40)
    alone = tmp_path / "alone"
    export_tiny(run_dir, 5, blocks, tokenizer)
    export_tiny(alone, 5, blocks, tokenizer)  # same seed, same weights
    threads = torch.get_num_threads()
    try:
        assert run_builder(IndexBuilderConfig(run_dir=str(alone), once=True, batch_size=7, num_threads=1,
                                           precision="fp32")) == 1
    finally:
        torch.set_num_threads(threads)

    _run(_accelerate(run_dir, "--batch_size=5"))

    two = versions.load_index_version(live_index.current_index_version(run_dir))
    one = versions.load_index_version(live_index.current_index_version(alone))
    assert two.manifest["builder_processes"] == 2, "the launcher did not start two processes"
    for field in ("step", "num_vectors", "dim", "factory", "corpus_fingerprint", "weights_sha256"):
        assert two.manifest[field] == one.manifest[field], field
    np.testing.assert_allclose(np.asarray(two.embeddings()), np.asarray(one.embeddings()), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(two.block_ids, one.block_ids)
    queries = torch.randn(20, 16, generator=torch.Generator().manual_seed(0))
    (s2, i2), (s1, i1) = two.search(queries, 10), one.search(queries, 10)
    assert torch.equal(i2, i1)
    torch.testing.assert_close(s2, s1, atol=1e-4, rtol=1e-5)
    assert _no_leftovers(run_dir)


def _pid_of_rank(launcher: subprocess.Popen, rank: int) -> int:
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            if child.environ().get("RANK") == str(rank):
                return child.pid
        except psutil.Error:
            continue
    raise AssertionError(f"no process of rank {rank} under the launcher")


def test_rank_killed_mid_shard_is_not_taken_as_done_and_the_next_run_finishes_the_job(tmp_path):
    run_dir, blocks, tokenizer = make_run(tmp_path, 1000)
    live = publish_index(run_dir, np.zeros((1000, 16), dtype=np.float32), 1)
    live_index.set_current_index(run_dir, live)
    export_tiny(run_dir, 2, blocks, tokenizer)
    weights = publication.read_manifest(layout.retriever_dir(run_dir) / "step-00000002")["weights_sha256"]
    shards = layout.index_dir(run_dir) / f"{SHARDS_PREFIX}{weights}"

    launcher = subprocess.Popen(
        _torchrun(run_dir, "--batch_size=1"), cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 180
        while not (shards / "shard-00001-of-00002.npy").exists():  # rank 1 has started its shard
            assert launcher.poll() is None, launcher.stdout.read().decode()[-4000:]
            assert time.monotonic() < deadline, "rank 1 never started its shard"
            time.sleep(0.005)
        os.kill(_pid_of_rank(launcher, 1), signal.SIGKILL)
        launcher.communicate(timeout=120)
    finally:
        launcher.kill()
    assert launcher.returncode != 0
    assert read_marker(shards, 1, 2) is None, "rank 1 finished before it was killed; the test needs a bigger shard"
    rank0_finished = read_marker(shards, 0, 2) is not None
    # nothing was published: the live index is the old one
    assert publication.read_pointer(layout.index_dir(run_dir) / publication.CURRENT) == "v-00000001"
    assert [s for s, _ in publication.list_published(layout.index_dir(run_dir), layout.INDEX_PREFIX)] == [1]

    _run(_torchrun(run_dir, "--batch_size=100"))

    published = versions.load_index_version(live_index.current_index_version(run_dir))
    assert published.step == 2 and published.manifest["builder_processes"] == 2
    assert published.manifest["reused_shards"] == ([0] if rank0_finished else [])  # rank 1's shard was redone
    np.testing.assert_allclose(np.asarray(published.embeddings()), _reference(run_dir, 2), atol=1e-5, rtol=0)
    assert _no_leftovers(run_dir)
