"""CronQuestions (Saxena et al., ACL 2021) in the closed-book format of the paper's Table 4.

The release (github.com/apoorvumang/CronKGQA, `data.zip`) has, under `data/wikidata_big/`:
- `questions/{train,valid,test}.pickle`: a pickled list of dicts with `question` (text),
  `answers` (a set of Wikidata ids, or of years as ints), `answer_type` ("entity" | "time"),
  `type` (simple_entity, simple_time, before_after, first_last, time_join), `template`,
  `entities`, `times`, `relations`, `annotation`, `uniq_id`, `paraphrases`;
- `kg/wd_id2entity_text.txt`: `Q123<TAB>name` per line.

The paper (Sec. 3.1): "the model is trained to predict the first answer in the list of correct
answers ... during evaluation it is compared to each answer ... and we take the maximum". The
answers are a Python set, whose order is not stable across processes, so we sort them (ids
numerically, years ascending) and the first of that order is the target.

The pickles are read with a restricted unpickler that only rebuilds plain containers and
numbers (and numpy scalars), so a malicious file cannot run code.
"""

import dataclasses
import io
import numbers
import os
import pickle
import re

from tlm.errors import DataError
from tlm.line_files import iter_tsv

SPLIT_FILES = {"train": "train", "val": "valid", "valid": "valid", "test": "test"}
_ALLOWED = {
  (module, name)
  for module in ("builtins", "__builtin__")
  for name in (
    "set",
    "frozenset",
    "dict",
    "list",
    "tuple",
    "str",
    "int",
    "float",
    "bool",
    "bytes",
    "complex",
    "unicode",
    "long",
  )
} | {
  ("numpy", "dtype"),
  ("numpy.core.multiarray", "scalar"),
  ("numpy._core.multiarray", "scalar"),
  # Protocol 2 writes bytes (numpy scalars' payload) as _codecs.encode(str, "latin1").
  ("_codecs", "encode"),
}
_QID = re.compile(r"^Q(\d+)$")


class _RestrictedUnpickler(pickle.Unpickler):
  """Resolves only the harmless globals in `_ALLOWED`; anything else is a DataError."""

  def __init__(self, file, path: str):
    super().__init__(file)
    self._path = path

  def find_class(self, module, name):
    if (module, name) in _ALLOWED:
      return super().find_class(module, name)
    raise DataError(
      f"refusing to unpickle {module}.{name} (only plain data is allowed)", self._path
    )


def safe_load_pickle(path: str):
  """Unpickles plain data (containers, strings, numbers) without running arbitrary code."""
  if not os.path.isfile(path):
    raise DataError("no such file", path)
  with open(path, "rb") as f:
    data = f.read()
  try:
    return _RestrictedUnpickler(io.BytesIO(data), path).load()
  except DataError:
    raise
  except Exception as e:  # truncated or corrupt pickles raise many exception types
    raise DataError(f"not a readable pickle ({type(e).__name__}: {e})", path) from None


@dataclasses.dataclass(frozen=True)
class CronQuestion:
  """One question: `answers` are names (entities) or years as strings, in a stable order."""

  question: str
  answers: list
  answer_ids: list
  answer_type: str
  type: str
  uniq_id: int


def to_inputs_targets(q: CronQuestion) -> tuple[str, str]:
  """Closed-book pair: the question and its first answer."""
  return q.question, q.answers[0]


def read_entity_names(path: str) -> dict[str, str]:
  """`kg/wd_id2entity_text.txt`: `id<TAB>name` per line (a missing name is "")."""
  names = {}
  for line_no, cols in iter_tsv(path):
    if len(cols) > 2 or not cols[0].strip():
      raise DataError("expected id<TAB>name", path, line_no)
    names[cols[0].strip()] = cols[1].strip() if len(cols) > 1 else ""
  return names


def _answer_order(answer):
  if isinstance(answer, str):
    m = _QID.match(answer)
    return (1, int(m.group(1)), "") if m else (2, 0, answer)
  return (0, int(answer), "")


def _root(data_dir: str) -> str:
  """Accepts the release root (with data/wikidata_big/) or wikidata_big itself."""
  nested = os.path.join(data_dir, "data", "wikidata_big")
  return nested if os.path.isdir(nested) else data_dir


def load_cronquestions(data_dir: str, split: str) -> list[CronQuestion]:
  """Loads one split of the released CronQuestions with answers as names.

  Args:
    data_dir: the directory holding `questions/` and `kg/` (or the release root above it).
    split: "train", "val" (or "valid"), or "test".

  Returns:
    The questions in file order.

  Raises:
    DataError: a missing file, an unsafe or malformed pickle, a question without answers, or an
      entity answer with no name in `kg/wd_id2entity_text.txt`.
  """
  if split not in SPLIT_FILES:
    raise DataError(f"unknown split {split!r} (expected train, val or test)", data_dir)
  root = _root(data_dir)
  path = os.path.join(root, "questions", f"{SPLIT_FILES[split]}.pickle")
  names_path = os.path.join(root, "kg", "wd_id2entity_text.txt")
  rows = safe_load_pickle(path)
  names = read_entity_names(names_path)
  if not isinstance(rows, list):
    raise DataError(f"expected a list of questions, got {type(rows).__name__}", path)
  out = []
  for i, row in enumerate(rows):
    where = f"question #{i}"
    if not isinstance(row, dict) or not isinstance(row.get("question"), str):
      raise DataError(f"{where}: expected a dict with a 'question' string", path)
    raw = row.get("answers")
    if not isinstance(raw, set | frozenset | list | tuple) or not raw:
      raise DataError(f"{where}: 'answers' must be a non-empty set", path)
    answer_type = row.get("answer_type", "entity")
    bad = [a for a in raw if isinstance(a, bool) or not isinstance(a, str | numbers.Integral)]
    if bad:
      raise DataError(f"{where}: answer {bad[0]!r} is neither an id nor a year", path)
    ids, texts = [], []
    for a in sorted(raw, key=_answer_order):
      if isinstance(a, str) and _QID.match(a):
        if a not in names:
          raise DataError(f"{where}: answer {a} has no name in {names_path}", path)
        ids.append(a)
        texts.append(names[a])
      else:
        ids.append(str(a))
        texts.append(str(a))
    out.append(
      CronQuestion(
        question=row["question"],
        answers=texts,
        answer_ids=ids,
        answer_type=str(answer_type),
        type=str(row.get("type", "")),
        uniq_id=int(row.get("uniq_id", i)),
      )
    )
  return out
