"""Surface `builders`: build_templama and build_ssm given hostile flags (years, counts, seeds
out of range) and hostile input lines, gzip files that are not or are bombs, and output
directories that hold a user's files; each must validate before it commits its output.
"""

import gzip
import os

from tests.hostile.probe import FIXTURE_DATA

from .common import STORE_FIX, case, convert_args, either, error, files_exist, ok, value

SURFACE = "builders"
FACTS = f"{FIXTURE_DATA}/templama_facts.tsv"
NEWS = f"{STORE_FIX}/news_sample.jsonl"


def templama(*flags, facts=None):
  """build_templama of the fixture's facts (or `facts(ctx)`) into `out`."""

  def setup(ctx):
    return [
      "--mode=build_templama",
      f"--facts={facts(ctx) if facts else FACTS}",
      f"--entities={FIXTURE_DATA}/templama_entities.tsv",
      f"--output_dir={ctx.path('out')}",
      *flags,
    ]

  return setup


def ssm(*flags, news=None, entities=None, out="out"):
  """build_ssm of the fixture's news (or `news(ctx)`) into `out`; a flag may be a function of
  the case making it."""

  def setup(ctx):
    n = news(ctx) if news else NEWS
    args = ["--mode=build_ssm", f"--news={n}", f"--output_dir={ctx.path(out)}"]
    args += [value(ctx, f) for f in flags]
    if entities:
      args.append(f"--entities={entities(ctx)}")
    return args

  return setup


def _with_line(source, rel, line):
  """A copy of `source` at `rel` with `line` (text or bytes) after its content."""

  def make(ctx):
    with open(source, "rb") as f:
      good = f.read()
    return ctx.write(rel, good + (line if isinstance(line, bytes) else line.encode()))

  return make


# The inputs a hostile line goes into, by case-name prefix: (the setup given `make`, which
# writes the input, the input's source, its copy's name, the check of a success, timeout).
LINE_INPUTS = {
  "build_templama_facts": (
    lambda make: templama(facts=make),
    FACTS,
    "facts.tsv",
    files_exist("out/train.json"),
    None,
  ),
  "build_ssm_news": (
    lambda make: ssm(news=make),
    NEWS,
    "news.jsonl",
    files_exist("out/manifest.json"),
    300,
  ),
}


def _after_lines(prefix, lines):
  """A case per (name, line) of `lines` into LINE_INPUTS[prefix]: an error naming the input or
  a success whose output the check accepts."""
  build, source, rel, check, timeout = LINE_INPUTS[prefix]
  return [
    case(
      f"{prefix}_{name}",
      SURFACE,
      build(_with_line(source, rel, line)),
      **either(check, "out", mentions=(rel,), timeout=timeout),
    )
    for name, line in lines
  ]


# (name, flags of build_templama); each is an error naming the first flag (its messages say
# "min_year must ...").
TEMPLAMA_FLAGS = [
  ("max_year_99999", ("--max_year=99999",)),
  ("min_year_minus_5", ("--min_year=-5",)),
  ("years_reversed", ("--min_year=2020", "--max_year=2010")),
  ("max_subjects_zero", ("--max_subjects_per_relation=0",)),
  ("max_subjects_negative", ("--max_subjects_per_relation=-1",)),
  ("seed_minus_1", ("--seed=-1",)),
  ("seed_2_64", ("--seed=18446744073709551616",)),
  ("min_year_0", ("--min_year=0", "--max_year=5")),
]
# (name, a line after the fixture's facts): an error naming facts.tsv or a success.
FACTS_LINES = [
  ("year_99999", "P54\tQ1\tQ12\tP580=99999\tP582=100000\n"),
  ("year_not_a_number", "P54\tQ1\tQ12\tP580=20x1\n"),
  ("year_negative", "P54\tQ1\tQ12\tP580=-2011\n"),
  ("nul", "P54\tQ1\tQ1\x002\tP580=2011\n"),
  ("not_utf8", b"P54\tQ1\t\xff\xfe\tP580=2011\n"),
  ("too_few_fields", "P54\n"),
  ("huge_line", "P54\tQ1\tQ" + "9" * 5_000_000 + "\tP580=2011\n"),
]
# (name, flags of build_ssm, expect).
SSM_FLAGS = [
  ("workers_zero", ("--num_workers=0",), "error"),
  ("workers_negative", ("--num_workers=-1",), "error"),
  ("workers_1e6", ("--num_workers=1000000",), "either"),
  ("seed_minus_1", ("--seed=-1",), "error"),
  ("seed_2_64", ("--seed=18446744073709551616",), "error"),
]
# (name, --vocab of build_ssm made by the case); each is an error naming it.
SSM_VOCABS = [
  ("vocab_garbage", lambda ctx: ctx.write("v.model", b"\x00garbage")),
  ("vocab_fifo", lambda ctx: ctx.fifo("v.model")),
]
# (name, a line after the fixture's news): an error naming news.jsonl or a success.
NEWS_LINES = [
  ("date_99999", '{"date": "99999-01-01", "text": "Ana Berg plays for Gold Hawks."}\n'),
  ("date_invalid", '{"date": "2010-13-45", "text": "Ana Berg plays for Gold Hawks."}\n'),
  ("date_year_0", '{"date": "0000-01-01", "text": "Ana Berg plays for Gold Hawks."}\n'),
  ("text_is_a_number", '{"date": "2010-01-01", "text": 123}\n'),
  ("text_nul", '{"date": "2010-01-01", "text": "Ana\\u0000 Berg"}\n'),
  ("text_lone_surrogate", '{"date": "2010-01-01", "text": "Ana \\ud800 Berg"}\n'),
  ("not_utf8", b'{"date": "2010-01-01", "text": "\xff\xfe"}\n'),
  ("not_an_object", "[1, 2]\n"),
  ("deep", "[" * 100000 + "\n"),
  ("huge_int", '{"date": "2010-01-01", "text": "x", "n": ' + "9" * 10000 + "}\n"),
  ("huge_text", '{"date": "2010-01-01", "text": "' + "Ana Berg plays. " * 200000 + '"}\n'),
  ("sentinel_in_text", '{"date": "2010-01-01", "text": "Ana <extra_id_0> Berg in 2010."}\n'),
]


