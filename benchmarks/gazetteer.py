"""The gazetteer at the size of a real entity list: load time, memory, matching MB/s and output
identity at 1K, 100K and 1M names; `build_ssm` with 1M names against the world's own. JSON lines.

  python benchmarks/gazetteer.py                          # 1K, 100K and 1M names, and the build
  python benchmarks/gazetteer.py --names=1000 --no_build  # quick

Names: the synthetic world's 520 entities plus generated ones up to N, none of which occurs in
its news, shaped against a first-word index and to make the trie's walk go deep: a third start
with "The", a fifth with the first word of one of the world's names, a tenth with a whole one of
them (so a walk from a name in the text goes on past it), the rest are 2-4 new words.

For each N, in a fresh process: `Gazetteer.from_file` of an entities TSV of N names (wall
and CPU seconds, growth of the process's resident memory, and the matcher's own size,
`Gazetteer.nbytes`), then matching over every sentence of the world's news: `Gazetteer.find`
alone and `find_spans` whole, in MB of sentence text per CPU second. Identity: `find_spans`
gives the same spans as with the world's 520 names (no added name occurs in the text) on every
sentence, and the scan the trie replaced (tests/test_gazetteer.py's reference) the same matches
on a sample of sentences, whose time per sentence is reported (at 1M names the sample is small:
the scan tries every name sharing a token's first word).

Then (unless `--no_build`): `run.py --mode=build_ssm` on the world's news (text store, one
process) with the world's entities and with the largest names file, alternating, twice each:
CPU seconds (the better of two: the machine is shared), peak memory, and the two stores
compared byte for byte (stats.json but for its count of names). The goal: within 3x of the
world's own build, the same store.
"""

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.helpers import file_hashes  # noqa: E402
from tests.test_gazetteer import ScanGazetteer  # noqa: E402
from tlm.data import salient_spans  # noqa: E402
from tlm.data.salient_spans import Gazetteer, find_spans, split_sentences  # noqa: E402

# The scan's sample: sentences until this many CPU seconds (or all of `OLD_SENTENCES`).
OLD_SECONDS = 20.0
OLD_SENTENCES = 2000


def _status_mb(key: str) -> float:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(key + ":"):
        return int(line.split()[1]) / 1024
  raise KeyError(key)


def _word(rng: random.Random) -> str:
  """A new capitalised word ("Q" and consonant clusters: nothing the world's names spell)."""
  return "Q" + "".join(rng.choice("bcdfghjklmnprstvwxz") for _ in range(rng.randint(4, 8)))


def write_names(world_entities: str, n: int, path: str) -> None:
  """An entities TSV of the world's names and generated ones, n in all (module docstring)."""
  with open(world_entities, encoding="utf-8") as f:
    own = [line.split("\t")[1] for line in f if line.strip()]
  rng = random.Random(n)
  with open(path, "w", encoding="utf-8") as f:
    for i, name in enumerate(own):
      f.write(f"Q{i}\t{name}\t0\n")
    for i in range(len(own), n):
      shape = rng.random()
      if shape < 1 / 3:
        name = " ".join(["The"] + [_word(rng) for _ in range(rng.randint(1, 2))])
      elif shape < 1 / 3 + 0.2:
        name = f"{rng.choice(own).split()[0]} {_word(rng)}"
      elif shape < 1 / 3 + 0.3:
        name = f"{rng.choice(own)} {_word(rng)}"
      else:
        name = " ".join(_word(rng) for _ in range(rng.randint(2, 4)))
      f.write(f"Q{i}\t{name}\t0\n")


def _sentences(news: str) -> list[str]:
  with open(news, encoding="utf-8") as f:
    return [s for line in f for s in split_sentences(json.loads(line)["text"])]


def probe(names_path: str, news: str, world_entities: str) -> dict:
  """One size, in this (fresh) process: load, memory, MB/s, identity (module docstring)."""
  sentences = _sentences(news)
  tokens = [list(salient_spans._TOKEN.finditer(s)) for s in sentences]
  mb = sum(len(s.encode("utf-8")) for s in sentences) / 1e6
  gc.collect()
  rss0 = _status_mb("VmRSS")
  t0, c0 = time.perf_counter(), time.process_time()
  gazetteer = Gazetteer.from_file(names_path)
  load_s, load_cpu_s = time.perf_counter() - t0, time.process_time() - c0
  gc.collect()
  rss = _status_mb("VmRSS") - rss0
  c0 = time.process_time()
  for s, t in zip(sentences, tokens):
    gazetteer.find(s, t)
  find_s = time.process_time() - c0
  c0 = time.process_time()
  spans = [find_spans(s, gazetteer) for s in sentences]
  spans_s = time.process_time() - c0
  own = Gazetteer.from_file(world_entities)
  same_as_own = all(find_spans(s, own) == want for s, want in zip(sentences, spans))
  del gazetteer, spans
  gc.collect()
  # The scan it replaced, on as many sentences as OLD_SECONDS allow, the trie on the same.
  with open(names_path, encoding="utf-8") as f:
    scan = ScanGazetteer([line.split("\t")[1] for line in f if line.strip()])
  trie = Gazetteer.from_file(names_path)
  c0, checked, old_s = time.process_time(), 0, 0.0
  same_as_scan = True
  for s, t in zip(sentences[:OLD_SENTENCES], tokens):
    same_as_scan &= scan.find(s, t) == trie.find(s, t)
    checked += 1
    old_s = time.process_time() - c0
    if old_s > OLD_SECONDS:
      break
  c0 = time.process_time()
  for s, t in zip(sentences[:checked], tokens):
    trie.find(s, t)
  new_s = time.process_time() - c0
  return {
    "names": len(trie),
    "load_s": round(load_s, 2),
    "load_cpu_s": round(load_cpu_s, 2),
    "rss_growth_mb": round(rss, 1),
    "matcher_mb": round(trie.nbytes() / 2**20, 1),
    "news_mb": round(mb, 2),
    "find_mb_per_cpu_s": round(mb / find_s, 2),
    "find_spans_mb_per_cpu_s": round(mb / spans_s, 2),
    "same_spans_as_the_worlds_names": same_as_own,
    "scan_sentences_checked": checked,
    "same_matches_as_the_scan": same_as_scan,
    "scan_ms_per_sentence": round(1000 * old_s / checked, 3),
    "trie_ms_per_sentence": round(1000 * new_s / checked, 3),
  }


