"""C5, explanation (a): are the year tokens a Temporal model reads for 2019-20 ever trained?

  python -m research.c5.year_embeddings --root=runs/verdict/default --seeds=0,1,2

This script reads the models of the pre-registered verdict (`research.default.search`
--preregistered). For each seed ROOT/seed=S holds the `tiny_t5` start (t5/, step 400) and
Uniform and Temporal (step 2800). The script compares the token-embedding rows of the years
2010-2020 between the start and each trained model. It judges the predictions P1-P3 of
research/c5/PREREGISTRATION.md, writes research/c5/year_embeddings.json and prints a
summary. No model is trained.
"""

import argparse
import json
import os

import numpy as np

from tlm.data.vocab import Vocabulary
from tlm.files import write_json
from tlm.models.formats import orbax_params

YEARS = tuple(range(2010, 2021))
OUT = os.path.join("research", "c5", "year_embeddings.json")


def year_ids(vocab: Vocabulary) -> dict[int, int]:
  """The one piece of each year (world v3 makes every year 2000-2035 one piece)."""
  ids = {}
  for year in YEARS:
    pieces = vocab.encode(str(year))
    if len(pieces) != 1:
      raise SystemExit(f"year {year} is {len(pieces)} pieces in this vocabulary, not one")
    ids[year] = pieces[0]
  return ids


def embedding(run_dir: str, step: int) -> np.ndarray:
  params = orbax_params.restore(os.path.join(run_dir, "checkpoints", str(step), "params"))
  return np.asarray(params["token_embedder"]["embedding"], dtype=np.float32)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
  return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def measure_seed(seed_dir: str) -> dict:
  vocab = Vocabulary(os.path.join(seed_dir, "t5", "spiece.model"))
  ids = year_ids(vocab)
  start = embedding(os.path.join(seed_dir, "t5"), 400)
  out = {"year_piece_ids": {str(y): i for y, i in ids.items()}}
  for variant in ("uniform", "temporal"):
    trained = embedding(os.path.join(seed_dir, variant), 2800)
    moved = {str(y): float(np.max(np.abs(trained[i] - start[i]))) for y, i in ids.items()}
    adjacent = [cosine(trained[ids[y]], trained[ids[y + 1]]) for y in range(2010, 2018)]
    out[variant] = {
      "max_abs_change_from_start": moved,
      "unchanged_bit_for_bit": {
        str(y): bool(np.array_equal(trained[i], start[i])) for y, i in ids.items()
      },
      "cosine_2018_2019": cosine(trained[ids[2018]], trained[ids[2019]]),
      "cosine_adjacent_2010_2018": adjacent,
      "cosine_adjacent_2010_2018_mean": float(np.mean(adjacent)),
    }
  return out


def judge(per_seed: dict) -> dict:
  seeds = list(per_seed.values())
  untouched = [
    m[v]["unchanged_bit_for_bit"][y]
    for m in seeds
    for v in ("uniform", "temporal")
    for y in ("2019", "2020")
  ]
  moved = [
    not m["temporal"]["unchanged_bit_for_bit"][str(y)] for m in seeds for y in range(2010, 2019)
  ]
  t = [m["temporal"] for m in seeds]
  ordered = [x["cosine_2018_2019"] < x["cosine_adjacent_2010_2018_mean"] for x in t]
  return {"P1": all(untouched), "P2": all(moved), "P3": all(ordered)}


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--root", required=True, help="the verdict's setting directory")
  p.add_argument("--seeds", default="0,1,2")
  p.add_argument("--output", default=OUT)
  args = p.parse_args(argv)
  seeds = [int(s) for s in args.seeds.split(",")]
  per_seed = {str(s): measure_seed(os.path.join(args.root, f"seed={s}")) for s in seeds}
  result = {"predictions": judge(per_seed), "seeds": per_seed}
  write_json(args.output, result)
  for s, m in per_seed.items():
    t = m["temporal"]
    print(
      f"seed {s}: Temporal max |change| 2018 {t['max_abs_change_from_start']['2018']:.4f}, "
      f"2019 {t['max_abs_change_from_start']['2019']:.4f}, "
      f"2020 {t['max_abs_change_from_start']['2020']:.4f}; cos(2018, 2019) "
      f"{t['cosine_2018_2019']:+.3f}, adjacent 2010-18 mean "
      f"{t['cosine_adjacent_2010_2018_mean']:+.3f}"
    )
  print(json.dumps(result["predictions"]))


if __name__ == "__main__":
  main()
