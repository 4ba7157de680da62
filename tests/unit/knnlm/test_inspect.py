"""Inspecting a token's neighbours (``realm.knnlm.neighbours``, ``realm knnlm inspect``) on the tiny LM: the neighbours
are the brute-force nearest keys in order with softmax weights, each one's context is the datastore text before its
key and its value the token after it, p_kNN of the target is the weight of the neighbours holding it and the mixture
is lambda p_kNN + (1 - lambda) p_LM (as evaluate's tokens.jsonl says), a datastore without provenance still gives
tokens and weights, and bad input is one clear line with exit code 2."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from realm.cli.main import main
from realm.core.errors import ArgumentError
from realm.data.corpus import CorpusConfig
from realm.knnlm import perplexity as ev
from realm.knnlm.datastore import DOC_STARTS_FILE, DatastoreConfig, current_version, load_datastore
from realm.knnlm.datastore_build import build_datastore, read_texts
from realm.knnlm.lm import LMConfig, load_causal_lm, score_documents, tokenize_documents
from realm.knnlm.neighbours import InspectConfig, inspect_positions
from realm.run import publication

LM_CFG = dict(context_length=32, stride=16, batch_size=8)
LM_ARGS = ["--lm.context_length=32", "--lm.stride=16", "--lm.batch_size=8"]


@pytest.fixture(scope="module")
def setup(tiny_lm, tmp_path_factory):
    """The LM, an exact L2 datastore of its training corpus, that corpus tokenized, and the held-out file."""
    lm, train, heldout = tiny_lm
    lm_cfg = LMConfig(model=str(lm), **LM_CFG)
    root = tmp_path_factory.mktemp("inspect") / "ds"
    build_datastore(root, lm_cfg, CorpusConfig(path=str(train)), DatastoreConfig())
    model, tokenizer = load_causal_lm(lm_cfg)
    corpus = tokenize_documents(tokenizer, read_texts(CorpusConfig(path=str(train))))
    held = tokenize_documents(tokenizer, read_texts(CorpusConfig(path=str(heldout))))
    return dict(lm=lm, lm_cfg=lm_cfg, root=root, store=load_datastore(root), model=model, tokenizer=tokenizer,
                corpus=corpus, held=held, heldout=heldout)  # fmt: skip


def _inspect(s, tokens, positions, k=20, tau=3.0, lam=0.3, context_tokens=4, store=None):
    knn_cfg, cfg = ev.KNNConfig(k=k, tau=tau, lambda_=lam), InspectConfig(context_tokens=context_tokens)
    return inspect_positions(s["model"], s["tokenizer"], store or s["store"], tokens, positions, s["lm_cfg"], knn_cfg,
                             cfg)  # fmt: skip


def _entries(corpus: list[np.ndarray]) -> list[tuple[int, int]]:
    """(document, position) of every datastore entry, enumerated: each document's tokens after its BOS, in order."""
    return [(d, p) for d, doc in enumerate(corpus) for p in range(1, len(doc))]


def test_neighbours_are_the_brute_force_nearest_keys_with_softmax_weights(setup):
    s = setup
    tokens = s["held"][0]
    positions = [1, 5, len(tokens) - 1]
    found = _inspect(s, tokens, positions, k=20, tau=3.0)
    keys = torch.cat([x.keys for x in score_documents(s["model"], [tokens], s["lm_cfg"])])  # [T, D], row p - 1
    every_key = torch.from_numpy(np.asarray(s["store"].keys, dtype=np.float32))
    exact_orders = 0
    for inspection, position in zip(found, positions):
        every = -((every_key - keys[position - 1]) ** 2).sum(-1).double()  # [N] every entry's score
        truth = every.topk(20)
        ids = [n.entry for n in inspection.neighbours]
        assert len(ids) == len(set(ids)) == 20 and [n.rank for n in inspection.neighbours] == list(range(1, 21))
        # each rank holds an entry scoring what brute force's entry of that rank scores (equal ids but for near-ties)
        torch.testing.assert_close(every[ids], truth.values, atol=2e-3, rtol=1e-5)
        clear = [i for i in truth.indices.tolist() if every[i] > truth.values[-1] + 1e-3]  # not tied with the k-th
        assert set(clear) <= set(ids)
        if (truth.values[:-1] - truth.values[1:]).min() > 1e-3:  # no near-tie: the same ids in the same order
            assert ids == truth.indices.tolist()
            exact_orders += 1
        weights = torch.tensor([n.weight for n in inspection.neighbours], dtype=torch.float64)
        expected = torch.softmax(every[ids] / 3.0, 0)
        torch.testing.assert_close(weights, expected, atol=1e-4, rtol=1e-3)
        assert abs(weights.sum().item() - 1.0) < 1e-6 and bool((weights[:-1] >= weights[1:] - 1e-7).all())
        assert all(math.isclose(n.distance, -n.score) for n in inspection.neighbours)
    # position 1 is predicted from the BOS alone, whose key every document shares: its neighbours all tie
    assert exact_orders >= 1  # (2 here; >= 1 so another CPU's rounding of a near-tie cannot fail it)


