"""FEVER claims: page ids decoded to titles, only claims the corpus can verify kept (the rest counted by reason),
malformed records refused with file:line or counted, and each kept claim asked once per salient span."""

from __future__ import annotations

import json

import pytest

from experiments.fever.claims import REFUTES, SUPPORTS, FeverClaim, claim_records, page_title, read_fever_claims
from realm.core.errors import DataFileError
from realm.data.tagging import RuleTagger

TITLES = {"Soul Food (film)", "Telemundo", "Hispanic and Latino Americans", "Damon Albarn"}
RECORDS = [
    {"id": 1, "label": "NOT ENOUGH INFO", "claim": "Tilda Swinton is a vegan.", "evidence": [[[9, None, None, None]]]},
    {"id": 2, "label": SUPPORTS, "claim": "Fox 2000 Pictures released the film Soul Food.",
     "evidence": [[[1, 2, "Soul_Food_-LRB-film-RRB-", 0]], [[3, 4, "Soul_Food_-LRB-film-RRB-", 0]]]},
    {"id": 3, "label": REFUTES, "claim": " Telemundo is a English-language television network. ",
     "evidence": [[[5, 6, "Telemundo", 0]], [[5, 7, "Telemundo", 4], [5, 7, "Hispanic_and_Latino_Americans", 0]]]},
    {"id": 4, "label": REFUTES, "claim": "Damon Albarn's debut album was released in 2011.",
     "evidence": [[[7, 8, "Damon_Albarn", 17], [7, 8, "Blur_-LRB-band-RRB-", 1]]]},
]  # fmt: skip


def _write(path, records, extra: str = ""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + extra)
    return path


def test_page_ids_become_titles():
    assert page_title("Soul_Food_-LRB-film-RRB-") == "Soul Food (film)"
    assert page_title("Star_Wars-COLON-_Episode_IV") == "Star Wars: Episode IV"
    assert page_title("Telemundo") == "Telemundo"


def test_only_claims_whose_every_evidence_page_is_in_the_corpus_are_kept(tmp_path):
    claims, stats = read_fever_claims(_write(tmp_path / "dev.jsonl", RECORDS), TITLES)
    assert claims == [
        FeverClaim(2, "Fox 2000 Pictures released the film Soul Food.", SUPPORTS, ("Soul Food (film)",)),
        FeverClaim(3, "Telemundo is a English-language television network.", REFUTES,
                   ("Telemundo", "Hispanic and Latino Americans")),
    ]  # fmt: skip
    # claim 4 cites Blur (band), which the corpus lacks, in the same evidence set as a page it has
    assert (stats.num_records, stats.num_not_enough_info, stats.num_outside_corpus, stats.num_malformed) == (4, 1, 1, 0)


@pytest.mark.parametrize(
    "record, reason",
    [
        ({"id": 5, "label": "MAYBE", "claim": "x", "evidence": []}, "'label' must be one of"),
        ({"id": 5, "label": SUPPORTS, "claim": "  ", "evidence": []}, "'claim' must be a non-empty string"),
        ({"id": "5", "label": SUPPORTS, "claim": "x", "evidence": []}, "'id' must be an integer"),
        ({"id": 5, "label": SUPPORTS, "claim": "x", "evidence": []}, "'evidence' must be a non-empty list"),
        ({"id": 5, "label": REFUTES, "claim": "x", "evidence": [[[1, 2, None, 0]]]}, "an evidence entry must be"),
    ],
)
def test_a_malformed_record_names_its_line_or_is_counted(tmp_path, record, reason):
    path = _write(tmp_path / "dev.jsonl", [*RECORDS[:2], record, RECORDS[2]])
    with pytest.raises(DataFileError, match=f"dev.jsonl:3: {reason}"):
        read_fever_claims(path, TITLES)
    claims, stats = read_fever_claims(path, TITLES, skip_malformed=True)
    assert [c.id for c in claims] == [2, 3] and stats.num_malformed == 1 and stats.num_records == 3


def test_a_line_that_is_not_json_is_refused_or_counted(tmp_path):
    path = _write(tmp_path / "dev.jsonl", RECORDS, extra="{not json\n")
    with pytest.raises(DataFileError, match="dev.jsonl:5: invalid JSON"):
        read_fever_claims(path, TITLES)
    assert read_fever_claims(path, TITLES, skip_malformed=True)[1].num_malformed == 1


def test_each_salient_span_of_a_claim_is_one_cloze_row():
    claims = [
        FeverClaim(2, "Fox Pictures released Soul Food in 1997.", SUPPORTS, ("Soul Food (film)",)),
        FeverClaim(3, "it is a network.", REFUTES, ("Telemundo",)),
        FeverClaim(4, "Damon Albarn sang.", REFUTES, ("Damon Albarn",)),
    ]
    rows = claim_records(claims, RuleTagger())
    asked = [(r["claim"], r["text"][r["answer_start"] : r["answer_end"]], r["title"]) for r in rows]
    assert asked == [
        (0, "Fox Pictures", "Soul Food (film)"), (0, "Soul Food", "Soul Food (film)"), (0, "1997", "Soul Food (film)"),
        (2, "Damon Albarn", "Damon Albarn"),
    ]  # fmt: skip  (claim 1 has no salient span: no row)
