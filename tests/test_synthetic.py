"""Tests of the embedded synthetic world (tlm/synthetic/, tlm/cli/build_world.py).

The world's files are read back with small parsers written here and in tests/helpers.py (the
facts reader, shared with test_synthetic_records.py), independently of the writer,
and checked against the documented formats and against the properties docs/reproduction.md
(The synthetic world) asks for:
determinism, never/always-changing relations, news growth, explicit-year share, every fact of a
year stated in that year's news, the vocabulary. The change rates and the news sentences as
records: test_synthetic_records.py.
"""

import datetime
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import ROOT, TEMPLAMA, WINDOW, group, primaries, read_facts
from tlm import synthetic
from tlm.data.vocab import Vocabulary
from tlm.errors import ConfigError, UserError

OTHER = ("P159", "P276", "P131", "P17")
YEAR = re.compile(r"\b(?:19|20)\d\d\b")
NEWS_YEARS = range(2010, 2021)


# --- independent readers ---------------------------------------------------------------------


def read_entities(path):
  out = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      qid, name, pop = line.rstrip("\n").split("\t")
      assert re.fullmatch(r"Q\d+", qid) and qid not in out
      assert re.fullmatch(r"[A-Z][A-Za-z' ]*[a-z]", name), name
      assert int(pop) >= 1
      out[qid] = name
  return out


def read_news(path):
  docs = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      obj = json.loads(line)
      assert set(obj) == {"date", "text"}
      date = datetime.date.fromisoformat(obj["date"])
      sentences = re.split(r"(?<=\.)\s+(?=[A-Z])", obj["text"])
      assert all(s.endswith(".") for s in sentences), obj["text"]
      docs.append((date, sentences))
  return docs


def valid_in_year(fact, year):
  if fact["rel"] == "P276":
    return fact["start"].year == year
  lo = fact["start"] or datetime.date.min
  hi = fact["end"] or datetime.date.max
  return lo <= datetime.date(year, 12, 31) and hi >= datetime.date(year, 1, 1)


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("small") / "world")
  return path, synthetic.build_world(path, seed=0, scale=0.2)


@pytest.fixture(scope="module")
def small_v3(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("small_v3") / "world")
  return path, synthetic.build_world(path, seed=0, scale=0.2, version=3)


@pytest.fixture(scope="module")
def full_v3(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("full_v3") / "world")
  return path, synthetic.build_world(path, seed=0, scale=1.0, version=3)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("full") / "world")
  return path, synthetic.build_world(path, seed=0, scale=1.0)


def files_of(path):
  out = {}
  for dirpath, _, names in os.walk(path):
    for name in names:
      full_path = os.path.join(dirpath, name)
      with open(full_path, "rb") as f:
        out[os.path.relpath(full_path, path)] = f.read()
  return out


# --- determinism -----------------------------------------------------------------------------


def test_same_seed_gives_byte_identical_files(small, tmp_path):
  path, _ = small
  again = str(tmp_path / "again")
  synthetic.build_world(again, seed=0, scale=0.2)
  a, b = files_of(path), files_of(again)
  assert sorted(a) == sorted(b)
  expected = {"news.jsonl", "facts.tsv", "entities.tsv", "spiece.model", "stats.json"}
  assert expected | {"future_relations/queries.jsonl"} <= set(a)
  for name in a:
    assert a[name] == b[name], name


def test_different_seed_differs(small, tmp_path):
  path, _ = small
  other = str(tmp_path / "other")
  synthetic.build_world(other, seed=1, scale=0.2)
  a, b = files_of(path), files_of(other)
  for name in ("news.jsonl", "facts.tsv", "entities.tsv", "spiece.model"):
    assert a[name] != b[name], name


# --- formats ---------------------------------------------------------------------------------