def _gz(content):
  return lambda ctx: ctx.write("news.jsonl.gz", value(ctx, content))


def _truncated_gzip(ctx):
  with open(NEWS, "rb") as f:
    data = gzip.compress(f.read())
  return data[: len(data) // 2]


def _gzip_bomb(ctx):
  return gzip.compress(b'{"date": "2010-01-01", "text": "' + b"a" * (64 << 20) + b'"}\n')


def _after(rel, content, setup):
  """`setup` after the case's `rel` was written with `content` (a user's file in the way)."""

  def run(ctx):
    ctx.write(rel, content)
    return setup(ctx)

  return run


# Gzip input, a hostile entities file, output directories in the way: (name, setup,
# expectation).
OTHERS = [
  ("build_ssm_gz_not_gzip", ssm(news=_gz(b"plain text, not gzip\n")), error("news.jsonl.gz")),
  ("build_ssm_gz_truncated", ssm(news=_gz(_truncated_gzip)), error("news.jsonl.gz")),
  (
    "build_ssm_gz_bomb_ratio",
    ssm(news=_gz(_gzip_bomb)),
    either(files_exist("out/manifest.json"), "out", mentions=("news.jsonl.gz",), timeout=300),
  ),
  (
    "build_ssm_news_is_a_dir",
    ssm(news=lambda ctx: os.path.dirname(ctx.write("nd/x", ""))),
    error("nd"),
  ),
  (
    "build_ssm_entities_garbage",
    ssm(entities=lambda ctx: ctx.write("e.tsv", b"\xff\x00\tnot\tan entities file\n")),
    error("e.tsv"),
  ),
  (
    "build_ssm_output_dir_holds_user_files",
    _after("out/my_thesis.tex", "precious", ssm()),
    error("out"),
  ),
  ("build_ssm_output_dir_is_a_file", _after("out", "mine", ssm()), error("out")),
  (
    "build_templama_output_dir_holds_user_files",
    _after("out/notes.txt", "precious", templama()),
    error("out"),
  ),
  (
    "convert_output_dir_holds_user_files",
    _after(
      "out/notes.txt",
      "precious",
      lambda ctx: convert_args(ctx.base["W0"], ctx.path("out"), "hf"),
    ),
    error("out"),
  ),
]


CASES = [
  case(
    "build_templama_intact",
    SURFACE,
    templama(),
    **ok(files_exist("out/train.json", "out/val.json", "out/test.json"), "out"),
  ),
  *(
    case(
      f"build_templama_{name}",
      SURFACE,
      templama(*flags),
      **error(flags[0].partition("=")[0].lstrip("-")),
    )
    for name, flags in TEMPLAMA_FLAGS
  ),
  *_after_lines("build_templama_facts", FACTS_LINES),
  case("build_ssm_intact", SURFACE, ssm(), **ok(files_exist("out/manifest.json"), "out")),
  *(
    case(
      f"build_ssm_{name}",
      SURFACE,
      ssm(*flags),
      expect=expect,
      check=files_exist("out/manifest.json"),
      mentions=(flags[0].partition("=")[0],),
      writes=("out",),
      timeout=300,
    )
    for name, flags, expect in SSM_FLAGS
  ),
  *(
    case(
      f"build_ssm_{name}",
      SURFACE,
      ssm(lambda ctx, make=make: f"--vocab={make(ctx)}"),
      **error("v.model"),
    )
    for name, make in SSM_VOCABS
  ),
  *_after_lines("build_ssm_news", NEWS_LINES),
  *(case(name, SURFACE, setup, **expectation) for name, setup, expectation in OTHERS),
]
