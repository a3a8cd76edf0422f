"""`--mode=reproduce`: the paper's experiments in miniature, end to end, on a laptop CPU.

On the embedded synthetic world (built on first use) with the tiny configs:
  1. pre-train the public T5 analogue (`tlm.miniature.starts`): WORKDIR/t5, span corruption on
     the world's undated generic text (the T5-CBQA analogue, WORKDIR/cbqa, is WORKDIR/t5 +
     salient span masking on the world's encyclopedia, trained in step 2);
  2. train Uniform, Temporal, the nine Yearly experts (2010-18) and the two models retrained on
     2010-19 (step 5), all from WORKDIR/t5 and for the same `train.steps` (each expert on its
     own year's slice), as in the paper, and T5-CBQA then T5-CBQA-ft (TempLAMA-train alone):
     `reproduce.workers` of these independent trainings at once, each in its own process
     (`tlm.miniature.parallel`; the numbers do not depend on it);
  3. evaluate them and T5-CBQA on TempLAMA and the held-out news (Table 2, Table 7, Figure 2);
  4. probe the future with Uniform, Temporal and T5-CBQA-ft (Figures 3 and 4);
  5. adapt Uniform and Temporal to 2019 for each alpha (the two at once) and compare with the
     retrained models (Figure 5);
  6. write the seed's results to WORKDIR/seed=S/results/ (eval.json, per_query.json, ...;
     seed_summary.json with the machine and software it ran on, `tlm.miniature.environment`);
and, over the seeds of `reproduce.seeds` (default: one, 0; `--set=reproduce.seeds=0,1,2`),
each run in its own WORKDIR/seed=S/ with the world, sampling and initialisation seeds all S:
  7. write WORKDIR/results/{summary.json, claims.md, table2.md, table7.md, figure2.png ..
     figure5.png} (`tlm.miniature.over_seeds`) and print Table 2 and the claims.
`summary.json` judges every claim of the paper (`tlm.miniature.claims`) on each seed, with its
hold-rate and a 95% interval of its margin (`tlm.miniature.claim_summary`).

`--check=DIR` then compares each model with a committed seed's (`tlm.miniature.regeneration`).
`--set=key=value` overrides apply to every model of the run, so e.g.
`--set=data.world_scale=2` scales the world of the whole reproduction.
Rerunning resumes: trained models are kept and only missing work is done.

Run time: about 29,000 training steps of the tiny model per seed (13 x 2000, the starts, the
adaptation), plus evaluation; docs/reproduction.md ("Run time") has the measured wall-clock
time.
"""

import os
import time

from tlm import configs, storage
from tlm.configs import Config
from tlm.configs.years import SLICES
from tlm.data.future_relations import load_future_relations
from tlm.errors import ConfigError
from tlm.eval import adaptation, experiments, figures, heldout, tables
from tlm.eval.results import (
  answer_baselines,
  future_entropy_by_set,
  future_loglik_change,
  news_scores,
  predictions_by_id,
  templama_f1,
)
from tlm.files import atomic_output_file, write_json
from tlm.miniature import claim_summary, environment, measurements, over_seeds, parallel, starts

DEFAULT_WORKDIR = os.path.join("runs", "reproduce")
VARIANTS = ("uniform", "temporal", "yearly")
ADAPTED = ("uniform", "temporal")  # adapted to 2019 and retrained on 2010-19 (Figure 5)


class _Stages:
  """Numbered stage headers with the elapsed time, so a long run shows where it is."""

  def __init__(self, total: int, log):
    self.total, self.n, self.log, self.start = total, 0, log, time.time()

  def __call__(self, title: str) -> None:
    self.n += 1
    minutes = (time.time() - self.start) / 60
    self.log(f"\n=== [{self.n}/{self.total}] {title}  (elapsed {minutes:.1f} min)")


def reproduction_configs(overrides: list[str]) -> dict[str, Config]:
  """tiny_uniform / tiny_temporal / tiny_yearly, each with the overrides applied, and
  `reproduce.steps` (when set) as their `train.steps`."""

  def config(variant: str) -> Config:
    c = configs.override(configs.get(f"tiny_{variant}"), overrides)
    return configs.replace(c, "train.steps", c.reproduce.steps) if c.reproduce.steps else c

  return {v: config(v) for v in VARIANTS}


def _train(config: Config, workdir: str, log) -> None:
  from tlm.eval import during_training
  from tlm.train.loop import run

  run(config, workdir, make_evaluators=during_training.evaluators, log=log)


def seed_dir(workdir: str, seed: int) -> str:
  """Where one seed of the reproduction runs (its models and its own results)."""
  return storage.join(workdir, f"seed={seed}")


def seed_overrides(seed: int) -> list[str]:
  """The overrides of one seed: a new world, sampling stream and initialisation."""
  return [f"data.world_seed={seed}", f"data.seed={seed}", f"train.seed={seed}"]