def test_files_parse_in_the_documented_formats(small):
  path, counts = small
  names = read_entities(os.path.join(path, "entities.tsv"))
  assert len(set(names.values())) == len(names) == counts["entities"]
  facts = read_facts(os.path.join(path, "facts.tsv"))
  assert len(facts) == counts["facts"]
  for f in facts:
    assert f["s"] in names and f["o"] in names and f["s"] != f["o"]
  assert {f["rel"] for f in facts} == set(TEMPLAMA) | set(OTHER)
  docs = read_news(os.path.join(path, "news.jsonl"))
  assert [d for d, _ in docs] == sorted(d for d, _ in docs)
  assert {d.year for d, _ in docs} == set(NEWS_YEARS)
  assert min(len(s) for _, s in docs) >= 2
  assert sum(len(s) for _, s in docs) == counts["sentences"]
  with open(os.path.join(path, "stats.json"), encoding="utf-8") as f:
    assert json.load(f) == counts


def test_dates_missing_qualifiers_and_precision(full):
  facts = read_facts(os.path.join(full[0], "facts.tsv"))
  dated = [f for f in facts if f["rel"] in TEMPLAMA]
  digits = [n for f in dated for n in f["digits"]]
  share = {n: digits.count(n) / len(digits) for n in (4, 6, 8)}
  assert share[6] > 0.6 and share[4] > 0.03 and share[8] > 0.05, share
  assert sum(f["start"] is None for f in dated) > 0.1 * len(dated)
  assert sum(f["end"] is None for f in dated) > 0.1 * len(dated)
  starts = [f["start"] for f in dated if f["start"] is not None]
  ends = [f["end"] for f in dated if f["end"] is not None]
  assert min(starts).year >= 1995 and max(ends) <= WINDOW[1]
  # Every dated fact meets the window: facts span ~2004-2022.
  assert all(f["end"] is None or f["end"] >= WINDOW[0] for f in dated)


# --- facts -----------------------------------------------------------------------------------


def test_never_changing_relations_never_change(full):
  facts = read_facts(os.path.join(full[0], "facts.tsv"))
  for rel in ("P131", "P17"):
    subjects = group(facts, rel)
    assert subjects
    for fs in subjects.values():
      assert len(fs) == 1 and fs[0]["start"] is None and fs[0]["end"] is None


def test_annual_events_change_host_every_year(full):
  facts = read_facts(os.path.join(full[0], "facts.tsv"))
  events = group(facts, "P276")
  assert len(events) >= 10
  for fs in events.values():
    fs = sorted(fs, key=lambda f: f["start"])
    assert [f["start"].year for f in fs] == list(range(2004, 2023))
    assert all(f["end"].year == f["start"].year for f in fs)
    hosts = [f["o"] for f in fs]
    assert all(h != p for h, p in zip(hosts[1:], hosts))
    assert all(h not in hosts[i : i + 2] for i, h in enumerate(hosts[2:]))


def test_templama_subjects_mostly_change_and_the_cut_matters(full):
  """The builder's rule (more than one object in facts dated >= 2010) keeps most subjects."""
  facts = read_facts(os.path.join(full[0], "facts.tsv"))
  kept = total = 0
  for rel in TEMPLAMA:
    subjects = group(facts, rel)
    n_kept = 0
    for fs in subjects.values():
      recent = [
        f
        for f in fs
        if (f["start"] and f["start"].year >= 2010) or (f["end"] and f["end"].year >= 2010)
      ]
      n_kept += len({f["o"] for f in recent}) > 1
    assert 0 < n_kept < len(subjects), rel
    kept += n_kept
    total += len(subjects)
  assert 0.6 < kept / total < 0.95
  assert 120 <= kept <= 180


def test_sizing_at_scale_one(full):
  _, counts = full
  assert 120 <= sum(counts["templama_subjects"].values()) <= 180
  assert 1200 <= sum(counts["templama_queries"].values()) <= 1900
  per_year = [counts["sentences_per_year"][str(y)] for y in NEWS_YEARS]
  assert 2000 <= min(per_year) and max(per_year) <= 10000


def test_several_answers_in_some_years(full):
  facts = read_facts(os.path.join(full[0], "facts.tsv"))
  overlapping = 0
  for rel in ("P54", "P108", "P69", "P39", "P127"):
    for fs in group(facts, rel).values():
      overlapping += len(fs) - len(primaries(fs))
  assert overlapping >= 5


# --- news ------------------------------------------------------------------------------------


