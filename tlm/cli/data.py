"""`run.py --mode=build_templama` and `--mode=build_ssm`: the numpy-only data builders.

  python run.py --mode=build_templama --facts=facts.tsv --entities=entities.tsv --output_dir=D \
      [--min_year=2010 --max_year=2020 --max_subjects_per_relation=1000 --granularity=year --seed=0]
  python run.py --mode=build_ssm --news=news.jsonl --output_dir=D [--entities=entities.tsv --seed=0]
      [--news='shards/news-*.jsonl.gz,more.jsonl' --num_workers=N --vocab=spiece.model]
      [--beam_options='--runner=DataflowRunner --project=P ...']   # Apache Beam instead
      [--shuffle_seed=0]   # each table in a seeded order (the block sampler's windows)
  python run.py --mode=shuffle_store --data=D --output_dir=D2 --shuffle_seed=0 [--num_workers=N]
  python run.py --mode=convert_ssm --data=JSONL_SSM_DIR --output_dir=D [--vocab=spiece.model]
  python run.py --mode=check_store --data=D

Both builders validate every input line before writing anything; a bad line (malformed JSON,
invalid UTF-8, a lone surrogate, a bad date) raises `DataError` naming the file and line, which
`run.py` prints as one line on stderr with exit status 1. `build_ssm` writes the example store
(`tlm.store.store`; token ids with `--vocab`, else text) with `--num_workers` processes
(`tlm.store.store_build`; the same bytes for any number), and states its cap on the context kept
around each span (`tlm.data.ssm.MAX_CONTEXT_WORDS`) and how many examples it cut. Each holds a
lock beside its output directory (`tlm.workdir_lock`), so two builds into one directory cannot
interleave. `shuffle_store` re-orders a store built in corpus order (without `--shuffle_seed`,
which the block sampler refuses) as a build with `--shuffle_seed` would have written it,
without span masking or tokenizing again (`tlm.store.store_reorder`: resumable, idempotent).
`convert_ssm` turns a JSON-lines SSM directory (the format before the store) into a store;
`check_store` verifies every file of a store against its manifest's SHA-256 (e.g. once
after copying it to a host).
"""

import time

from tlm.configs import check_value
from tlm.console import log_line, notice
from tlm.data import templama
from tlm.data.formatting import SPLITS
from tlm.errors import ConfigError
from tlm.files import remove_interrupted_staging
from tlm.store import build_ssm as ssm_build
from tlm.store import store, store_convert, store_reorder
from tlm.workdir_lock import WorkdirLock


def clean_interrupted(output_dir: str) -> None:
  """Removes the staging directories killed runs into `output_dir` left beside it, with a
  notice; only under the lock beside `output_dir`, which no other run then holds."""
  count, size = remove_interrupted_staging(output_dir)
  if count:
    notice(
      f"removed {count} staging director{'y' if count == 1 else 'ies'} ({size:,} bytes) that "
      f"interrupted runs into {output_dir} had left beside it"
    )


def _require(flags, *names: str) -> None:
  missing = [f"--{n}" for n in names if not getattr(flags, n)]
  if missing:
    raise ConfigError(f"--mode={flags.mode} needs {', '.join(missing)}")


def build_templama(flags) -> dict:
  """Builds TempLAMA from a facts TSV and an entities TSV and prints the counts."""
  _require(flags, "facts", "entities", "output_dir")
  with WorkdirLock.beside(flags.output_dir, "build_templama"):
    clean_interrupted(flags.output_dir)
    counts = templama.build_templama(
      flags.facts,
      flags.entities,
      flags.output_dir,
      min_year=flags.min_year,
      max_year=flags.max_year,
      max_subjects_per_relation=flags.max_subjects_per_relation,
      granularity=flags.granularity,
      seed=flags.seed,
    )
  q, s = counts["queries"], counts["subjects"]
  print(
    f"wrote {flags.output_dir}/{{train,val,test}}.json: {q['total']} queries "
    f"(train {q['train']}, val {q['val']}, test {q['test']}) about {sum(s.values())} subjects "
    f"(train {s['train']}, val {s['val']}, test {s['test']}); "
    f"{counts['queries_with_several_answers']} with several answers"
  )
  facts = counts["facts"]
  print("facts: " + ", ".join(f"{k} {v}" for k, v in facts.items()))
  _table("relation", counts["by_relation"])
  _table("year", counts["by_year"])
  return counts


