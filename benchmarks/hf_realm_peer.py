"""Our REALM training step against the Hugging Face REALM classes, step by step on the same tensors, in one run.

The peer is the Hugging Face port of REALM as transformers 4.57.6 ships it (the last release with the REALM classes,
under ``transformers.models.deprecated.realm``): ``RealmScorer`` (a query ``RealmEmbedder`` and a candidate
``RealmEmbedder``, two towers as ours) gives the relevance scores, ``RealmKnowledgeAugEncoder`` the marginal MLM loss
over the candidates; then backward, clipping and AdamW, as our step does. The project needs transformers 5, so the peer
runs in a side virtual environment that this script creates (``--venv``; ``--system-site-packages``, so it uses this
environment's torch and the same device) and in a worker process of its own. Both steps see the same tensors: our step
(``benchmarks/timed_steps.py``'s ``RealmStep``, the trainer's step on random queries over a random corpus) retrieves and
packs a batch, and the worker is handed that batch's query, candidate and reader tensors, so the shapes (batch,
candidates, lengths, model size) are the same by construction. Steps alternate (ours i, then the peer's i; never at the
same time), so load that drifts during the run slows both alike; each ratio is the median of the per-step ratios.

Rows: ours, whole step (no_grad query embedding, search, packing, forward+backward, clip+AdamW); ours, the model part
(forward+backward, clip+AdamW); the peer's step (scorer + encoder forward+backward, clip+AdamW; it has no search of
its own, so the comparable row is the model part). What differs by design, not by speed: our candidates include
REALM's null document (slot 0; the peer is handed it as one more candidate), and our MLM head runs at the masked
positions only, while the peer's runs at every position of every reader sequence (``[B*K, L, vocab]`` logits).

Run from the repository root: ``python -m benchmarks.hf_realm_peer`` (the demo shape; about 2 minutes on 2 CPU cores,
the first run adds the side environment's install), with ``benchmarks/step.py``'s shape flags for other shapes, e.g.
BERT-base: ``--hidden 768 --layers 12 --heads 12 --intermediate 3072 --vocab 30522 --batch 8 --block-len 288 --body-len
256`` (the peer's [B*K, L, vocab] logits take more than 16 GB of memory there at ``--batch 8``; the 2-core machine ran
``--batch 2 --steps 3 --warmup 1``). On a GPU machine with no network, first ``python benchmarks/hf_realm_peer.py
--download-wheels wheels/`` here (the peer's wheels), carry ``wheels/`` there and run
``python -m benchmarks.hf_realm_peer --wheels wheels/ --bf16 [BERT-base flags]`` (the GPU command of the issue).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEER_VERSION = "4.57.6"  # the last transformers release that ships the REALM classes
DEFAULT_VENV = Path.home() / ".cache" / "realm-bench" / f"hf-realm-{PEER_VERSION}"


# ----------------------------------------------------------------------------- the peer (runs in the side venv)
# note: this part imports only torch, safetensors and transformers 4.57.6: the side environment must not import the
# project, which needs transformers 5


def _clock(device) -> float:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()  # note: CUDA kernels are async; the clock must wait for them
    return time.perf_counter()


def peer_worker(spec: dict) -> None:
    """Reads one safetensors path a line from stdin, trains the peer one step on it, prints that step's seconds."""
    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import RealmConfig, RealmEmbedder, RealmKnowledgeAugEncoder, RealmScorer

    if spec["threads"] > 0:
        torch.set_num_threads(spec["threads"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=spec["bf16"])
    print(json.dumps({"transformers": transformers.__version__, "device": str(device)}), flush=True)
    scorer = encoder = optimizer = None
    for line in sys.stdin:
        t = load_file(line.strip(), device=str(device))
        if scorer is None:  # note: built on the first batch, which gives the number of candidates
            config = RealmConfig(
                **spec["bert"],
                retriever_proj_size=spec["embed_dim"],
                num_candidates=t["candidate_input_ids"].shape[1],
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
            )
            torch.manual_seed(0)
            scorer = RealmScorer(config, query_embedder=RealmEmbedder(config)).to(device)
            encoder = RealmKnowledgeAugEncoder(config).to(device)
            params = [*scorer.parameters(), *encoder.parameters()]
            # note: torch's default AdamW kernel, as a peer user gets it; ours is fused (optim.implementation)
            optimizer = torch.optim.AdamW(params, lr=1e-4)
        t0 = _clock(device)
        with autocast:
            relevance = scorer(
                input_ids=t["query_input_ids"],
                attention_mask=t["query_attention_mask"],
                token_type_ids=torch.zeros_like(t["query_input_ids"]),
                candidate_input_ids=t["candidate_input_ids"],
                candidate_attention_mask=t["candidate_attention_mask"],
                candidate_token_type_ids=t["candidate_token_type_ids"],
            ).relevance_score
            loss = encoder(
                input_ids=t["reader_input_ids"],
                attention_mask=t["reader_attention_mask"],
                token_type_ids=t["reader_token_type_ids"],
                relevance_score=relevance,
                labels=t["labels"],
                mlm_mask=t["labels"] != -100,
            ).loss
        loss.backward()
        t1 = _clock(device)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t2 = _clock(device)
        print(json.dumps({"step": t2 - t0, "fwd_bwd": t1 - t0, "optimizer": t2 - t1, "loss": loss.item()}), flush=True)


# ----------------------------------------------------------------------------- our side (the project's environment)


def ensure_venv(venv: Path, wheels: str | None) -> Path:
    """The side environment's python, with transformers ``PEER_VERSION`` installed (from ``wheels`` if given)."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    probe = subprocess.run(
        [str(python), "-c", "import transformers; print(transformers.__version__)"], capture_output=True, text=True
    )
    if probe.stdout.strip() != PEER_VERSION:
        source = ["--no-index", "--find-links", wheels] if wheels else []
        print(f"installing transformers=={PEER_VERSION} into {venv} ...", flush=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"transformers=={PEER_VERSION}", *source], check=True
        )
    return python


def peer_inputs(batch) -> dict:
    """The peer's tensors for one of our retrieved batches: queries [B, Lq], candidates [B, K, Ld] (the null document
    padded into slot 0), reader sequences [B*K, Lr] and MLM labels [B, Lr] (-100 except at the masked positions, which
    are the same in the query and in each reader sequence: the reader input starts with the query)."""
    import torch

    cand = batch.candidates.to("cpu")
    b, k, _ = cand.reader_input_ids.shape

    def with_null(docs, null):
        padded = torch.zeros((b, 1, docs.shape[2]), dtype=docs.dtype)
        padded[:, 0, : null.shape[1]] = null[0]
        return torch.cat([padded, docs], dim=1).contiguous()

    query = batch.query_input_ids.cpu()
    labels = torch.full(cand.reader_input_ids[:, 0].shape, -100, dtype=torch.long)
    targets = batch.target_ids.cpu().masked_fill(batch.target_mask.cpu() == 0, -100)
    labels.scatter_(1, batch.mask_positions.cpu(), targets)
    labels[:, 0] = -100  # note: padded targets point at position 0 ([CLS]), never a target
    null_types = torch.zeros_like(cand.null_input_ids)
    return {
        "query_input_ids": query.contiguous(),
        "query_attention_mask": batch.query_attention_mask.cpu().contiguous(),
        "candidate_input_ids": with_null(cand.doc_input_ids, cand.null_input_ids),
        "candidate_attention_mask": with_null(cand.doc_attention_mask, torch.ones_like(cand.null_input_ids)),
        "candidate_token_type_ids": with_null(cand.doc_token_type_ids, null_types),
        "reader_input_ids": cand.reader_input_ids.flatten(0, 1).contiguous(),
        "reader_attention_mask": cand.reader_attention_mask.flatten(0, 1).contiguous(),
        "reader_token_type_ids": cand.reader_token_type_ids.flatten(0, 1).contiguous(),
        "labels": labels,
    }


def measure(args: argparse.Namespace) -> dict:
    import torch
    from safetensors.torch import save_file
    from benchmarks.timed_steps import RealmStep, bert_config, reader_length

    from realm.core.logging import set_num_threads

    python = ensure_venv(Path(args.venv), args.wheels)
    set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)
    c = bert_config(args, reader_length(args))
    ours = RealmStep(args, c, device, autocast)
    bert = {k: getattr(c, k) for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")}
    bert |= {"intermediate_size": c.intermediate_size, "max_position_embeddings": c.max_position_embeddings}
    spec = {"threads": args.threads, "bf16": args.bf16, "embed_dim": args.embed_dim, "bert": bert}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # note: the worker must not see the project
    worker = subprocess.Popen(
        [str(python), __file__, "--worker", json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    peer_info = _reply(worker)
    rows: dict[str, list[float]] = {"ours_step": [], "ours_model": [], "peer": []}
    parts: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.warmup + args.steps):
            times, batch = ours()
            path = Path(tmp) / f"step{i}.safetensors"
            save_file(peer_inputs(batch), str(path))
            worker.stdin.write(f"{path}\n")
            worker.stdin.flush()
            peer = _reply(worker)
            path.unlink()
            if i < args.warmup:
                continue
            rows["ours_step"].append(times["step"])
            rows["ours_model"].append(times["fwd_bwd"] + times["optimizer"])
            rows["peer"].append(peer["step"])
            for key, value in [*times.items(), *((f"peer_{k}", v) for k, v in peer.items())]:
                parts.setdefault(key, []).append(value)
    worker.stdin.close()
    worker.wait()
    cand = batch.candidates
    return {
        "args": vars(args),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "peer": peer_info,
        "shapes": {
            "queries": list(batch.query_input_ids.shape),
            "reader": list(cand.reader_input_ids.shape),
            "docs": list(cand.doc_input_ids.shape),
        },
        "ms": {key: 1e3 * statistics.median(v) for key, v in rows.items()},
        "parts_ms": {key: 1e3 * statistics.median(v) for key, v in parts.items()},
        "peer_over_ours_model": statistics.median(p / o for p, o in zip(rows["peer"], rows["ours_model"])),
        "peer_over_ours_step": statistics.median(p / o for p, o in zip(rows["peer"], rows["ours_step"])),
    }


def _reply(worker: subprocess.Popen) -> dict:
    """The worker's next JSON line; a clear error, not a JSON traceback, when the worker died (e.g. out of memory:
    at BERT-base the peer materialises [B*K, L, vocab] logits, 16 GB at B 8, K 6, L 288)."""
    line = worker.stdout.readline()
    if line:
        return json.loads(line)
    code = worker.wait()
    how = "killed by SIGKILL, most likely out of memory (try a smaller --batch)" if code == -9 else f"exit {code}"
    raise SystemExit(f"hf_realm_peer: the peer worker died ({how}); its stderr is above")


def format_table(r: dict) -> str:
    a, ms, parts = r["args"], r["ms"], r["parts_ms"]
    b, k, lr = r["shapes"]["reader"]
    lines = [
        f"BERT hidden {a['hidden']}, layers {a['layers']}, heads {a['heads']}, intermediate {a['intermediate']}, "
        f"vocab {a['vocab']}; B {b} queries x K {k} candidates (null document included), reader length {lr}, "
        f"document length {r['shapes']['docs'][2]}, query length {r['shapes']['queries'][1]}; "
        f"{'bf16 autocast' if a['bf16'] else 'fp32'}, {r['device']}, {r['threads']} threads; "
        f"median of {a['steps']} steps after {a['warmup']} warm-up",
        f"peer: transformers {r['peer']['transformers']} (RealmScorer + RealmKnowledgeAugEncoder), "
        f"on {r['peer']['device']}",
        "",
        f"{'':58}{'ms/step':>9}{'peer/this':>11}",
        f"{'ours, whole step (embed, search, pack, fwd+bwd, AdamW)':58}{ms['ours_step']:9.1f}"
        f"{r['peer_over_ours_step']:11.2f}",
        f"{'ours, model part (fwd+bwd, clip+AdamW)':58}{ms['ours_model']:9.1f}{r['peer_over_ours_model']:11.2f}",
        f"{'  forward+backward':58}{parts['fwd_bwd']:9.1f}",
        f"{'  clip+AdamW':58}{parts['optimizer']:9.1f}",
        f"{'HF REALM, model part (fwd+bwd, clip+AdamW)':58}{ms['peer']:9.1f}{1.0:11.2f}",
        f"{'  forward+backward':58}{parts['peer_fwd_bwd']:9.1f}",
        f"{'  clip+AdamW':58}{parts['peer_optimizer']:9.1f}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        peer_worker(json.loads(argv[1]))
        return
    from benchmarks.harness import emit  # note: first: no hub, no W&B network, repository importable
    from benchmarks.timed_steps import shape_parser

    p = shape_parser(__doc__.splitlines()[0])
    p.add_argument("--venv", default=str(DEFAULT_VENV), help="the side environment for the peer (created if missing)")
    p.add_argument("--wheels", default=None, help="install the peer from these wheels (no network)")
    p.add_argument("--download-wheels", default=None, metavar="DIR", help="only download the peer's wheels to DIR")
    args = p.parse_args(argv)
    if args.download_wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                f"transformers=={PEER_VERSION}",
                "-d",
                args.download_wheels,
            ],
            check=True,
        )
        return
    result = measure(args)
    emit(result, format_table(result), args.json)


if __name__ == "__main__":
    main()