def test_document_counts_grow_with_the_year(full):
  docs = read_news(os.path.join(full[0], "news.jsonl"))
  per_year = [sum(d.year == y for d, _ in docs) for y in NEWS_YEARS]
  assert all(b > a for a, b in zip(per_year, per_year[1:])), per_year
  assert 1.1**10 * 0.8 < per_year[-1] / per_year[0] < 1.1**10 * 1.2


def test_explicit_year_share_is_near_the_paper(full):
  """CustomNews: 3.9% of sentences mention a year, 2.1% the publication year."""
  docs = read_news(os.path.join(full[0], "news.jsonl"))
  n = with_year = same_year = 0
  for date, sentences in docs:
    for s in sentences:
      n += 1
      years = {int(y) for y in YEAR.findall(s)}
      with_year += bool(years)
      same_year += date.year in years
  assert 0.035 < with_year / n < 0.045
  assert 0.4 < same_year / with_year < 0.65


def test_world_v3_stays_byte_identical(tmp_path):
  """`data.world_version=3` builds the files of the results committed before world v4, byte for
  byte (the sha256 of seed 3 at scale 0.2, built by the code before versions existed)."""
  import hashlib

  path = str(tmp_path / "v3")
  synthetic.build_world(path, seed=3, scale=0.2, version=3)
  got = {k: hashlib.sha256(v).hexdigest()[:16] for k, v in files_of(path).items()}
  assert got == WORLD_V3_S3_X02


WORLD_V3_S3_X02 = {
  "entities.tsv": "81eba8e0ba7867be",
  "facts.tsv": "1b94a1626dff139b",
  "future_relations/candidates/cities.txt": "02aa130192c37927",
  "future_relations/candidates/countries.txt": "618ce48d0ddd07f9",
  "future_relations/queries.jsonl": "f865c0d411b2bdf6",
  "news.jsonl": "afe041af532e8777",
  "pretrain/encyclopedia.jsonl": "e2b24a51fb9006f7",
  "pretrain/generic.jsonl": "80d555d821006db2",
  "spiece.model": "6874745c39912017",
  "stats.json": "a7cef0cd80a7bfbb",
}


def test_v4_changes_the_text_only(small, tmp_path):
  """World v4 has world v3's entities, facts and future-relations queries (the same seed)."""
  path, _ = small
  v3 = str(tmp_path / "v3")
  synthetic.build_world(v3, seed=0, scale=0.2, version=3)
  a, b = files_of(path), files_of(v3)
  for name in a:
    if name.startswith(("entities", "facts", "future_relations")):
      assert a[name] == b[name], name
  assert a["news.jsonl"] != b["news.jsonl"]
  assert json.loads(a["stats.json"])["world_version"] == 4
  assert "world_version" not in json.loads(b["stats.json"])


def test_every_fact_of_a_year_is_stated_in_that_years_news_in_v3(small_v3):
  """World v3's floor (`min_mentions` = 3); world v4 has none (next test)."""
  path, _ = small_v3
  names = read_entities(os.path.join(path, "entities.tsv"))
  facts = read_facts(os.path.join(path, "facts.tsv"))
  by_year = {y: [] for y in NEWS_YEARS}
  for date, sentences in read_news(os.path.join(path, "news.jsonl")):
    by_year[date.year].extend(sentences)
  checked = 0
  for year, sentences in by_year.items():
    mentions = {}
    for i, s in enumerate(sentences):
      for qid, name in names.items():
        if name in s:
          mentions.setdefault(qid, set()).add(i)
    for f in facts:
      if valid_in_year(f, year):
        both = mentions.get(f["s"], set()) & mentions.get(f["o"], set())
        assert len(both) >= 3, (year, f, names[f["s"]], names[f["o"]])
        checked += 1
  assert checked > 500


# --- future relations, vocabulary ------------------------------------------------------------


