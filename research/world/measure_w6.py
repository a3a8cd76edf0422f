"""W6 (C4): is the world's scored news more short-lived than its TempLAMA? No model involved.

  python -m research.world.measure_w6 [--seeds=0,1,2] [--out=research/world]
      [--check_store=DIR_WITH_{seed}]

The measurement, its prediction and criterion: research/world/PREREGISTRATION_W6.md (committed
before the first run). Writes OUT/measure_w6.json and OUT/measure_w6.md.

The news examples are those the claims score: the held-out test articles of each year 2010-18,
chosen as the SSM build chooses them (`tlm.store.store_build.make_plan`: per year a permutation
seeded with (seed, year) of the year's articles in corpus order, `tlm.data.ssm.heldout_count`
of them for validation, the next as many for test), split into sentences and salient spans with
the world's entity names as gazetteer (as `tlm.input.datasets.ensure_synthetic_data` builds
them), one example per span, then at most `eval.max_examples` of them per year, evenly spaced
(`tlm.eval.heldout.spread`). Each example's span is traced back to the generator's sentence
it lies in (`tlm.synthetic.news.Sentence`: its kind and the fact it states), so that its masked
answer can be named: the subject or object of the sentence's fact, a date, or something else.
`--check_store` compares these examples with a built SSM store (e.g. the reproduction's cache).

Durations are the claims' (C10, Figure 2 right): calendar years touched by the fact's span in
the facts file, `tlm.data.fact_durations.durations_from_facts`; short-lived is under
`tlm.eval.templama_eval.SHORT_LIVED_YEARS` (5) years.
"""

import argparse
import bisect
import collections
import dataclasses
import json
import os
import re
import tempfile
import time

import numpy as np

from tlm.configs.tiny import tiny_temporal
from tlm.configs.years import TRAIN_YEARS
from tlm.data import fact_durations, templama
from tlm.data.salient_spans import Gazetteer, find_spans, split_sentences
from tlm.data.ssm import heldout_count, mask_examples
from tlm.data.templama import TempLamaExample
from tlm.eval.heldout import spread
from tlm.eval.templama_eval import SHORT_LIVED_YEARS
from tlm.synthetic import world as world_lib
from tlm.synthetic.news import Document, Sentence
from tlm.synthetic.world_records import World, day, year_of

YEARS = TRAIN_YEARS  # C4's slice, 2010-18
MAX_EXAMPLES = tiny_temporal().eval.max_examples  # news examples scored per year (250)
ROLES = ("object", "subject", "date", "other")
ARGUMENTS = ("object", "subject")


@dataclasses.dataclass(frozen=True)
class NewsExample:
  """One SSM example of a held-out article, traced back to the generator's sentence.

  Attributes:
    year: the article's year.
    inputs, targets: the example as the SSM build writes it.
    kind: the span's kind, "date" or "entity" (`tlm.data.salient_spans.Span`).
    sentence: the generator's sentence the span starts in.
    start, end: the span's place in `sentence.text` (end clipped to it).
  """

  year: int
  inputs: str
  targets: str
  kind: str
  sentence: Sentence
  start: int
  end: int


# ---- the scored news examples ------------------------------------------------------------------


def test_documents(docs: list[Document], seed: int) -> dict[int, list[Document]]:
  """{year: the year's test articles in corpus order}, as the SSM build holds them out (default
  shares: `heldout_count` of a year's articles for validation, the next as many for test)."""
  by_year: dict[int, list[Document]] = collections.defaultdict(list)
  for d in docs:  # news.jsonl is written in this order
    by_year[year_of(d.date)].append(d)
  out = {}
  for year, year_docs in sorted(by_year.items()):
    n = len(year_docs)
    k = heldout_count(n)
    order = np.random.default_rng([seed, year]).permutation(n)
    test = set(order[k : 2 * k].tolist())
    out[year] = [d for rank, d in enumerate(year_docs) if rank in test]
  return out