def _same_store(a: str, b: str) -> bool:
  """Equal bytes in every file, and in stats.json but for the number of names."""
  ta, tb = file_hashes(a), file_hashes(b)
  stats = []
  for d in (a, b):
    with open(os.path.join(d, "stats.json"), encoding="utf-8") as f:
      stats.append({k: v for k, v in json.load(f).items() if k != "gazetteer_names"})
  del ta["stats.json"], tb["stats.json"]
  return ta == tb and stats[0] == stats[1]


# run.py in a child that reports its peak resident memory (VmHWM) on stderr as it exits.
_RUN_WITH_PEAK = (
  "import atexit, runpy, sys; atexit.register(lambda: print('VmHWM', "
  "open('/proc/self/status').read().split('VmHWM:')[1].split()[0], file=sys.stderr)); "
  "sys.argv = ['run.py'] + sys.argv[1:]; runpy.run_path('run.py', run_name='__main__')"
)


def _build(news: str, entities: str, out: str) -> dict:
  """`run.py --mode=build_ssm` in a child: its CPU and wall seconds, peak memory, the gazetteer
  line it printed."""
  cmd = [sys.executable, "-c", _RUN_WITH_PEAK, "--mode=build_ssm", f"--news={news}"]
  cmd += [f"--output_dir={out}", f"--entities={entities}"]
  before, t0 = os.times(), time.perf_counter()
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
  wall, after = time.perf_counter() - t0, os.times()
  if proc.returncode:
    raise SystemExit(f"build_ssm failed: {proc.stderr[-2000:]}")
  cpu = after.children_user - before.children_user + after.children_system - before.children_system
  peak = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith("VmHWM ")]
  return {
    "cpu_s": round(cpu, 2),
    "wall_s": round(wall, 2),
    "peak_mb": round(int(peak[-1]) / 1024),
    "gazetteer_line": next(
      (line for line in proc.stdout.splitlines() if line.startswith("gazetteer ")), None
    ),
  }


def build(news: str, world_entities: str, names_path: str, tmp: str) -> dict:
  """build_ssm with the world's names and with `names_path`, alternating, twice each."""
  runs: dict = {"world": [], "large": []}
  for rep in range(2):
    for key, entities in (("world", world_entities), ("large", names_path)):
      runs[key].append(_build(news, entities, os.path.join(tmp, f"ssm-{key}-{rep}")))
  world, large = (min(runs[k], key=lambda r: r["cpu_s"]) for k in ("world", "large"))
  return {
    "build_world_names_cpu_s": world["cpu_s"],
    "build_large_cpu_s": large["cpu_s"],
    "build_wall_s": {k: [r["wall_s"] for r in v] for k, v in runs.items()},
    "build_peak_mb": {k: max(r["peak_mb"] for r in v) for k, v in runs.items()},
    "ratio": round(large["cpu_s"] / world["cpu_s"], 2),
    "same_store": _same_store(os.path.join(tmp, "ssm-world-0"), os.path.join(tmp, "ssm-large-0")),
    "gazetteer_line": large["gazetteer_line"],
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--names", default="1000,100000,1000000", help="gazetteer sizes")
  parser.add_argument("--world", default=None, help="a built world (default: built here)")
  parser.add_argument("--no_build", action="store_true", help="skip the build_ssm comparison")
  args = parser.parse_args()
  with tempfile.TemporaryDirectory(prefix="tlm-gazetteer-") as tmp:
    world = args.world
    if world is None:
      from tlm.synthetic.world import build_world

      world = os.path.join(tmp, "world")
      build_world(world)
    news, entities = os.path.join(world, "news.jsonl"), os.path.join(world, "entities.tsv")
    path = None
    for n in (int(x) for x in args.names.split(",")):
      path = os.path.join(tmp, f"names-{n}.tsv")
      write_names(entities, n, path)
      proc = subprocess.run(
        [sys.executable, __file__, "--probe", path, news, entities],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
      )
      if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
      print(json.dumps({"size": n, **json.loads(proc.stdout.splitlines()[-1])}), flush=True)
    if not args.no_build and path is not None:
      print(json.dumps({"build_names": n, **build(news, entities, path, tmp)}), flush=True)


if __name__ == "__main__":
  if len(sys.argv) > 1 and sys.argv[1] == "--probe":
    print(json.dumps(probe(*sys.argv[2:5])))
  else:
    main()