def seeds_of(overrides: list[str]) -> tuple[int, ...]:
  """`reproduce.seeds` after the overrides (ConfigError if empty or repeated)."""
  seeds = configs.override(configs.get("tiny_temporal"), overrides).reproduce.seeds
  if not seeds or len(set(seeds)) != len(seeds):
    raise ConfigError(f"reproduce.seeds must list distinct seeds, got {list(seeds)}")
  return seeds


def reproduce(overrides: list[str], workdir: str | None = None, log=print) -> dict:
  """Runs the whole miniature reproduction for every seed; returns the summary."""
  workdir = storage.abspath(workdir or DEFAULT_WORKDIR)
  seeds, start = seeds_of(overrides), time.time()
  per_seed = []
  for seed in seeds:
    path = seed_dir(workdir, seed)
    log(f"\n##### seed {seed} ({seeds.index(seed) + 1} of {len(seeds)}): {path}")
    per_seed.append(_reproduce_seed(seed, list(overrides) + seed_overrides(seed), path, log))
  results = storage.join(workdir, "results")
  summary = over_seeds.write(results, per_seed, log)
  log("\n" + over_seeds.table2(per_seed))
  log(claim_summary.claims_table(summary))
  log(f"results in {results} ({(time.time() - start) / 60:.1f} min)")
  return summary


def training_jobs(cfgs: dict, start_cfgs: dict, workdir: str, cache_dir: str) -> list[parallel.Job]:
  """The seed's trainings that depend only on the public T5 analogue, as independent jobs:
  Uniform, Temporal, each Yearly expert, the two models retrained on 2010-19 (Figure 5), and
  T5-CBQA followed by T5-CBQA-ft from it (one chain)."""
  from tlm.configs import expert_runs

  jobs = []
  for v in VARIANTS:
    for config, path in expert_runs(cfgs[v], storage.join(workdir, v)):
      name = config.name + (f" {config.data.year}" if v == "yearly" else "")
      jobs.append(parallel.Job(name, "train", ((config, path),), cache_dir))
  for v in ADAPTED:
    retrain = adaptation.retrained_config(cfgs[v])
    path = adaptation.retrained_dir(storage.join(workdir, v))
    jobs.append(parallel.Job(f"{cfgs[v].name} retrained", "train", ((retrain, path),), cache_dir))
  dirs = starts.start_dirs(workdir)
  chain = tuple((start_cfgs[k], dirs[k]) for k in ("cbqa", "cbqa_ft"))
  name = f"{start_cfgs['cbqa'].name} + {start_cfgs['cbqa_ft'].name}"
  jobs.append(parallel.Job(name, "train", chain, cache_dir))
  return jobs


def _reproduce_seed(seed: int, overrides: list[str], workdir: str, log) -> dict:
  """One seed of the reproduction in `workdir`; returns what `over_seeds.write` combines."""
  from tlm.input.locations import resolve_sources

  start_cfgs = starts.starting_configs(overrides, workdir)
  start_dirs = starts.start_dirs(workdir)
  cfgs = {
    v: starts.from_start(c, start_dirs["t5"]) for v, c in reproduction_configs(overrides).items()
  }
  workers, pin = cfgs["temporal"].reproduce.workers, cfgs["temporal"].reproduce.pin_workers
  machine = environment.record(reproduce=worker_settings(workers, pin))
  stage = _Stages(7, log)
  cache_dir = compilation_cache_dir(cfgs["temporal"])
  parallel.enable_compilation_cache(cache_dir)

  stage("building the synthetic world (once; cached)")
  resolve_sources(cfgs["temporal"].data)
  data = heldout.eval_data(cfgs["temporal"])
  log(
    f"{len(data.templama)} TempLAMA test queries, "
    f"{sum(len(v) for v in data.news.values())} held-out news examples"
  )

  stage("pre-training the public T5 analogue (once; kept)")
  starts.train_start(start_cfgs, workdir, "t5", log)

  jobs = training_jobs(cfgs, start_cfgs, workdir, cache_dir)
  stage(
    f"training {len(jobs)} models from {start_dirs['t5']}, {workers} at a time: Uniform, "
    f"Temporal, the Yearly experts and the 2010-19 retrained models "
    f"({cfgs['temporal'].train.steps} steps each), T5-CBQA then T5-CBQA-ft"
  )
  parallel.run_jobs(jobs, workers, log, pin)

  stage("evaluating on TempLAMA and the held-out news (Table 2, Table 7, Figure 2)")
  # T5-CBQA (as is) and T5-CBQA-ft first, as in the paper's Table 2.
  evals = {
    v: experiments.evaluate(start_cfgs[v], start_dirs[v], log, data) for v in starts.CBQA_ROWS
  }
  dirs = {v: storage.join(workdir, v) for v in VARIANTS}
  evals.update({v: experiments.evaluate(cfgs[v], dirs[v], log, data) for v in VARIANTS})
  cfgs.update({v: start_cfgs[v] for v in starts.CBQA_ROWS})
  dirs.update({v: start_dirs[v] for v in starts.CBQA_ROWS})
  expert_f1: dict = {}
  gap = experiments.yearly_gap_curves(cfgs["yearly"], dirs["yearly"], data, log, expert_f1)
  by_duration = {v: experiments.f1_by_duration(evals[v]) for v in VARIANTS}

  stage("probing the future with Uniform, Temporal and T5-CBQA-ft (Figures 3 and 4)")
  future = {}
  for v in ("uniform", "temporal", "cbqa_ft"):
    preds = predictions_by_id(evals[v])
    future[v] = experiments.future_results(cfgs[v], dirs[v], data, preds, log)

  stage(f"adapting Uniform and Temporal to 2019, {workers} at a time (Figure 5)")
  adapt_jobs = [
    parallel.Job(f"{cfgs[v].name} adaptation", "adapt", ((cfgs[v], dirs[v]),), cache_dir)
    for v in ADAPTED
  ]
  adapted = {v: r[0] for v, r in zip(ADAPTED, parallel.run_jobs(adapt_jobs, workers, log, pin))}

  stage("writing this seed's tables, figures and per-query numbers")
  results = storage.join(workdir, "results")
  sets = {q.id: q.set for q in load_future_relations(data.future_relations_dir).queries}
  retrain_steps = {v: adaptation.retrained_config(cfgs[v]).train.steps for v in adapted}
  meas = measurements.collect(seed, evals, expert_f1, future, sets, adapted, retrain_steps)
  write_json(storage.join(results, "per_query.json"), meas)
  summary = _summarize(cfgs, evals, adapted) | {"environment": machine}
  _write_outputs(results, cfgs, evals, gap, by_duration, future, adapted, summary, log)
  log(f"seed {seed}: results in {results} ({(time.time() - stage.start) / 60:.1f} min)")
  names = {v: cfgs[v].name for v in evals}
  return {
    "seed": seed,
    "names": names,
    "evals": evals,
    "gap": gap,
    "by_duration": by_duration,
    "future": future,
    "adapted": adapted,
    "measurements": meas,
    "baselines": answer_baselines(evals["temporal"]),
  }