def document_examples(doc: Document, gazetteer: Gazetteer) -> list[NewsExample]:
  """The SSM examples of one article (`tlm.store.store_build`'s order: sentences, then spans),
  each with the generator sentence its span starts in."""
  text, year = doc.text, year_of(doc.date)
  starts, at = [], 0
  for s in doc.sentences:  # Document.text joins the sentences with one space
    starts.append(at)
    at += len(s.text) + 1
  out, cursor = [], 0
  for piece in split_sentences(text):
    offset = text.find(piece, cursor)
    if offset < 0:  # split_sentences returns stripped substrings of the text, in order
      raise ValueError(f"sentence {piece!r} not found in the article of {doc.date_str}")
    cursor = offset + len(piece)
    spans = find_spans(piece, gazetteer)
    for span, ex in zip(spans, mask_examples(piece, spans, doc.date_str, year), strict=True):
      i = bisect.bisect_right(starts, offset + span.start) - 1
      sentence = doc.sentences[i]
      start = offset + span.start - starts[i]
      end = min(offset + span.end - starts[i], len(sentence.text))
      out.append(NewsExample(year, ex["inputs"], ex["targets"], span.kind, sentence, start, end))
  return out


def news_examples(
  world: World, docs: list[Document], years=YEARS, max_examples: int = MAX_EXAMPLES
) -> tuple[dict[int, list[NewsExample]], dict[int, list[NewsExample]]]:
  """({year: all test examples}, {year: the scored ones, at most `max_examples`})."""
  gazetteer = Gazetteer(e.name for e in world.entities.values())
  held = test_documents(docs, world.seed)
  every, scored = {}, {}
  for year in years:
    every[year] = [ex for d in held.get(year, []) for ex in document_examples(d, gazetteer)]
    scored[year] = spread(every[year], max_examples)
  return every, scored


def check_store(scored: dict[int, list[NewsExample]], store_dir: str, max_examples: int) -> str:
  """Whether a built SSM store's test examples (spread as the evaluation spreads them) are
  `scored`'s, example for example: "equal", or where they first differ."""
  from tlm.store.store_convert import open_ssm_store

  store = open_ssm_store(store_dir)
  for year, rows in scored.items():
    theirs = spread(list(store.table("test", year)), max_examples)
    if len(theirs) != len(rows):
      return f"{year}: {len(theirs)} examples in the store, {len(rows)} here"
    for i, (a, b) in enumerate(zip(theirs, rows, strict=True)):
      if (a.inputs, a.targets) != (b.inputs, b.targets):
        return f"{year} example {i}: store {a.targets!r} in {a.inputs!r}, here {b.targets!r}"
  return "equal"


# ---- what each example masks -------------------------------------------------------------------