def test_future_relations_sets(small):
  path, _ = small
  fr = os.path.join(path, "future_relations")
  names = read_entities(os.path.join(path, "entities.tsv"))
  facts = read_facts(os.path.join(path, "facts.tsv"))
  candidates = {}
  for name in ("cities", "countries"):
    with open(os.path.join(fr, "candidates", f"{name}.txt"), encoding="utf-8") as f:
      candidates[name] = f.read().splitlines()
    assert len(set(candidates[name])) == len(candidates[name]) >= 5
  sets = {}
  with open(os.path.join(fr, "queries.jsonl"), encoding="utf-8") as f:
    for line in f:
      q = json.loads(line)
      assert {"id", "set", "query", "candidates"} <= set(q)
      assert q["query"].count("_X_") == 1 and not YEAR.search(q["query"])
      sets.setdefault(q["set"], []).append(q)
      # The object in 2018 (or the 2018 edition's host) is among the candidates.
      objs = [
        names[f["o"]]
        for f in facts
        if f["s"] == q["subject"] and f["rel"] == q["relation"] and valid_in_year(f, 2018)
      ]
      assert objs and all(o in candidates[q["candidates"]] for o in objs), q
  assert set(sets) == {"frequent", "rare", "never"}
  assert all(10 <= len(v) <= 30 for v in sets.values())
  assert len({q["id"] for v in sets.values() for q in v}) == sum(len(v) for v in sets.values())


def test_vocabulary_covers_names_templates_and_time_prefixes(small):
  path, _ = small
  vocab = Vocabulary(os.path.join(path, "spiece.model"))
  assert vocab.vocab_size == synthetic.vocab_pieces(0.2) + 100
  for name in read_entities(os.path.join(path, "entities.tsv")).values():
    assert vocab.decode(vocab.encode(name)) == name
  texts = [
    "year: 2014 Zed Quux plays for Yves & Co.",
    "In 2029, the Space Needle will be in Seattle!",
    "X holds the position of Y. X is a member of the Y. Y is the head of the government of X.",
    "Y works for X; X attended Y, Y is the chair of X (X is owned by Y).",
  ]
  for text in texts:
    ids = vocab.encode(text)
    assert vocab.unk_id not in ids, text
    assert vocab.decode(ids) == text
  assert vocab.sentinel_id(0) in vocab.encode("X plays for <extra_id_0>.")


def test_every_probe_year_is_one_whole_piece(full):
  # Every year a time prefix, a probe, a figure or a claim uses is one piece of the default
  # world's vocabulary, in both ways the models read a year; otherwise the years the news
  # seldom names split into digits and Figures 3 and 4 show a step where the split starts.
  from tlm import configs
  from tlm.configs import years as paper_years
  from tlm.data.conditioning import format_input

  path, _ = full
  vocab = Vocabulary(os.path.join(path, "spiece.model"))
  c = configs.get("tiny_temporal")
  years = set(c.data.train_years) | set(c.eval.years) | {c.adapt.new_year}
  years |= set(paper_years.PROBE_YEARS) | {paper_years.REFERENCE_YEAR}
  years |= set(range(2000, 2036))
  assert years <= set(synthetic.settings.YEAR_PIECES)
  query = "Zed Quux plays for _X_."
  for year in sorted(years):
    piece = vocab.encode(str(year))
    assert len(piece) == 1 and vocab.decode(piece) == str(year), (year, piece)
    for conditioning in ("temporal", "in_text"):
      ids = vocab.encode(format_input(query, year, conditioning))
      assert ids.count(piece[0]) == 1, (year, conditioning, ids)


# --- errors and the CLI ----------------------------------------------------------------------


@pytest.mark.parametrize("scale", [0, -1.0, float("nan"), float("inf")])
def test_bad_scale_is_a_config_error(tmp_path, scale):
  with pytest.raises(ConfigError):
    synthetic.build_world(str(tmp_path / "w"), scale=scale)
  assert not os.path.exists(tmp_path / "w")


def test_refuses_to_replace_a_foreign_directory(tmp_path):
  (tmp_path / "notes.txt").write_text("mine")
  with pytest.raises(UserError, match="not a synthetic world"):
    synthetic.build_world(str(tmp_path), scale=0.2)
  assert (tmp_path / "notes.txt").read_text() == "mine"


def run_cli(*args):
  return subprocess.run(
    [sys.executable, os.path.join(ROOT, "run.py"), "--mode=build_world", *args],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=120,
  )


