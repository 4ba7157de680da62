"""The index and the blocks in the layout FAISS and pyserini users read.

```
OUT/
  index.faiss     the FAISS index (inner product), as ``faiss.read_index`` reads it
  index           the same file under the name pyserini's ``FaissSearcher(OUT, encoder)`` opens (a hard link)
  docid           one docid per FAISS row, one per line (pyserini's docid file)
  blocks.parquet  id / title / text (+ doc_id: the source document, uid: SHA-1 of title and body), one row a block
```

A docid is the block's row number in the run's ``blocks/`` as a string: unique, what every realm record calls a
block id, and the ``id`` of the parquet row that holds its title and text (and of DPR ``ctxs`` records,
``realm.run.export_retrieval``). A block's source document is its ``doc_id`` column.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterable

import datasets
import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from realm.core.atomic import disk_writes

FAISS_FILE, PYSERINI_INDEX_FILE, DOCID_FILE, BLOCKS_FILE = "index.faiss", "index", "docid", "blocks.parquet"
BLOCK_COLUMNS = ("id", "title", "text", "doc_id", "uid")
_PARQUET_BATCH = 1 << 16


def docids(block_ids: np.ndarray) -> list[str]:
    """The docid of each FAISS row, given the row -> block id map of an index version (``block_ids.npy``)."""
    return [str(int(i)) for i in block_ids]


def write_blocks_parquet(blocks: datasets.Dataset, path: str | Path) -> Path:
    """``blocks.parquet`` with ``BLOCK_COLUMNS``, written batch by batch (no copy of the corpus in memory)."""
    path = Path(path)
    source = blocks.select_columns(["title", "text", "doc_id", "uid"]).with_format("arrow")
    schema = pa.schema([(name, pa.string()) for name in BLOCK_COLUMNS])
    start = 0
    with disk_writes(path), pq.ParquetWriter(str(path), schema) as writer:
        for table in source.iter(batch_size=_PARQUET_BATCH):
            ids = pa.array([str(i) for i in range(start, start + table.num_rows)], pa.string())
            columns = [ids, *(table.column(name).cast(pa.string()) for name in BLOCK_COLUMNS[1:])]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))
            start += table.num_rows
    return path


def write_faiss_index(out: Path, *, faiss_file: Path | None = None,
                      embeddings: np.ndarray | Iterable[np.ndarray] | None = None, block_ids: np.ndarray) -> None:
    """``index.faiss`` (a copy of ``faiss_file``, or an exact ``Flat`` inner-product index of ``embeddings``: an
    [N, D] array, or [C, D] chunks of it added one by one, so that no [N, D] copy is held beside the index), its
    pyserini name ``index`` and the ``docid`` file of ``block_ids`` (the block id of each row)."""
    if (faiss_file is None) == (embeddings is None):
        raise ValueError("pass exactly one of faiss_file and embeddings")
    target = out / FAISS_FILE
    if faiss_file is not None:
        with disk_writes(target):
            shutil.copyfile(faiss_file, target)  # note: a copy: a link would share the run's file with the export
    else:
        index = None
        for chunk in [embeddings] if isinstance(embeddings, np.ndarray) else embeddings:
            vectors = np.ascontiguousarray(chunk, dtype=np.float32)
            if index is None:
                index = faiss.IndexFlatIP(vectors.shape[1])  # note: exact; REALM's relevance is the inner product
            index.add(vectors)
        if index is None:
            raise ValueError("embeddings: no vectors to index")
        with disk_writes(target):
            faiss.write_index(index, str(target))
    with disk_writes(out):
        os.link(target, out / PYSERINI_INDEX_FILE)
        (out / DOCID_FILE).write_text("".join(f"{d}\n" for d in docids(block_ids)))
