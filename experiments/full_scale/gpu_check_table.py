"""``docs/performance.md``'s GPU tables from ``experiments/full_scale/gpu_check.py``'s JSON (``python -m
experiments.full_scale.gpu_check --table FILE [FILE ...]``): the machine, each part's status, then the step, builder,
search and pipeline rows. With several files (a second command that ran other parts), each part is read from the last
file in which it ran."""

from __future__ import annotations

from typing import Any


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, fmt: str = ",.1f") -> str:
    return "-" if value is None else format(value, fmt)


def merged_parts(results: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Part name -> (its record, the machine of the file it came from): the last file where it was not skipped (or
    the last file that names it at all)."""
    parts: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for result in results:
        for name, record in result["parts"].items():
            if name not in parts or record["status"] != "skipped":
                parts[name] = (record, result.get("machine") or {})
    return parts


def _machine_line(results: list[dict[str, Any]]) -> str:
    lines = []
    for result in results:
        m = result.get("machine") or {}
        versions = m.get("versions") or {}
        lines.append(
            f"{'Dry run on CPU' if result['dry_run'] else m.get('gpu') or 'no GPU'} ("
            f"torch {m.get('torch')}, CUDA {m.get('cuda')}, transformers {versions.get('transformers')}; bf16 "
            f"`torch.mm` peak {_num(m.get('bf16_mm_peak_tflops'))} TFLOP/s; commit {str(m.get('commit'))[:7]}; "
            f"{result['started']}, {result['wall_s']:.0f} s of a {result['budget_s']:.0f} s budget)"
        )
    return "\n".join(f"- {line}" for line in lines)


def _status_rows(parts: dict) -> list[str]:
    rows = ["| part | status | seconds (limit) | note |", "|---|---|---|---|"]
    for name, (record, _) in parts.items():
        note = record.get("reason") or ""
        if name == "tests" and record["figures"]:
            f = record["figures"]
            note = f"{f['passed']} passed, {f['failures'] + f['errors']} failed, {f['skipped']} skipped " + note
        rows.append(f"| {name} | {record['status']} | {record['seconds']:.0f} ({record['limit_s']:.0f}) | "
                    f"{note.strip()} |")  # fmt: skip
    return rows


def _step_rows(parts: dict) -> list[str]:
    rows = ["| shape | REALM step | prefetched | plain BERT MLM, all sequences | REALM / plain (all seqs) | "
            "MFU (REALM; plain) |", "|---|---|---|---|---|---|"]  # fmt: skip
    for name, label in (("step_demo", "demo"), ("step_bert_base", "BERT-base (B 8, K 5, blocks of 288)")):
        record, _ = parts.get(name, ({"figures": {}}, {}))
        f = record["figures"]
        if not f:
            continue
        speedup = f" ({f['prefetch_speedup']:.2f}x)" if f.get("prefetch_speedup") else ""
        rows.append(
            f"| {label} | {f['realm_ms']:.1f} ms | {_num(f['prefetched_ms'])} ms{speedup} | "
            f"{f['plain_mlm_all_seqs_ms']:.1f} ms | {f['realm_over_plain_all_seqs']:.2f}x | "
            f"{_pct(f['realm_mfu_bf16'])}; {_pct(f['plain_mlm_all_seqs_mfu_bf16'])} |"
        )
    return rows if len(rows) > 2 else []


def _builder_rows(parts: dict) -> list[str]:
    f = parts.get("builder", ({"figures": {}}, {}))[0]["figures"]
    if not f:
        return []
    procs = f["processes"]
    return [
        "| embed_blocks / bare forward (median round; total) | builder blocks/s, 1 process | 2 processes | "
        "embedding MFU (bf16) | 13.35M-block refresh on 8 GPUs |",
        "|---|---|---|---|---|",
        f"| {_pct(f['embed_over_bare_median_round'])}; {_pct(f['embed_over_bare_total'])} | "
        f"{_num(procs.get('1', {}).get('build_blocks_per_s'), ',.0f')} | "
        f"{_num(procs.get('2', {}).get('build_blocks_per_s'), ',.0f')} | {_pct(f['embed_mfu_bf16'])} | "
        f"{_num(f['wikipedia_refresh_hours_8dev'] * 60)} min |",
    ]


def _search_rows(parts: dict) -> list[str]:
    f = parts.get("search", ({"figures": {}}, {}))[0]["figures"]
    if not f:
        return []
    rows = [f"Exact `TorchIndex` search, {f['rows']:,} x {f['dim']} {f['dtype']}, top {f['k']}: setup "
            f"{f['setup_s']:.1f} s, {_num(f['device_memory_gb'], '.1f')} GB on the device; recall@{f['k']} against "
            f"exact fp32 {f['recall_at_k_vs_exact_fp32']:.4f}, top-1 agreement "
            f"{f['top1_agrees_with_exact_fp32']:.4f}.", "", "| queries a batch | ms | queries/s |", "|---|---|---|"]
    rows += [f"| {q} | {r['ms']:.2f} | {r['qps']:,.0f} |" for q, r in f["batches"].items()]
    return rows


def _pipeline_rows(parts: dict) -> list[str]:
    rows = ["| pipeline | wall | trainer wait | live builder / bare forward | embed_blocks alone / bare | "
            "held-out, retrieval (closed book) | QA EM |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name in ("demo", "real_text"):
        f = parts.get(name, ({"figures": {}}, {}))[0]["figures"]
        if not f:
            continue
        s = f["summary"]
        rows.append(
            f"| {name} | {_num(s.get('wall_seconds'), '.0f')} s | {_pct(f['trainer_wait_fraction'])} | "
            f"{_pct(f['builder_over_bare'])} | {_pct(f['embed_alone_over_bare'])} | "
            f"{_num(s.get('heldout_accuracy_retrieval'), '.3f')} ({_num(s.get('heldout_accuracy_closed_book'), '.3f')})"
            f" | {_num(s.get('qa_exact_match_end'), '.3f')} |"
        )
    return rows if len(rows) > 2 else []


def markdown(results: list[dict[str, Any]]) -> str:
    """The tables, blank-line separated; a part without figures (failed, skipped) shows in the status table only."""
    parts = merged_parts(results)
    blocks = [_machine_line(results), _status_rows(parts), _step_rows(parts), _builder_rows(parts),
              _search_rows(parts), _pipeline_rows(parts)]  # fmt: skip
    return "\n\n".join(block if isinstance(block, str) else "\n".join(block) for block in blocks if block)