def test_cli_builds_and_prints_counts(tmp_path):
  out = tmp_path / "world"
  proc = run_cli(f"--output_dir={out}", "--scale=0.2", "--seed=3")
  assert proc.returncode == 0, proc.stderr
  assert "TempLAMA-eligible" in proc.stdout and "documents" in proc.stdout
  counts = json.loads(proc.stdout.strip().splitlines()[-1])
  assert counts["seed"] == 3 and counts["scale"] == 0.2
  assert os.path.isfile(out / "news.jsonl") and os.path.isfile(out / "spiece.model")


def test_the_world_never_imports_jax():
  code = (
    "import sys, tlm.cli.build_world, tlm.synthetic; "
    "assert not [m for m in sys.modules if m.split('.')[0] in ('jax', 'flax')]"
  )
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
  assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("args", [("--scale=0",), ("--scale=-2",), ()])
def test_cli_bad_arguments_fail_in_one_line_and_write_nothing(tmp_path, args):
  out = tmp_path / "world"
  if args:
    args = (f"--output_dir={out}", *args)
  proc = run_cli(*args)
  assert proc.returncode != 0
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
  assert not os.path.exists(out) and os.listdir(tmp_path) == []


# --- fidelity: template-worded sentences, answers that change, pre-training corpora ----------


def _templama_sentences(path):
  """Every sentence the TempLAMA templates make of the world's facts ("X plays for Y.")."""
  from tlm.data.templama import read_templates

  templates = read_templates()
  names = read_entities(os.path.join(path, "entities.tsv"))
  out = set()
  for f in read_facts(os.path.join(path, "facts.tsv")):
    if f["rel"] in templates:
      text = templates[f["rel"]].replace("<subject>", names[f["s"]])
      out.add(text.replace("<object>", names[f["o"]]))
  return out


def _news_sentences(path):
  return [s for _, sentences in read_news(os.path.join(path, "news.jsonl")) for s in sentences]


def test_verbatim_template_sentences_are_rare(full):
  """Measured on the built files: about 2% of the TempLAMA relations' fact sentences (about
  0.7% of all sentences) are worded exactly as a TempLAMA cloze with its answer."""
  path, counts = full
  templated = _templama_sentences(path)
  sentences = _news_sentences(path)
  verbatim = sum(s in templated for s in sentences)
  share = verbatim / len(sentences)
  assert 0.003 < share < 0.012, share
  assert counts["templama_template_sentence_share"] == pytest.approx(share, abs=0.001)


def test_many_answers_change_inside_the_training_years(full):
  """The mechanism needs subjects whose answer changes within 2010-18: over 100 pairs."""
  facts = read_facts(os.path.join(full[0], "facts.tsv"))
  changing = 0
  for rel in TEMPLAMA:
    for fs in group(facts, rel).values():
      answers = set()
      for year in range(2010, 2019):
        mid = datetime.date(year, 7, 1)
        held = [
          f
          for f in fs
          if (f["start"] or datetime.date.min) <= mid and mid <= (f["end"] or datetime.date.max)
        ]
        answers.add(tuple(sorted(f["o"] for f in held)))
      changing += len(answers) > 1
  assert changing >= 110, changing


def test_v4_states_facts_by_prominence_and_the_news_of_the_day():
  """No floor: some (fact, year) pairs go unstated, more for little-known subjects; a fact is
  stated most just after it begins."""
  from tlm.synthetic.news import news_interval
  from tlm.synthetic.world_records import day, year_of

  world, docs = synthetic.generate(0, 0.5)
  stated = {}
  for d in docs:
    for sent in d.sentences:
      if sent.kind == "fact":
        key = (sent.fact, year_of(d.date))
        stated.setdefault(key, []).append(d.date - (sent.fact.start or -(10**9)))
  unstated, weights = [], []
  for f in world.facts:
    for y in range(2010, 2019):
      if news_interval(f, day(y), day(y, 12, 31)) is not None:
        unstated.append((f, y) not in stated)
        weights.append(world.entities[f.subject].weight)
  unstated, weights = np.array(unstated), np.array(weights)
  assert 0.05 < unstated.mean() < 0.5
  assert weights[unstated].mean() < weights[~unstated].mean()
  ages = np.concatenate([a for a in stated.values()])
  recent = ages[(ages >= 0) & (ages < 365 * 4)]
  assert (recent < 120).mean() > 3 * (120 / (365 * 4))  # the first months carry the most


