"""The kNN-LM commands as users run them: a datastore built by 2 processes equals one built by 1, a builder killed
mid-build publishes nothing (and the rerun does), evaluate / sweep / report write what they document, and bad input
is one line and exit code 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from realm.knnlm.datastore import current_version, load_datastore
from realm.run import publication
from tests.helpers import ROOT, run_module, subprocess_env

LM_ARGS = ["--lm.context_length=32", "--lm.stride=16"]


def _build_args(lm: Path, corpus: Path, out: Path, *extra: str) -> list[str]:
    return [f"--lm.model={lm}", f"--corpus.path={corpus}", f"--out={out}", *LM_ARGS, *extra]


def test_two_builder_processes_build_the_same_datastore_as_one(tiny_lm, tmp_path):
    lm, train, _ = tiny_lm
    run_module("realm.knnlm_jobs.build_datastore", *_build_args(lm, train, tmp_path / "one"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "realm.knnlm_jobs.build_datastore",
           *_build_args(lm, train, tmp_path / "two", "--enable_distributed=true", "--num_threads=1")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    one, two = load_datastore(tmp_path / "one"), load_datastore(tmp_path / "two")
    assert two.manifest["builder_processes"] == 2 and one.manifest["builder_processes"] == 1
    assert np.array_equal(one.values, two.values)
    np.testing.assert_allclose(np.asarray(one.keys, np.float32), np.asarray(two.keys, np.float32), atol=2e-3)
    assert one.manifest["corpus_sha256"] == two.manifest["corpus_sha256"]
    assert not list((tmp_path / "two").glob(".shards-*"))  # removed once published


def test_a_killed_builder_publishes_nothing_and_a_rerun_does(tiny_lm, tmp_path):
    lm, train, _ = tiny_lm
    out = tmp_path / "ds"
    # note: one window per forward pass, so the build takes long enough to be killed inside its shard
    cmd = [sys.executable, "-m", "realm.knnlm_jobs.build_datastore", *_build_args(lm, train, out, "--lm.batch_size=1")]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(out.glob(".shards-*/*.npy")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "the builder finished before it could be killed: " + proc.stderr.read().decode()[-2000:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert current_version(out) is None and not (out / publication.CURRENT).exists()
    assert not list(out.glob(".shards-*/*.json"))  # the torn shard has no marker: never taken as done
    with pytest.raises(Exception, match="holds no published datastore"):
        load_datastore(out)
    run_module("realm.knnlm_jobs.build_datastore", *_build_args(lm, train, out))
    store = load_datastore(out)
    assert store.num_entries > 0 and store.manifest["reused_shards"] == []


def test_evaluate_sweep_and_report_write_what_they_document(tiny_lm, tmp_path):
    lm, train, heldout = tiny_lm
    run_module("realm.knnlm_jobs.build_datastore", *_build_args(lm, train, tmp_path / "ds"))
    common = [f"--lm.model={lm}", f"--datastore={tmp_path / 'ds'}", f"--data.path={heldout}", *LM_ARGS]
    run_module("realm.knnlm_jobs.evaluate_lm", *common, f"--out={tmp_path / 'eval'}", "--knn.k=64")
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "eval" / "tokens.jsonl").read_text().splitlines()]
    assert len(records) == summary["tokens"] > 0
    assert set(records[0]) == {"doc", "position", "token", "p_lm", "p_knn", "lambda", "p"}
    mean_log_p = sum(np.log(r["p"]) for r in records) / len(records)
    assert np.isclose(np.exp(-mean_log_p), summary["ppl_knnlm"], rtol=1e-4)  # the records are the perplexity
    assert summary["datastore"]["key_type"] == "ffn_input" and summary["k"] == 64
    run_module("realm.knnlm_jobs.sweep", *common, f"--out={tmp_path / 'sweep'}", "--sweep.ks=[4,16]",
               "--sweep.taus=[1.0,5.0]",
               "--sweep.lambdas=[0.0,0.25,0.5]")  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "sweep" / "sweep.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 3
    assert all(r["ppl_knnlm"] == r["ppl_lm"] for r in rows if r["lambda"] == 0.0)
    run_module("realm.cli.main", "report", str(tmp_path / "sweep"))
    page = (tmp_path / "sweep" / "report.html").read_text()
    for axis in ("lambda", "k", "tau"):
        assert f'data-metric="ppl_knnlm_by_{axis}"' in page
    run_module("realm.cli.main", "report", str(tmp_path / "eval"))
    assert 'class="bucket"' in (tmp_path / "eval" / "report.html").read_text()


@pytest.mark.parametrize(
    "args,message",
    [
        (["knnlm", "build"], "required option(s) missing: --out, --corpus.path, --lm.model"),
        (["knnlm", "build", "--out=X", "--corpus.path=Y", "--lm.model=Z", "--datastore.key_type=ffn_middle"],
         "key_type must be one of ffn_input, attn_output, ffn_output"),
        (["knnlm", "evaluate", "--out=X", "--data.path=Y", "--lm.model=/no/such/lm"], "not found"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_code_2(args, message):
    proc = subprocess.run([sys.executable, "-m", "realm.cli.main", *args], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert message in proc.stderr and "Traceback" not in proc.stderr
