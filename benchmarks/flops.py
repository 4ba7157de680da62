"""Model FLOPs of the BERT towers and the machine's matmul peak, what MFU is measured against: shared by
``benchmarks/step.py``, ``benchmarks/builder.py`` and ``benchmarks/hf_realm_peer.py``."""

from __future__ import annotations

import time

import torch
from transformers import BertConfig

from realm.core.cpu_matmul import onednn_linear, onednn_linears
from realm.pretrain.batch import RealmBatch


def device_time(device: torch.device) -> float:
    """``time.perf_counter()`` once the device's queued work is done (CUDA kernels run asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize()  # note: CUDA kernels are async; the clock must wait for them
    return time.perf_counter()


def matmul_peak(dtype: torch.dtype, n: int, device: torch.device, repeats: int = 5) -> float:
    """FLOP/s of an [n, n] @ [n, n] ``torch.mm`` (2 n^3 FLOPs): the best of ``repeats`` after one warm-up. In fp32
    on CPU with ``REALM_CPU_MATMUL=onednn``, the same product by oneDNN, as the run's linear layers compute it.

    The best, not the median: a peak is what the machine can reach, and on shared cores the median drifts with load.
    """
    onednn = dtype == torch.float32 and onednn_linears(device.type, "fp32")
    product = onednn_linear if onednn else torch.mm  # note: a @ b.T against a @ b: the same FLOPs
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    product(a, b)
    times = []
    for _ in range(repeats):
        t0 = device_time(device)
        product(a, b)
        times.append(device_time(device) - t0)
    return 2 * n**3 / min(times)


def bert_flops(c: BertConfig, num_seqs: int, seq_len: int) -> float:
    """Training (forward + backward = 3x forward) FLOPs of a BERT's layers over [num_seqs, seq_len] padded tokens.

    Per token and layer the forward does 2 * (4 h^2 + 2 h f) in the QKV/output and FFN matmuls, and per sequence and
    layer 2 * 2 * L^2 * h in QK^T and AV; so 6 * N * L * l * (4 h^2 + 2 h f) + 12 * N * l * h * L^2 in all.
    Embedding lookups, softmax and norms are not counted (torch's FlopCounterMode agrees within ~10%).
    """
    h, f, n_layers = c.hidden_size, c.intermediate_size, c.num_hidden_layers
    return 6 * num_seqs * seq_len * n_layers * (4 * h * h + 2 * h * f) + 12 * num_seqs * n_layers * h * seq_len**2


def mlm_head_flops(c: BertConfig, num_positions: int) -> float:
    """Training FLOPs of the MLM head (transform + decoder) at ``num_positions``: 6 * (h^2 + h V) each."""
    return 6 * num_positions * (c.hidden_size**2 + c.hidden_size * c.vocab_size)


def realm_flops(c: BertConfig, batch: RealmBatch, embed_dim: int) -> float:
    """Model FLOPs of a REALM step: query embedder (B), doc embedder (B*(K-1) blocks + the null block), encoder (B*K).

    Plus the embedders' [CLS] projection (6 h D a sequence) and the MLM head at the B*K*M masked positions only.
    The search's no_grad query embedding repeats the query tower's forward, so (as rematerialisation in MFU) it is
    not counted; neither is the search itself.
    """
    cand = batch.candidates
    b, k, reader_len = cand.reader_input_ids.shape
    return (
        bert_flops(c, b, batch.query_input_ids.shape[1])
        + bert_flops(c, b * (k - 1), cand.doc_input_ids.shape[2])
        + bert_flops(c, 1, cand.null_input_ids.shape[1])
        + 6 * (b * k + 1) * c.hidden_size * embed_dim
        + bert_flops(c, b * k, reader_len)
        + mlm_head_flops(c, b * k * batch.mask_positions.shape[1])
    )
