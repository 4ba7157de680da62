"""``realm inspect`` on a pre-training run: ``--json`` (JSON Lines of the table's rows) and ``--queries FILE``, and
the one-line error for a folder that is neither a pre-training nor a QA run."""

from __future__ import annotations

import json

import pytest

from realm.cli.main import main
from tests.unit.cli.test_cli import tiny_run  # noqa: F401  (the module-scoped run fixture)

QUERIES = ["Who founded the bank?", "Where was [MASK] born?"]


def test_inspect_json_has_the_tables_rows_for_each_query_of_a_file(tiny_run, tmp_path, capsys):  # noqa: F811
    file = tmp_path / "queries.txt"
    file.write_text("\n".join(QUERIES) + "\n")
    tables = []
    for query in QUERIES:
        assert main(["inspect", str(tiny_run), query, "--k", "3"]) == 0
        tables.append([line.split()[:3] for line in capsys.readouterr().out.splitlines()[4:]])
    assert main(["inspect", str(tiny_run), "--queries", str(file), "--k", "3", "--json"]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [g["query"] for g in got] == QUERIES and all(g["kind"] == "pretrain" for g in got)
    for g, table in zip(got, tables):
        assert [[str(b["rank"]), f"{b['score']:.3f}", str(b["block"])] for b in g["blocks"]] == table
        assert len(table) == 3 and all(b["title"] and b["text"] for b in g["blocks"])
    # the table form of the file: one block per query, the description once
    assert main(["inspect", str(tiny_run), "--queries", str(file), "--k", "3"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("query: ")] == [f"query: {q}" for q in QUERIES]
    assert out.count("index v-00000006") == 1


def test_inspect_needs_exactly_one_of_a_query_and_a_file(tiny_run, tmp_path, capsys):  # noqa: F811
    with pytest.raises(SystemExit):
        main(["inspect", str(tiny_run)])
    assert "give a query or --queries FILE" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert main(["inspect", str(tiny_run), "--queries", str(empty)]) == 2
    assert f"--queries: {empty} holds no query" in capsys.readouterr().err


def test_inspect_names_both_kinds_of_run_for_a_folder_that_is_neither(tmp_path, capsys):
    assert main(["inspect", str(tmp_path), "a query"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "neither a pre-training run" in err and "nor a QA run" in err
