"""What the claims read, on fixtures: Figure 2's fact durations from the facts' own dates, and
the per-query accessors of `tlm.miniature.measurements` on the outputs of the real evaluation
functions (a misspelt key fails here, in a second, not at the end of a reproduction)."""

import json

import numpy as np
import pytest

from tlm.configs.years import PROBE_YEARS, TRAIN_YEARS
from tlm.data import fact_durations, templama
from tlm.data.conditioning import route_to_expert
from tlm.data.formatting import TextExample
from tlm.data.future_relations import FutureQuery, FutureRelations
from tlm.eval import future
from tlm.eval.templama_eval import evaluate_news, evaluate_templama
from tlm.miniature import measurements

FACTS = "tests/fixtures/data/templama_facts.tsv"
ENTITIES = "tests/fixtures/data/templama_entities.tsv"


@pytest.fixture(scope="module")
def fixture_templama(tmp_path_factory):
  out = tmp_path_factory.mktemp("templama") / "t"
  templama.build_templama(FACTS, ENTITIES, str(out))
  examples = [ex for split in templama.load_templama_splits(str(out)).values() for ex in split]
  return sorted(examples, key=lambda ex: ex.id)


def test_fact_durations_from_the_facts_own_dates(fixture_templama):
  by_id = {ex.id: ex for ex in fixture_templama}
  dates = fact_durations.durations_from_facts(fact_durations.read_fact_spans(FACTS), by_id.values())
  buckets = fact_durations.durations_from_buckets(list(by_id.values()))
  # Q1 at Q10 (Red FC) 2008-2011: 4 years, of which TempLAMA (2010-20) sees 2.
  assert (dates["Q1_P54_2010"], buckets["Q1_P54_2010"]) == (4, 2)
  # Q1 at Q11: 2011-2013 and January 2014-2016 touch, so one fact of 6 years.
  assert dates["Q1_P54_2013"] == 6
  # Q2 at Q12: no start, ended 2012: from the earliest date in the file (2001), 12 years.
  assert (dates["Q2_P54_2011"], buckets["Q2_P54_2011"]) == (12, 3)
  # Q2 at Q13: from 2013 with no end: open to the last queried year (2020), 8 years.
  assert dates["Q2_P54_2020"] == 8
  # Q108 of Q1 at Q30: 15 March 2010 to 2012 (year precision): 3 calendar years.
  assert dates["Q1_P108_2011"] == 3
  # A short fact stays short: Q3 at Q10 in 2012 only.
  assert dates["Q3_P54_2012"] == 1
  assert set(dates) == set(by_id)  # every query's first answer is a dated fact


def test_fact_spans_merge_touching_facts_and_keep_open_ends(tmp_path):
  facts = tmp_path / "facts.tsv"
  facts.write_text(
    "P54\tQ1\tQ2\tP580=200503\tP582=2008\n"
    "P54\tQ1\tQ2\tP580=2009\tP582=201006\n"  # touches the first: one span 2005-03 .. 2010-06
    "P54\tQ1\tQ3\tP580=2014\tP580=2016\n"  # open; two starts: the earlier
    "P31\tQ1\tQ5\n"  # no date: no duration
  )
  spans = fact_durations.read_fact_spans(str(facts))
  assert spans.spans[("P54", "Q1", "Q2")] == [(2005 * 12 + 2, 2010 * 12 + 5)]
  ((start, end),) = spans.spans[("P54", "Q1", "Q3")]
  assert start == 2014 * 12 and end > 3000 * 12 and spans.last == 2014 * 12
  assert ("P31", "Q1", "Q5") not in spans.spans
  assert fact_durations.bucket_months("2014-Q2") == (2014 * 12 + 3, 2014 * 12 + 5)
  assert fact_durations.bucket_months("2014-05") == (2014 * 12 + 4,) * 2


class _Model:
  """Answers the first answer in even years, "nobody" otherwise; log p = -year % 3 per token."""

  def __init__(self, answers):
    self.answers = answers

  def predict(self, queries, years):
    return [
      self.answers.get((q, y), "nobody") if y % 2 == 0 else "nobody" for q, y in zip(queries, years)
    ]

  def log_likelihood(self, queries, years, targets):
    n = np.array([len(t.split()) for t in targets])
    return -n * (np.asarray(years) % 3).astype(float), n

  def rank(self, queries, years, candidates):
    return np.array([[-float(i * (y - 2017)) for i in range(len(candidates))] for y in years])