def build_ssm(flags) -> dict:
  """Builds salient-span-masked examples from news JSON lines and prints the counts."""
  _require(flags, "news", "output_dir")
  check_value("data.seed", flags.seed, "--seed")
  t0 = time.perf_counter()
  with WorkdirLock.beside(flags.output_dir, "build_ssm"):
    clean_interrupted(flags.output_dir)
    stats = ssm_build.build_ssm(
      flags.news,
      flags.output_dir,
      gazetteer=flags.entities,
      seed=flags.seed,
      vocab=flags.vocab,
      num_workers=flags.num_workers,
      beam_options=flags.beam_options,
      progress=log_line,
      shuffle_seed=flags.shuffle_seed,
    )
  seconds = time.perf_counter() - t0
  workers = "Beam" if flags.beam_options else f"{flags.num_workers} worker(s)"
  if flags.shuffle_seed >= 0:
    workers += f", tables shuffled with seed {flags.shuffle_seed}"
  t = stats["totals"]
  manifest = store.read_manifest(flags.output_dir)
  kind = f"tokenized ({manifest['token_dtype']} ids of {flags.vocab})" if flags.vocab else "text"
  print(
    f"wrote the example store {flags.output_dir} ({kind}): {t['examples']} examples "
    f"({t['date_spans']} dates, {t['entity_spans']} entities) from {t['sentences']} "
    f"sentences of {t['articles']} articles in {seconds:.1f}s with {workers}"
  )
  cap = stats["context_cap"]
  print(
    f"inputs capped at {cap['words']} words ({cap['chars']} characters) of context around the "
    f"span: {cap['examples_cut']} examples cut"
  )
  print(
    f"spans per sentence {stats['spans_per_sentence']:.2f}; sentences mentioning a year "
    f"{100 * stats['share_sentences_mentioning_a_year']:.1f}%, the publication year "
    f"{100 * stats['share_sentences_mentioning_publication_year']:.1f}%"
  )
  rows = {y: {s: stats["examples"][s][y] for s in SPLITS} for y in map(str, stats["years"])}
  _table("year", rows, what="examples")
  return stats


def shuffle_store(flags) -> dict:
  """Re-orders a store in corpus order into --output_dir, as `--shuffle_seed` builds it."""
  _require(flags, "data", "output_dir")
  if flags.shuffle_seed < 0:
    raise ConfigError("--mode=shuffle_store needs --shuffle_seed=N (N >= 0), e.g. 0")
  t0 = time.perf_counter()
  with WorkdirLock.beside(flags.output_dir, "shuffle_store"):
    summary = store_reorder.shuffle_store(
      flags.data, flags.output_dir, flags.shuffle_seed, flags.num_workers, progress=log_line
    )
  seconds = time.perf_counter() - t0
  if summary["unchanged"]:
    print(
      f"nothing to do: the store is already in the order of seed {flags.shuffle_seed} "
      f"({summary['tables']} tables, {summary['examples']} examples)"
    )
    return summary
  kept = summary["fields_resumed"]
  print(
    f"wrote the example store {flags.output_dir}: {flags.data} shuffled with seed "
    f"{flags.shuffle_seed}, {summary['tables']} tables, {summary['examples']} examples in "
    f"{seconds:.1f}s" + (f" ({kept} table fields kept from an interrupted run)" if kept else "")
  )
  return summary


def convert_ssm(flags) -> dict:
  """Converts a JSON-lines SSM directory to an example store (tokenized with --vocab)."""
  _require(flags, "data", "output_dir")
  with WorkdirLock.beside(flags.output_dir, "convert_ssm"):
    clean_interrupted(flags.output_dir)
    summary = store_convert.convert(flags.data, flags.output_dir, vocab=flags.vocab)
  kind = f"tokenized with {flags.vocab}" if flags.vocab else "text"
  print(
    f"wrote the example store {flags.output_dir} ({kind}): {summary['examples']} examples in "
    f"{summary['tables']} tables"
  )
  return summary


def check_store(flags) -> dict:
  """Verifies every file of an example store against its manifest (sizes, SHA-256, offsets)."""
  _require(flags, "data")
  summary = store.verify(flags.data)
  print(
    f"{flags.data}: {summary['tables']} tables, {summary['examples']} examples, "
    f"{summary['bytes']:,} bytes: every file matches manifest.json"
  )
  return summary


def _table(key: str, rows: dict, what: str = "queries") -> None:
  """Prints `{key value: {split: count}}` as an aligned table."""
  print(f"{what} by {key}:")
  print(f"  {key:>10} {'train':>8} {'val':>8} {'test':>8}")
  for k, v in rows.items():
    print(f"  {k:>10} {v['train']:>8} {v['val']:>8} {v['test']:>8}")