def test_each_neighbours_context_is_the_datastore_text_before_its_key_and_its_value_follows(setup):
    s = setup
    corpus, tokenizer, n = s["corpus"], s["tokenizer"], 4
    where = _entries(corpus)
    docs, positions = s["store"].locate(np.arange(s["store"].num_entries))
    assert list(zip(docs.tolist(), positions.tolist())) == where  # provenance of every entry
    found = _inspect(s, s["held"][1], None, k=16, context_tokens=n)  # every position of the text
    starts = 0
    for inspection in found:
        for neighbour in inspection.neighbours:
            d, p = where[neighbour.entry]
            assert (neighbour.doc, neighbour.position) == (d, p)
            assert neighbour.value == corpus[d][p] == s["store"].values[neighbour.entry]
            assert neighbour.token == tokenizer.decode([int(corpus[d][p])])
            with_bos, without = max(0, p - n), max(1, p - n)  # the n tokens before p; the BOS is not text
            assert neighbour.context.ids == corpus[d][with_bos:p].tolist()
            assert neighbour.context.text == tokenizer.decode(corpus[d][without:p].tolist())
            assert neighbour.context.starts_document == (p - n <= 0)
            starts += neighbour.context.starts_document
    assert 0 < starts < sum(len(i.neighbours) for i in found)  # both kinds of context were checked
    tokens = s["held"][1]
    assert found[6].context.ids == tokens[3:7].tolist() and found[0].context.ids == tokens[:1].tolist()
    assert found[6].target == tokens[7] and found[6].position == 7


def test_p_knn_is_the_weight_of_the_neighbours_holding_the_target_and_p_mixes_it_with_p_lm(setup):
    s = setup
    tokens, lam = s["held"][2], 0.3
    found = _inspect(s, tokens, None, k=32, tau=3.0, lam=lam)
    assert [i.position for i in found] == list(range(1, len(tokens)))
    held_by_target = 0
    for inspection in found:
        matched = sum(n.weight for n in inspection.neighbours if n.value == inspection.target)
        assert inspection.p_knn == pytest.approx(matched, abs=1e-6)
        assert inspection.p == pytest.approx(lam * inspection.p_knn + (1 - lam) * inspection.p_lm, rel=1e-5)
        assert all(n.is_target == (n.value == inspection.target) for n in inspection.neighbours)
        top = {t["value"]: t["p_knn"] for t in inspection.top_tokens}
        if inspection.target in top:
            assert top[inspection.target] == pytest.approx(inspection.p_knn, rel=1e-5)
        held_by_target += matched > 0
    assert 0 < held_by_target  # some target is among its neighbours: the sum was not only ever 0
    # the same figures as `realm knnlm evaluate`'s tokens.jsonl for this document
    neighbours = ev.collect(s["model"], [tokens], s["lm_cfg"], s["store"], ev.KNNConfig(k=32))
    knn_log, mixed = ev.token_log_probs(neighbours, 32, 3.0, lam)
    for i, inspection in enumerate(found):
        assert inspection.p_lm == pytest.approx(math.exp(neighbours.lm_log_probs[i]), rel=1e-4)
        assert inspection.p_knn == pytest.approx(math.exp(knn_log[i]), rel=1e-3, abs=1e-7)
        assert inspection.p == pytest.approx(math.exp(mixed[i]), rel=1e-3)