def worker_settings(workers: int, pin: bool) -> dict:
  """How the seed's trainings run (`tlm.miniature.parallel`), for its environment record:
  unpinned workers compute with this process's affinity and threads, pinned ones on one core
  each with the XLA flag that turns XLA's intra-op threading off."""
  return {
    "workers": workers,
    "pin_workers": pin,
    "worker_xla_flags_added": parallel.SINGLE_THREADED_XLA if pin else "",
    "worker_cores": 1 if pin else "the affinity's",
  }


def compilation_cache_dir(config: Config) -> str:
  """Yearly experts and adapted models share shapes: compile each program once per machine."""
  from tlm.input.locations import synthetic_cache_dir

  return os.path.join(os.path.dirname(synthetic_cache_dir(config.data)), "jax_compilation_cache")


def _summarize(cfgs, evals, adapted) -> dict:
  """This seed's numbers at a glance (the claims are judged over the seeds, in results/)."""
  names = {v: cfgs[v].name for v in evals}
  baselines = answer_baselines(evals["temporal"])
  return {
    "templama_f1": {v: {s: templama_f1(evals[v], s) for s in SLICES} for v in VARIANTS},
    "news": {v: {s: news_scores(evals[v], s) for s in SLICES} for v in VARIANTS},
    "adaptation": {
      v: {"matched_retrained_at_step": adapted[v]["matched_at_step"], "steps": adapted[v]["steps"]}
      for v in adapted
    },
    "configs": {v: configs.to_dict(c) for v, c in cfgs.items()},
    "table2": tables.table2({names[v]: r for v, r in evals.items()}, baselines),
  }


def _write_outputs(results, cfgs, evals, gap, by_duration, future, adapted, summary, log):
  names = {v: cfgs[v].name for v in evals}
  write_json(storage.join(results, "seed_summary.json"), summary)
  write_json(
    storage.join(results, "eval.json"),
    {
      names[v]: {k: evals[v][k] for k in ("templama", "news", "answer_baselines") if k in evals[v]}
      for v in evals
    },
  )
  write_json(storage.join(results, "future.json"), {names[v]: r for v, r in future.items()})
  write_json(storage.join(results, "adapt.json"), {names[v]: r for v, r in adapted.items()})
  write_json(storage.join(results, "figure2.json"), {"by_gap": gap, "by_duration": by_duration})
  with atomic_output_file(storage.join(results, "table2.md")) as f:
    f.write(summary["table2"])
  with atomic_output_file(storage.join(results, "table7.md")) as f:
    f.write(tables.table7({names[v]: evals[v] for v in evals}))
  fig3 = {names[v]: future_loglik_change(r) for v, r in future.items()}
  fig4 = {names[v]: future_entropy_by_set(r) for v, r in future.items()}
  draws = [
    (figures.figure2, gap, {names[v]: d for v, d in by_duration.items()}, "figure2.png"),
    (figures.figure3, fig3, "figure3.png"),
    (figures.figure4, fig4, "figure4.png"),
  ]
  for fn, *args, name in draws:
    experiments.draw(log, fn, *args, storage.join(results, name))
  adaptation.draw_figure5(
    {names[v]: r for v, r in adapted.items()}, storage.join(results, "figure5.png"), log
  )