def test_accessors_read_what_the_evaluation_writes(fixture_templama):
  from tlm.data.formatting import templama_query_input

  answers = {(templama_query_input(ex.query), ex.year): ex.answers[0][0] for ex in fixture_templama}
  model = _Model(answers)
  news = {
    y: [TextExample(f"text {y} {i}", "a b" if i else "c", y) for i in range(3)]
    for y in (2012, 2013, 2019)
  }
  durations = fact_durations.durations_from_facts(
    fact_durations.read_fact_spans(FACTS), fixture_templama
  )
  result = {
    "templama": evaluate_templama(model, fixture_templama, durations=durations),
    "news": evaluate_news(model, news),
  }
  correct_2018 = {ex.id: ex.answers[0][0] for ex in fixture_templama if ex.year == 2018}
  fr = FutureRelations(
    [FutureQuery("q1", "never", "X is in _X_.", "c"), FutureQuery("q2", "rare", "Y _X_.", "c")],
    {"c": ["A", "B", "C"]},
  )
  fut = {
    "loglik_change": future.loglik_change(model, fixture_templama, correct_2018),
    "entropy": future.future_entropy(model, fr),
  }
  expert_f1 = {2012: [r["f1"] for r in result["templama"]["records"]]}
  meas = measurements.collect(
    3, {"uniform": result}, expert_f1, {"uniform": fut}, {"q1": "never", "q2": "rare"}
  )
  meas = json.loads(json.dumps(meas))  # what per_query.json holds

  t = measurements.templama(meas, "uniform", TRAIN_YEARS)
  seen = [ex for ex in fixture_templama if ex.year <= 2018]
  assert list(t["id"]) == [ex.id for ex in seen]
  assert list(t["duration"]) == [durations[ex.id] for ex in seen]
  assert list(t["f1"]) == [1.0 if ex.year % 2 == 0 else 0.0 for ex in seen]
  assert list(t["first_answer"]) == [ex.answers[0][0] for ex in seen]
  assert t["most_frequent_is_correct"].dtype == bool and t["subject"][0] == seen[0].subject
  n = measurements.news(meas, "uniform", TRAIN_YEARS)
  assert list(n["year"]) == [2012] * 3 + [2013] * 3 and list(n["tokens"]) == [1, 2, 2] * 2
  np.testing.assert_allclose(n["loglik"], [-2, -4, -4, 0, 0, 0])  # 2012 % 3 = 2 per token
  years, f1 = measurements.experts(meas)
  assert list(years) == [ex.year for ex in fixture_templama] and set(f1) == {2012}
  groups = measurements.loglik_change(meas, "uniform")
  assert set(groups) == {"single", "multiple"} and sorted(groups["multiple"]) == list(PROBE_YEARS)
  assert sum(len(groups[g].get(2019, [])) for g in groups) == len(correct_2018)
  # log p is -2 per token in 2018 (2018 % 3) and 0 in 2019: every change is positive.
  assert len(groups["multiple"][2019]) and (groups["multiple"][2019] > 0).all()
  ids, sets, ent = measurements.entropy(meas, "uniform")
  assert ids == ["q1", "q2"] and list(sets) == ["never", "rare"] and 2018 in ent
  for missing in (
    lambda: measurements.templama(meas, "cbqa_ft", TRAIN_YEARS),
    lambda: measurements.loglik_change(meas, "temporal"),
    lambda: measurements.entropy(meas, "cbqa"),
    lambda: measurements.adaptation(meas, "temporal"),
  ):
    with pytest.raises(measurements.MissingInput):
      missing()


def test_route_to_expert():
  experts = list(range(2010, 2019))
  assert route_to_expert(2014, experts) == 2014
  assert route_to_expert(2019, experts) == 2018
  assert route_to_expert(2029, experts) == 2018
  assert route_to_expert(2004, experts) == 2010
  assert route_to_expert(2013, [2010, 2016]) == 2010  # equidistant: the earlier expert
  with pytest.raises(ValueError):
    route_to_expert(2014, [])
