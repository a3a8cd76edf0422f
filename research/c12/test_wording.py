"""C12's wording measurement (research/c12/wording.py): the encyclopedia rewording, the part
recomputed by the claim's code from the committed numbers, and the criterion."""

import json

import pytest

from research.c12 import wording as w
from tlm.data.future_relations import FutureQuery, FutureRelations
from tlm.synthetic.pretrain import encyclopedia_sentence


def test_the_committed_part_is_recomputed_by_the_claims_code():
  """V2 on the fresh seeds: -1.612 and -1.384 nats, as summary.json has them."""
  for seed, value in ((3, -1.612), (4, -1.384)):
    meas, parts = w.committed(seed)
    got = w.margins(w.with_cbqa_ft(meas, None))[w.LOW][0]
    assert got == pytest.approx(parts[w.LOW], abs=w.TOLERANCE)
    assert round(got, 3) == value


def test_replacing_cbqa_fts_entropies_moves_only_its_part(tmp_path):
  meas, _ = w.committed(3)
  ids = meas["entropy"]["cbqa_ft"]["id"]
  years = list(meas["entropy"]["cbqa_ft"]["entropy"])
  zero = {"per_query": {i: {int(y): 0.0 for y in years} for i in ids}}
  got = w.margins(w.with_cbqa_ft(meas, w.entropy_columns(zero, ids)))
  level = {
    m: w.levels({"per_query": _per_query(meas, m)}, ids, meas["entropy"][m]["set"])["all"]
    for m in ("uniform", "temporal")
  }
  assert got[w.LOW][0] == pytest.approx(min(v["2019-29"] for v in level.values()))
  assert meas["entropy"]["cbqa_ft"]["entropy"] != w.entropy_columns(zero, ids)  # a copy changed


def _per_query(meas, model):
  e = meas["entropy"][model]
  return {i: {y: e["entropy"][y][k] for y in e["entropy"]} for k, i in enumerate(e["id"])}


def test_encyclopedia_wording_keeps_ids_sets_and_candidates(tmp_path):
  queries = tmp_path / "queries.jsonl"
  rows = [
    {"id": "frequent_000", "set": "frequent", "query": "The X Games will be held in _X_.",
     "candidates": "cities", "relation": "P276", "subject": "Q1"},
    {"id": "never_000", "set": "never", "query": "Tor is a city in _X_.",
     "candidates": "countries", "relation": "P17", "subject": "Q2"},
  ]  # fmt: skip
  queries.write_text("".join(json.dumps(r) + "\n" for r in rows))
  entities = tmp_path / "entities.tsv"
  entities.write_text("Q1\tX Games\t10\nQ2\tTor\t5\n")
  fr = FutureRelations(
    [FutureQuery(r["id"], r["set"], r["query"], r["candidates"]) for r in rows],
    {"cities": ["A", "B"], "countries": ["C"]},
  )
  enc = w.encyclopedia_wording(fr, str(queries), str(entities))
  assert [q.query for q in enc.queries] == [
    "The most recent edition of X Games took place in _X_.",
    "Tor is a city located in the country of _X_.",
  ]
  assert [(q.id, q.set, q.candidates) for q in enc.queries] == [
    (q.id, q.set, q.candidates) for q in fr.queries
  ]
  assert enc.candidates == fr.candidates
  assert (
    encyclopedia_sentence("P17", "Tor", "Ama") == "Tor is a city located in the country of Ama."
  )
  entities.write_text("Q1\tX Games\t10\n")
  with pytest.raises(w.DataError, match="never_000"):
    w.encyclopedia_wording(fr, str(queries), str(entities))


def _seed(v1=True, fall=1.5, margin=0.2):
  return {"V1": v1, "V2": True, "P1": fall >= w.FALL, "P2": margin > 0}


def test_the_criterion():
  assert w.judge([_seed(), _seed()])["outcome"].startswith("fails for a measured reason")
  assert w.judge([_seed(), _seed(margin=-0.1)])["outcome"].startswith("the wording accounts")
  assert w.judge([_seed(fall=0.5), _seed()])["outcome"] == "not explained"
  assert w.judge([_seed(v1=False), _seed()])["outcome"].startswith("void")
