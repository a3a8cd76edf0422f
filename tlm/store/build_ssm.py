"""`build_ssm`: the paper's salient-span-masking examples of a news corpus, built into an
example store by one of two engines.

The per-article transform is the paper's (`tlm.data.ssm`: sentences, salient spans, held-out
articles); the engines run it over the corpus and write the store: local processes
(`tlm.store.store_build`, any count) or an Apache Beam pipeline (`tlm.store.ssm_beam`), with
byte-identical output. This module only chooses between them, so that neither engine imports
the other.
"""

from collections.abc import Callable, Sequence

from tlm.data.ssm import MAX_CONTEXT_WORDS, BuildSettings
from tlm.store import ssm_beam, store_build


def build_ssm(
  news: str | Sequence[str],
  output_dir: str,
  gazetteer: str | None = None,
  seed: int = 0,
  heldout_articles: int = 2000,
  heldout_fraction: float = 0.1,
  max_context_words: int = MAX_CONTEXT_WORDS,
  vocab: str | None = None,
  num_workers: int = 1,
  beam_options: str | Sequence[str] | None = None,
  progress: Callable[[str], None] | None = None,
  shuffle_seed: int | None = None,
) -> dict:
  """Builds SSM examples from a news corpus, split by article and year, into an example store.

  Args:
    news: JSON lines `{"date": "2014-05-03", "text": ...}`: one file, or several files and
      globs (comma-separated, or a sequence), plain or `.gz`, read as one corpus in that order.
    output_dir: receives the example store (`tlm.store.store`: manifest.json, `<split>/<year>.*`)
      and stats.json; created, or replaced if it holds only these, atomically.
    gazetteer: optional file of entity names (one per line, or the entities TSV).
    seed: seed of the per-year choice of held-out articles.
    heldout_articles: cap on held-out articles per year and split (the paper: 2000).
    heldout_fraction: share of a year's articles held out for each of val and test.
    max_context_words: the cap on the words around each span (`mask_examples`).
    vocab: a SentencePiece model: store token ids (tokenized once, here) instead of text.
    num_workers: local processes (`tlm.store.store_build`); the output is the same for any.
    beam_options: build as an Apache Beam pipeline with these options instead
      (`tlm.store.ssm_beam`; e.g. "--runner=DirectRunner"); the same output. `num_workers` is
      not used then.
    shuffle_seed: write every table in an order seeded with it (`tlm.store.store_shuffle`:
      a window of consecutive examples, as the block sampler reads, is then a sample of the
      whole year); None or negative: corpus order (the articles in input order).
    progress: called with progress lines (the names of the gazetteer loaded and the memory
      they hold); the command line prints them, a library call stays quiet by default.

  Returns:
    The statistics written to `stats.json`.

  Raises:
    DataError: a bad input line (nothing is written then).
    UserError: a setting out of range (`BuildSettings`).
  """
  if shuffle_seed is not None and shuffle_seed < 0:
    shuffle_seed = None
  settings = BuildSettings(
    gazetteer, seed, heldout_articles, heldout_fraction, max_context_words, vocab, shuffle_seed
  )
  if beam_options:
    return ssm_beam.build(news, output_dir, beam_options, settings, progress)
  return store_build.build(news, output_dir, settings, num_workers, progress)
