"""CronQuestions loader on a small fixture written in the released pickle format."""

import os
import pickle
import re

import numpy as np
import pytest

from tlm.data import cronquestions
from tlm.data.metrics import token_f1
from tlm.errors import DataError

QUESTIONS = [
  {
    "question": "Who was the head coach of Red FC in 2012",
    "answers": {"Q21", "Q20"},
    "answer_type": "entity",
    "template": "Who was the {tail} of {head} in {time}",
    "entities": {"Q10"},
    "times": {2012},
    "relations": {"P286"},
    "type": "simple_entity",
    "annotation": {"head": "Q10", "time": "2012"},
    "uniq_id": 7,
    "paraphrases": ["Who coached Red FC in 2012"],
  },
  {
    "question": "When did Alice Adams join Blue United",
    "answers": {np.int64(2014), 2011},  # years, possibly numpy ints
    "answer_type": "time",
    "template": "When did {head} join {tail}",
    "entities": {"Q1", "Q11"},
    "times": set(),
    "relations": {"P54"},
    "type": "simple_time",
    "annotation": {},
    "uniq_id": 8,
    "paraphrases": [],
  },
  {
    "question": "Which team did Alice Adams play for before Blue United",
    "answers": {"Q10"},
    "answer_type": "entity",
    "type": "before_after",
    "uniq_id": 9,
  },
]
NAMES = "Q1\tAlice Adams\nQ10\tRed FC\nQ11\tBlue United\nQ20\tZed Zulu\nQ21\tYan Young\nQ99\t\n"


def _release(root, questions=QUESTIONS, names=NAMES, protocol=4, nested=True):
  base = root / "data" / "wikidata_big" if nested else root
  (base / "questions").mkdir(parents=True)
  (base / "kg").mkdir()
  for split in ("train", "valid", "test"):
    with open(base / "questions" / f"{split}.pickle", "wb") as f:
      pickle.dump(questions, f, protocol=protocol)
  (base / "kg" / "wd_id2entity_text.txt").write_text(names)
  return str(root)


@pytest.mark.parametrize("protocol", [2, 4])
def test_loads_release_layout(tmp_path, protocol):
  root = _release(tmp_path, protocol=protocol)
  qs = cronquestions.load_cronquestions(root, "test")
  assert [q.uniq_id for q in qs] == [7, 8, 9]
  coach, when, before = qs
  # Set order is not stable, so answers are sorted: ids numerically, years ascending.
  assert coach.answers == ["Zed Zulu", "Yan Young"] and coach.answer_ids == ["Q20", "Q21"]
  assert (coach.answer_type, coach.type) == ("entity", "simple_entity")
  assert when.answers == ["2011", "2014"] and when.answer_type == "time"
  assert before.answers == ["Red FC"]
  assert cronquestions.to_inputs_targets(coach) == (
    "Who was the head coach of Red FC in 2012",
    "Zed Zulu",
  )
  # Closed-book scoring takes the max over all answers.
  assert token_f1("Yan Young", coach.answers) == 1.0


def test_split_names_and_directory_forms(tmp_path):
  root = _release(tmp_path / "flat", nested=False)
  assert len(cronquestions.load_cronquestions(root, "val")) == 3
  assert len(cronquestions.load_cronquestions(root, "valid")) == 3
  with pytest.raises(DataError, match="unknown split 'dev'"):
    cronquestions.load_cronquestions(root, "dev")


class Evil:
  def __reduce__(self):
    return (os.system, ("echo pwned > /dev/null",))


def test_refuses_code_in_pickles(tmp_path):
  root = _release(tmp_path, questions=[{"question": "q", "answers": {"Q1"}, "x": Evil()}])
  with pytest.raises(DataError, match=r"refusing to unpickle (posix|os)\.system"):
    cronquestions.load_cronquestions(root, "train")


@pytest.mark.parametrize(
  "questions, message",
  [
    ([{"question": "q", "answers": set()}], "question #0: 'answers' must be a non-empty set"),
    ([{"question": "q", "answers": {"Q1"}}, {"answers": {"Q1"}}], "question #1: expected a dict"),
    ([{"question": "q", "answers": {"Q12345"}}], "question #0: answer Q12345 has no name"),
    ([{"question": "q", "answers": {(1, 2)}}], "question #0: answer (1, 2) is neither"),
    ({"question": "q"}, "expected a list of questions"),
  ],
)
def test_bad_release(tmp_path, questions, message):
  root = _release(tmp_path, questions=questions)
  with pytest.raises(DataError, match=re.escape(message)):
    cronquestions.load_cronquestions(root, "train")


def test_corrupt_pickle_and_missing_files(tmp_path):
  root = _release(tmp_path)
  path = tmp_path / "data" / "wikidata_big" / "questions" / "train.pickle"
  path.write_bytes(path.read_bytes()[:20])
  with pytest.raises(DataError, match="not a readable pickle"):
    cronquestions.load_cronquestions(root, "train")
  with pytest.raises(DataError, match="no such file"):
    cronquestions.load_cronquestions(str(tmp_path / "nowhere"), "train")
