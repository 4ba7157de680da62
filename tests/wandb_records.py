"""Reading an offline W&B run back: the records of its ``run-<id>.wandb`` file.

wandb 0.31 has no Python reader of its own (the transaction log is written by wandb-core); the format is LevelDB's
log: a 7-byte file header (``:W&B``, magic 0xBEE1, version 0), then 32 KiB blocks of chunks, each with a 7-byte
header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last), whose payloads joined are one serialized
``wandb_internal.Record``.
"""

from __future__ import annotations

import struct
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> list:
    """Every ``Record`` of an offline run's ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:HEADER])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), f"{path} is not a W&B transaction log"
    records, pending, offset = [], b"", HEADER
    while offset + HEADER <= len(data):
        left_in_block = BLOCK - offset % BLOCK
        if left_in_block < HEADER:  # the block's tail is padding
            offset += left_in_block
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + HEADER])
        payload = data[offset + HEADER : offset + HEADER + length]
        offset += HEADER + length
        if kind == 0 and length == 0:  # zero padding at the end of the file
            break
        pending = payload if kind in (FULL, FIRST) else pending + payload
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def offline_runs(run_dir: Path) -> dict[str, list]:
    """``{job_type: records}`` of every offline W&B run under ``run_dir/wandb``."""
    runs = {}
    for path in sorted((Path(run_dir) / "wandb").glob("offline-run-*/run-*.wandb")):
        records = read_records(path)
        (job_type,) = {r.run.job_type for r in records if r.WhichOneof("record_type") == "run"}
        runs[job_type] = records
    return runs