def test_pretraining_corpora_of_v3_have_no_news_sentence_and_no_year(full_v3):
  from tlm.data.salient_spans import split_sentences

  path, _ = full_v3
  news = set(_news_sentences(path))
  names = read_entities(os.path.join(path, "entities.tsv"))
  for corpus in ("generic", "encyclopedia"):
    with open(os.path.join(path, "pretrain", f"{corpus}.jsonl"), encoding="utf-8") as f:
      texts = [json.loads(line)["text"] for line in f]
    assert len(texts) == len(names), corpus  # one document per entity
    sentences = [s for t in texts for s in split_sentences(t)]
    assert sentences and not any(s in news for s in sentences), corpus
    assert not any(YEAR.search(s) for s in sentences), corpus


def test_v4_start_reads_every_year_in_order_and_the_encyclopedia_histories(full):
  """The generic corpus names every year of 2000-2035 next to its neighbours, in no news
  sentence; the encyclopedia's histories give each ended tenure's years as the facts do."""
  from tlm.data.salient_spans import split_sentences

  path, _ = full
  news = set(_news_sentences(path))
  corpora = {}
  for corpus in ("generic", "encyclopedia"):
    with open(os.path.join(path, "pretrain", f"{corpus}.jsonl"), encoding="utf-8") as f:
      corpora[corpus] = [s for line in f for s in split_sentences(json.loads(line)["text"])]
    assert not any(s in news for s in corpora[corpus]), corpus
  for year in range(2000, 2036):
    near = [
      s
      for s in corpora["generic"]
      if str(year) in s and re.search(rf"\b({year - 1}|{year + 1})\b", s)
    ]
    assert len(near) >= 5, year
  names = read_entities(os.path.join(path, "entities.tsv"))
  facts = read_facts(os.path.join(path, "facts.tsv"))
  history = set(corpora["encyclopedia"])
  ended = [
    f
    for fs in group(facts, "P54").values()
    for f in primaries(fs)
    if f["start"] and f["end"] and f["end"] <= datetime.date(2019, 12, 31)
  ]
  assert len(ended) > 20
  for f in ended:
    a, b = f["start"].year, f["end"].year
    span = f"in {b}" if a == b else f"from {a} to {b}"
    assert f"{names[f['s']]} was a player of the club {names[f['o']]} {span}." in history


def test_generic_corpus_states_no_time_varying_fact(full):
  """The public-T5 corpus names a subject and its object of a TempLAMA fact in no sentence."""
  from tlm.data.salient_spans import split_sentences

  path, _ = full
  names = read_entities(os.path.join(path, "entities.tsv"))
  facts = read_facts(os.path.join(path, "facts.tsv"))
  pairs = {(names[f["s"]], names[f["o"]]) for f in facts if f["rel"] in TEMPLAMA}
  with open(os.path.join(path, "pretrain", "generic.jsonl"), encoding="utf-8") as f:
    sentences = [s for line in f for s in split_sentences(json.loads(line)["text"])]
  assert not [s for s in sentences for a, b in pairs if a in s and b in s][:1]


def test_encyclopedia_states_the_snapshot_facts(full):
  """Wikipedia's role: each TempLAMA subject's object on 2019-12-31 is in its article."""
  path, _ = full
  names = read_entities(os.path.join(path, "entities.tsv"))
  with open(os.path.join(path, "pretrain", "encyclopedia.jsonl"), encoding="utf-8") as f:
    text = " ".join(json.loads(line)["text"] for line in f)
  snapshot = datetime.date(2019, 12, 31)
  all_facts = read_facts(os.path.join(path, "facts.tsv"))
  facts = [
    f
    for rel in TEMPLAMA
    for fs in group(all_facts, rel).values()
    for f in primaries(fs)
    if (f["start"] or datetime.date.min) <= snapshot and snapshot <= (f["end"] or datetime.date.max)
  ]
  assert len(facts) > 50
  missing = [f for f in facts if names[f["o"]] not in text or names[f["s"]] not in text]
  assert not missing
