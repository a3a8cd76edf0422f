"""World v4's measures on small worlds, and the registered targets as the script applies them."""

import os
import re

from research.world4 import measure
from tlm.synthetic import world as world_lib

HERE = os.path.dirname(os.path.abspath(__file__))


def test_each_target_is_quoted_from_the_registration():
  text = re.sub(r"\s+", " ", open(os.path.join(HERE, "PREREGISTRATION.md")).read())
  for key, target in measure.TARGETS.items():
    assert f"Target: {target}" in text, key


def test_start_years_counts_words_and_ordered_sentences():
  got = measure.start_years(["The 2014 season follows its 2013 season. Plans for 2030."])
  assert got["count"][2014] == 1 and got["count"][2030] == 1 and got["count"][2000] == 0
  assert got["ordered"][2013] == 1 and got["ordered"][2014] == 1 and got["ordered"][2030] == 0
  assert got["min_count"] == 0


def test_v3_has_a_floor_and_an_undated_start_v4_neither():
  for version, floor in ((3, True), (4, False)):
    world, docs = world_lib.generate(5, 0.3, version=version)
    texts = world_lib.pretraining_texts(world, version)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
      examples, facts_path = measure.w3._test_split(world, tmp)
      cov = measure.coverage(world, docs, examples, facts_path)
    years = measure.start_years(texts["generic"])
    if floor:
      assert cov["unstated_share"] == 0 and cov["pooling_share"] == 0
      assert years["min_count"] == 0
    else:
      assert cov["unstated_share"] > 0
      assert years["min_count"] > 0 and years["min_ordered"] > 0
    assert cov["prominence_rank_correlation"] > 0


def test_looking_classifies_objects_by_the_pairs_years():
  class S:
    def __init__(self, obj):
      self.fact = type("F", (), {"subject": "Q1", "relation": "P54", "obj": obj})()
      self.about = None

  class D:
    date = 734869  # 2013-01-01
    sentences = [S("A"), S("B"), S("C"), S("D")]

  gold = {("Q1", "P54"): {2012: frozenset({"A"}), 2013: frozenset({"B"}), 2014: frozenset({"C"})}}
  got = measure.looking([D()], gold)
  assert (got["current"], got["back"], got["ahead"]) == (1, 1, 1)