def _places(text: str, name: str) -> list[tuple[int, int]]:
  return [m.span() for m in re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", text)]


def role(ex: NewsExample, world: World) -> str:
  """What the example masks: "object" / "subject" (its span overlaps where the name of the
  sentence's fact's object / subject is written), "date" (a date span), or "other" (another
  entity: a distractor's, a filler's, or any span of a sentence that states no fact)."""
  if ex.kind == "date":
    return "date"
  fact = ex.sentence.fact
  if fact is None:
    return "other"
  for name, qid in (("object", fact.obj), ("subject", fact.subject)):
    for a, b in _places(ex.sentence.text, world.entities[qid].name):
      if a < ex.end and ex.start < b:
        return name
  return "other"


def fact_key(ex: NewsExample) -> tuple[str, str, str, int]:
  """(relation, subject, object, year) of the example's sentence's fact; the year is the one
  the sentence names (`Sentence.year`: "In 2012 ...", next year's host), else the article's."""
  f, year = ex.sentence.fact, ex.sentence.year
  return f.relation, f.subject, f.obj, year if year is not None else ex.year


def durations(spans: fact_durations.FactSpans, test: list, keys) -> tuple[dict, dict]:
  """({TempLAMA id: years}, {fact key: years}): one `durations_from_facts` call for both, so
  that they share its snapshot (the claims' call takes the test queries of 2010-20)."""
  pseudo = {}
  for rel, subj, obj, year in keys:
    pseudo[f"w6|{rel}|{subj}|{obj}|{year}"] = (rel, subj, obj, year)
  examples = list(test) + [
    TempLamaExample(i, "", [[obj]], [obj], str(year), year, rel, subj, "", "")
    for i, (rel, subj, obj, year) in pseudo.items()
  ]
  got = fact_durations.durations_from_facts(spans, examples)
  queries = {ex.id: got[ex.id] for ex in test if ex.id in got}
  facts = {key: got[i] for i, key in pseudo.items() if i in got}
  return queries, facts


def objects_by_year(world: World, years=YEARS) -> dict:
  """{(relation, subject): {year: objects valid in the year}} (an annual event's host: its
  edition's year), over `years`."""
  out: dict = collections.defaultdict(lambda: collections.defaultdict(set))
  for f in world.facts:
    for y in years:
      if f.relation == "P276":
        holds = year_of(f.start) == y
      else:
        holds = f.overlap(day(y), day(y, 12, 31)) is not None
      if holds:
        out[(f.relation, f.subject)][y].add(f.obj)
  return out


def changes(answer: str, years: dict) -> bool:
  """Whether `answer` is missing from some year of `years` ({year: answers}) that has one: the
  answer differs in another year of 2010-18."""
  return any(answer not in got for got in years.values() if got)


# ---- the statistics ----------------------------------------------------------------------------


def _share(num: int, den: int) -> float | None:
  return num / den if den else None


def news_statistics(examples: list[NewsExample], world: World, fact_years: dict) -> dict:
  """Counts and shares over `examples`; `fact_years` is {fact key: years} (`durations`).

  share_short (the pre-registered statistic): examples whose span is the subject or object of
  their sentence's fact, and that fact lasts under SHORT_LIVED_YEARS years, over all examples.
  """
  dated = {(f.relation, f.subject, f.obj) for f in world.facts if f.dated}
  valid = objects_by_year(world)
  roles: collections.Counter = collections.Counter()
  lives: collections.Counter = collections.Counter()  # argument examples by their fact's life
  short_by_role: collections.Counter = collections.Counter()
  relations: dict = collections.defaultdict(lambda: {"arguments": 0, "short": 0})
  changing_objects = publication_year = 0
  for ex in examples:
    r = role(ex, world)
    roles[r] += 1
    if r == "date":
      publication_year += str(ex.year) in ex.targets
    if r not in ARGUMENTS:
      continue
    key = fact_key(ex)
    years = fact_years.get(key)
    if years is not None:
      life = "short" if years < SHORT_LIVED_YEARS else "long"
    else:
      life = "no_span" if key[:3] in dated else "static"
    lives[life] += 1
    short_by_role[r] += life == "short"
    relations[key[0]]["arguments"] += 1
    relations[key[0]]["short"] += life == "short"
    if r == "object":
      changing_objects += changes(key[2], valid.get(key[:2], {}))
  n = len(examples)
  arguments = roles["object"] + roles["subject"]
  short = lives["short"]
  return {
    "examples": n,
    "roles": {r: roles[r] for r in ROLES},
    "argument_lives": {k: lives[k] for k in ("short", "long", "static", "no_span")},
    "short": short,
    "share_short": _share(short, n),
    "share_short_among_arguments": _share(short, arguments),
    "share_object_short": _share(short_by_role["object"], n),
    "share_short_among_objects": _share(short_by_role["object"], roles["object"]),
    "share_arguments": _share(arguments, n),
    "share_changing_objects": _share(changing_objects, n),
    "date_spans_naming_the_publication_year": publication_year,
    "by_relation": dict(sorted(relations.items())),
  }


def templama_statistics(test: list, query_years: dict) -> dict:
  """The TempLAMA test queries of 2010-18: the share whose first answer's fact lasts under
  SHORT_LIVED_YEARS years (a query without a duration counts as not short), and the share whose
  first answer is missing from another 2010-18 query of its pair."""
  seen = [ex for ex in test if ex.year in YEARS]
  gold: dict = collections.defaultdict(dict)
  for ex in seen:
    gold[(ex.subject, ex.relation)][ex.year] = set(ex.answer_ids)
  short = sum(query_years.get(ex.id, SHORT_LIVED_YEARS) < SHORT_LIVED_YEARS for ex in seen)
  changing = sum(
    bool(ex.answer_ids) and changes(ex.answer_ids[0], gold[(ex.subject, ex.relation)])
    for ex in seen
  )
  return {
    "queries": len(seen),
    "without_duration": sum(ex.id not in query_years for ex in seen),
    "short": short,
    "share_short": _share(short, len(seen)),
    "share_changing": _share(changing, len(seen)),
  }


def templama_test(world: World, tmp: str) -> tuple[list, str]:
  """The world's TempLAMA test split (the reproduction's: seed = the world's) and the path of
  its facts file, written under `tmp`."""
  facts, entities = os.path.join(tmp, "facts.tsv"), os.path.join(tmp, "entities.tsv")
  with open(facts, "w") as f:
    f.writelines(world_lib.format_fact(x) + "\n" for x in world.facts)
  with open(entities, "w") as f:
    f.writelines(f"{e.qid}\t{e.name}\t{e.popularity}\n" for e in world.entities.values())
  out = os.path.join(tmp, "templama")
  templama.build_templama(facts, entities, out, seed=world.seed)
  return templama.load_templama_splits(out)["test"], facts


def measure_world(
  world: World,
  docs: list[Document],
  max_examples: int = MAX_EXAMPLES,
  store_dir: str = "",
  log=lambda msg: None,
) -> dict:
  """W6 of one world: the scored news and the TempLAMA test queries of 2010-18."""
  every, scored = news_examples(world, docs, YEARS, max_examples)
  log(
    f"news test examples 2010-18: {sum(map(len, every.values()))}, scored "
    f"{sum(map(len, scored.values()))}"
  )
  with tempfile.TemporaryDirectory() as tmp:
    test, facts_path = templama_test(world, tmp)
    spans = fact_durations.read_fact_spans(facts_path)
  log(f"TempLAMA test queries: {len(test)}")
  all_every = [ex for rows in every.values() for ex in rows]
  all_scored = [ex for rows in scored.values() for ex in rows]
  keys = {fact_key(ex) for ex in all_every if ex.sentence.fact is not None}
  query_years, fact_years = durations(spans, test, keys)
  news = news_statistics(all_scored, world, fact_years)
  news["by_year"] = {}
  for y, rows in scored.items():
    got = news_statistics(rows, world, fact_years)
    news["by_year"][str(y)] = {"examples": got["examples"], "share_short": got["share_short"]}
  lama = templama_statistics(test, query_years)
  out = {
    "news": news,
    "news_all_test_examples": news_statistics(all_every, world, fact_years),
    "templama": lama,
    "difference": (
      news["share_short"] - lama["share_short"]
      if news["share_short"] is not None and lama["share_short"] is not None
      else None
    ),
  }
  if store_dir:
    out["store_check"] = check_store(scored, store_dir, max_examples)
    log(f"store check: {out['store_check']}")
  return out


def _log(msg: str) -> None:
  print(msg, flush=True)


def measure(seed: int, store_dir: str = "", log=_log) -> dict:
  t0 = time.perf_counter()
  world, docs = world_lib.generate(seed, version=3)  # world v3, as registered
  log(f"seed {seed}: world generated ({len(docs)} documents, {time.perf_counter() - t0:.1f}s)")
  return measure_world(world, docs, MAX_EXAMPLES, store_dir, lambda m: log(f"seed {seed}: {m}"))


def verdict(by_seed: dict) -> bool:
  """The pre-registered criterion (PREREGISTRATION_W6.md), applied as written: on every seed
  the scored news's short-lived share is at most TempLAMA's."""
  return bool(by_seed) and all(
    s["difference"] is not None and s["difference"] <= 0 for s in by_seed.values()
  )


def _pct(x) -> str:
  return "n/a" if x is None else f"{100 * x:.1f}%"


def markdown(out: dict) -> str:
  lines = ["# W6: short-lived facts in the scored news and in TempLAMA (PREREGISTRATION_W6.md)"]
  lines += [
    "",
    "| seed | news: short-lived argument examples / scored | TempLAMA: short-lived queries | "
    "difference | news: short among argument examples | news: arguments / scored | "
    "TempLAMA: answer changes in 2010-18 | news: changing objects / scored |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for seed, m in out["seeds"].items():
    n, t = m["news"], m["templama"]
    lines.append(
      f"| {seed} | {_pct(n['share_short'])} ({n['short']} / {n['examples']}) | "
      f"{_pct(t['share_short'])} ({t['short']} / {t['queries']}) | "
      f"{100 * m['difference']:+.1f} points | {_pct(n['share_short_among_arguments'])} | "
      f"{_pct(n['share_arguments'])} | {_pct(t['share_changing'])} | "
      f"{_pct(n['share_changing_objects'])} |"
    )
  lines.append("")
  for seed, m in out["seeds"].items():
    n = m["news"]
    lines.append(f"## seed {seed}")
    lines.append("")
    lines.append(f"- scored news examples by what they mask: {n['roles']}")
    lines.append(f"- argument examples by their fact's life: {n['argument_lives']}")
    lines.append(
      f"- date spans naming the publication year: {n['date_spans_naming_the_publication_year']}"
    )
    lines.append(f"- argument examples by relation: {n['by_relation']}")
    lines.append(f"- short-lived share by year: {n['by_year']}")
    a = m["news_all_test_examples"]
    lines.append(
      f"- all {a['examples']} test examples of 2010-18 (not only the scored): short-lived "
      f"{_pct(a['share_short'])}, among argument examples {_pct(a['share_short_among_arguments'])}"
    )
    lines.append(f"- TempLAMA: {m['templama']}")
    if "store_check" in m:
      lines.append(f"- scored examples against the built SSM store: {m['store_check']}")
    lines.append("")
  lines.append(f"Verdict (criterion as pre-registered): W6 {out['verdict']}")
  return "\n".join(lines) + "\n"


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--seeds", default="0,1,2")
  ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
  ap.add_argument(
    "--check_store",
    default="",
    help="a built SSM store per seed, '{seed}' in the path, to compare the scored examples with",
  )
  args = ap.parse_args()
  by_seed = {}
  for s in (int(x) for x in args.seeds.split(",")):
    store_dir = os.path.expanduser(args.check_store.format(seed=s)) if args.check_store else ""
    by_seed[str(s)] = measure(s, store_dir)
    m = by_seed[str(s)]
    print(
      f"seed {s}: news short-lived share {m['news']['share_short']}, TempLAMA "
      f"{m['templama']['share_short']}, difference {m['difference']}",
      flush=True,
    )
  out = {"seeds": by_seed, "verdict": verdict(by_seed)}
  with open(os.path.join(args.out, "measure_w6.json"), "w") as f:
    json.dump(out, f, indent=1)
  with open(os.path.join(args.out, "measure_w6.md"), "w") as f:
    f.write(markdown(out))
  print(f"W6 verdict: {out['verdict']}")


if __name__ == "__main__":
  main()
