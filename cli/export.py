"""``realm export RUN OUT --format hf | sentence-transformers | pyserini``: a pre-training run's encoder, retriever or
index in the formats transformers, sentence-transformers, FAISS and pyserini read (``realm.pretrain.export``); RUN may
also be a bare retriever folder (``RUN/ict/retriever``, ``RUN/retriever/step-N``), for its retriever or index."""

from __future__ import annotations

import json

from realm.core.argparser import ArgumentParser
from realm.core.config import from_dict
from realm.pretrain.export import FORMATS, INDEX_SOURCES, ExportConfig, export_run
from realm.run.publication import read_manifest

_NEXT = {
    "hf": "AutoModelForMaskedLM.from_pretrained({out!r}); AutoTokenizer.from_pretrained({out!r})",
    "sentence-transformers": "SentenceTransformer({out!r}).encode_query([...]) / .encode_document([(title, text)])",
    "pyserini": "faiss.read_index({index!r}); docids: {docid!r}; blocks: {blocks!r} (id/title/text)",
}


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="realm export", description=__doc__.splitlines()[0])
    parser.add_argument("run", help="pre-training run directory, or a bare retriever folder (RUN/ict/retriever, "
                        "RUN/retriever/step-N: sentence-transformers or pyserini only)")  # fmt: skip
    parser.add_argument("out", help="folder to write (must not exist or be empty, unless --overwrite)")
    parser.add_argument("--format", required=True, choices=FORMATS,
                        help="hf: the knowledge-augmented encoder; sentence-transformers: the retriever's towers; "
                        "pyserini: the index (index.faiss + docid) and the blocks (blocks.parquet)")  # fmt: skip
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: the newest complete one)")
    parser.add_argument("--checkpoint", default=None, help="checkpoint folder (instead of --step)")
    parser.add_argument("--index", choices=INDEX_SOURCES, default="auto",
                        help="pyserini: current = the run's live index; exact = embed every block now with the "
                        "checkpoint's document tower; auto = current when there is one (default)")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    args = parser.parse_args(argv)
    fields = {"format": args.format, "step": args.step, "checkpoint": args.checkpoint, "index": args.index,
              "overwrite": args.overwrite}  # fmt: skip
    options = from_dict(ExportConfig, fields, where="realm export")
    out = export_run(args.run, args.out, options)
    manifest = read_manifest(out) or {}
    where = {"out": str(out), "index": str(out / "index.faiss"), "docid": str(out / "docid"),
             "blocks": str(out / "blocks.parquet")}  # fmt: skip
    print(json.dumps({"out": str(out), "format": args.format, "step": manifest.get("step"),
                      "index_step": manifest.get("index_step"), "files": len(manifest.get("files", {}))}))  # fmt: skip
    print(f"load with: {_NEXT[args.format].format(**where)}")
    return 0