def test_a_bad_position_is_a_clear_error(setup):
    s = setup
    tokens = s["held"][0]
    n = len(tokens) - 1
    for bad in (0, n + 1, -2):
        with pytest.raises(ArgumentError, match=rf"position {bad} is out of range for the text: it has {n} tokens, "
                                                rf"so positions are 1\.\.{n}"):  # fmt: skip
            _inspect(s, tokens, [3, bad])
    with pytest.raises(ArgumentError, match="the text has no token to inspect"):
        _inspect(s, tokens[:1], None)


def test_a_datastore_without_provenance_still_gives_tokens_and_weights(setup, tmp_path):
    s = setup
    old = tmp_path / "old"
    shutil.copytree(current_version(s["root"]), old)
    manifest = publication.read_manifest(old)
    del manifest["files"][DOC_STARTS_FILE]  # as a datastore built before provenance was recorded
    (old / DOC_STARTS_FILE).unlink()
    (old / publication.MANIFEST).write_text(json.dumps(manifest))
    store = load_datastore(old)
    assert not store.has_provenance
    tokens = s["held"][0]
    before, after = _inspect(s, tokens, [4])[0], _inspect(s, tokens, [4], store=store)[0]
    assert "unavailable" in after.contexts and DOC_STARTS_FILE in after.contexts and before.contexts == "available"
    assert [n.entry for n in after.neighbours] == [n.entry for n in before.neighbours]
    assert [n.weight for n in after.neighbours] == [n.weight for n in before.neighbours]
    assert [n.token for n in after.neighbours] == [n.token for n in before.neighbours]
    assert all(n.context is None and n.doc is None for n in after.neighbours) and after.p_knn == before.p_knn


def test_inspect_runs_end_to_end_and_writes_json(setup, tmp_path, capsys):
    s = setup
    out = tmp_path / "inspect.json"
    argv = ["knnlm", "inspect", f"--lm.model={s['lm']}", f"--datastore={s['root']}", *LM_ARGS,
            f"--data.path={s['heldout']}", "--doc=2", "--positions=[3,7]", "--knn.k=24", "--knn.tau=3.0",
            "--knn.lambda_=0.4", "--show=5", "--inspect.context_tokens=6", f"--json={out}"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "document 2 of" in printed and "position 3:" in printed and "position 7:" in printed
    assert printed.count("[[") >= 2 * (5 + 1) and "19 more neighbours hold weight" in printed
    record = json.loads(out.read_text())
    library = _inspect(s, s["held"][2], [3, 7], k=24, tau=3.0, lam=0.4, context_tokens=6)
    assert [i["position"] for i in record["inspections"]] == [3, 7]
    for written, expected in zip(record["inspections"], library):
        assert written["lambda"] == 0.4 and written["k"] == 24 and len(written["neighbours"]) == 24
        assert [n["entry"] for n in written["neighbours"]] == [n.entry for n in expected.neighbours]
        assert written["p"] == pytest.approx(expected.p) and written["token"] == expected.token
        assert written["neighbours"][0]["context"]["text"] == expected.neighbours[0].context.text
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically: no temporary left behind
    assert main(["knnlm", "inspect", f"--lm.model={s['lm']}", f"--datastore={s['root']}", *LM_ARGS,
                 "--text=the museum is known for", "--positions=5", "--show=2"]) == 0  # fmt: skip
    assert "position 5:" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--doc=99"], "--doc=99: {heldout} has 20 documents, so --doc is 0..19"),
        (["--doc_id=nope"], "--doc_id='nope': no document has that id in {heldout} (20 documents"),
        (["--doc=0", "--positions=[500]"], "position 500 is out of range for document 0 of {heldout} (id "),
        ([], "with --data.path={heldout}, give exactly one of --doc (an index) and --doc_id"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(setup, capsys, args, message):
    s = setup
    argv = ["knnlm", "inspect", f"--lm.model={s['lm']}", f"--datastore={s['root']}", *LM_ARGS,
            f"--data.path={s['heldout']}", *args]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("realm knnlm inspect: error: ") and message.format(heldout=s["heldout"]) in last
    assert "Traceback" not in err


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["knnlm", "inspect", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--positions=[]" in out and "--knn.tau=1.0" in out and "--inspect.context_tokens=16" in out
