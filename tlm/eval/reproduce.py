"""`--mode=reproduce`: the paper's experiments in miniature, end to end, on a laptop CPU.

On the embedded synthetic world (built on first use) with the tiny configs:
  1. pre-train the two starting points (`tlm.eval.pretraining`): WORKDIR/t5, the public T5
     analogue (span corruption on the world's undated generic text), and WORKDIR/cbqa, the
     T5-CBQA analogue (WORKDIR/t5 + salient span masking on the world's encyclopedia);
  2. train Uniform, Temporal and the nine Yearly experts (2010-18), all from WORKDIR/t5 and
     for the same `train.steps` (each expert on its own year's slice), as in the paper;
     and T5-CBQA-ft (WORKDIR/cbqa + TempLAMA-train alone);
  3. evaluate them and T5-CBQA on TempLAMA and the held-out news (Table 2, Table 7, Figure 2);
  4. probe the future with Uniform, Temporal and T5-CBQA-ft (Figures 3 and 4);
  5. adapt Uniform and Temporal to 2019 for each alpha and retrain both on 2010-19 from
     WORKDIR/t5 (Figure 5);
  6. write WORKDIR/results/{table2.md, table7.md, summary.json, figure2.png .. figure5.png}
     and print Table 2.
`summary.json` states each of the paper's findings as a boolean computed from the measured
numbers (`tlm.eval.findings`), with the numbers beside it.

`--set=key=value` overrides apply to every model of the run, so e.g.
`--set=data.world_scale=2` scales the world of the whole reproduction.
Rerunning resumes: trained models are kept and only missing work is done.

Run time (estimate from the measured tiny step, 0.18 s on 2 unshared CPU cores; README,
"Deviations"): about 12,600 training steps, 38 minutes, plus about 10 of evaluation and
start-up. (The previous protocol, Yearly experts of 200 steps from random weights, measured
25.7 minutes.)
"""

import json
import os
import time

from tlm import configs
from tlm.configs import Config
from tlm.eval import adaptation, experiments, figures, findings, pretraining, tables
from tlm.files import atomic_output_file, write_json

DEFAULT_WORKDIR = os.path.join("runs", "reproduce")
VARIANTS = ("uniform", "temporal", "yearly")


class _Stages:
  """Numbered stage headers with the elapsed time, so a long run shows where it is."""

  def __init__(self, total: int, log):
    self.total, self.n, self.log, self.start = total, 0, log, time.time()

  def __call__(self, title: str) -> None:
    self.n += 1
    minutes = (time.time() - self.start) / 60
    self.log(f"\n=== [{self.n}/{self.total}] {title}  (elapsed {minutes:.1f} min)")


def reproduction_configs(overrides: list[str]) -> dict[str, Config]:
  """tiny_uniform / tiny_temporal / tiny_yearly, each with the overrides applied."""
  return {v: configs.override(configs.get(f"tiny_{v}"), overrides) for v in VARIANTS}


def _train(config: Config, workdir: str, log) -> None:
  from tlm.train.loop import run

  run(config, workdir, log=log)


def reproduce(overrides: list[str], workdir: str | None = None, log=print) -> dict:
  """Runs the whole miniature reproduction; returns the summary."""
  from tlm.train.data import resolve_sources

  workdir = os.path.abspath(workdir or DEFAULT_WORKDIR)
  starts = pretraining.starting_configs(overrides, workdir)
  start_dirs = pretraining.start_dirs(workdir)
  cfgs = {
    v: pretraining.from_start(c, start_dirs["t5"])
    for v, c in reproduction_configs(overrides).items()
  }
  stage = _Stages(7 + len(VARIANTS), log)
  _enable_compilation_cache(cfgs["temporal"])

  stage("building the synthetic world (once; cached)")
  resolve_sources(cfgs["temporal"].data)
  data = experiments.eval_data(cfgs["temporal"])
  log(f"{len(data.templama)} TempLAMA test queries, "
      f"{sum(len(v) for v in data.news.values())} held-out news examples")  # fmt: skip

  stage("pre-training the starting points: public T5 and T5-CBQA analogues (once; kept)")
  pretraining.train_starts(starts, workdir, log)

  dirs = {v: os.path.join(workdir, v) for v in VARIANTS}
  for v in VARIANTS:
    stage(f"training {cfgs[v].name} from {start_dirs['t5']} ({cfgs[v].train.steps} steps"
          + (" per expert)" if v == "yearly" else ")"))  # fmt: skip
    _train(cfgs[v], dirs[v], log)
  stage(f"training {starts['cbqa_ft'].name} (T5-CBQA + TempLAMA-train alone)")
  pretraining.train_cbqa_ft(starts, workdir, log)

  stage("evaluating on TempLAMA and the held-out news (Table 2, Table 7, Figure 2)")
  # T5-CBQA (as is) and T5-CBQA-ft first, as in the paper's Table 2.
  evals = {
    v: experiments.evaluate(starts[v], start_dirs[v], log, data) for v in pretraining.CBQA_ROWS
  }
  evals.update({v: experiments.evaluate(cfgs[v], dirs[v], log, data) for v in VARIANTS})
  cfgs.update({v: starts[v] for v in pretraining.CBQA_ROWS})
  dirs.update({v: start_dirs[v] for v in pretraining.CBQA_ROWS})
  gap = experiments.yearly_gap_curves(cfgs["yearly"], dirs["yearly"], data, log)
  by_duration = {v: experiments.f1_by_duration(evals[v]) for v in VARIANTS}

  stage("probing the future with Uniform, Temporal and T5-CBQA-ft (Figures 3 and 4)")
  future = {}
  for v in ("uniform", "temporal", "cbqa_ft"):
    preds = experiments.predictions_by_id(evals[v])
    future[v] = experiments.future_results(cfgs[v], dirs[v], data, preds, log)

  stage("adapting to 2019 and retraining on 2010-19 (Figure 5)")
  adapted = {v: adaptation.adapt(cfgs[v], dirs[v], log, data) for v in ("uniform", "temporal")}

  stage("writing tables, figures and the summary")
  results = os.path.join(workdir, "results")
  summary = _summarize(cfgs, evals, future, adapted)
  _write_outputs(results, cfgs, evals, gap, by_duration, future, adapted, summary, log)
  log("\n" + summary["table2"])
  for f in summary["findings"]:
    log(f"{'HOLDS' if f['holds'] else 'DOES NOT HOLD'}: {f['statement']}")
  log(f"\nresults in {results} ({(time.time() - stage.start) / 60:.1f} min)")
  return summary


def _enable_compilation_cache(config: Config) -> None:
  """Yearly experts and adapted models share shapes: compile each program once per machine."""
  import jax

  from tlm.train.data import synthetic_cache_dir

  path = os.path.join(os.path.dirname(synthetic_cache_dir(config.data)), "jax_compilation_cache")
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def _summarize(cfgs, evals, future, adapted) -> dict:
  f1 = {
    v: {s: evals[v]["templama"]["metrics"][s]["overall"]["f1"] for s in findings.SLICES}
    for v in VARIANTS
  }
  by_lifetime = {
    v: {
      "short": evals[v]["templama"]["metrics"]["2010-18_short_lived"]["overall"]["f1"],
      "long": evals[v]["templama"]["metrics"]["2010-18_long_lived"]["overall"]["f1"],
    }
    for v in VARIANTS
  }
  match = f"{cfgs['temporal'].adapt.match_alpha:g}"
  adapt_numbers = {
    v: {"before": adapted[v]["before"], "after": adapted[v]["alphas"][match]}
    for v in ("temporal", "uniform")
  }
  new_year = str(cfgs["temporal"].adapt.new_year)
  for v in adapt_numbers:
    for k in ("before", "after"):
      adapt_numbers[v][k] = {"2010-18": adapt_numbers[v][k]["2010-18"],
                             "2019": adapt_numbers[v][k][new_year]}  # fmt: skip
  results = [
    findings.temporal_beats_uniform(f1),
    findings.uniform_vs_yearly_by_duration(by_lifetime),
    findings.future_entropy_calibration(future["temporal"]["entropy"]["entropy"]),
    findings.adaptation_forgets_less(adapt_numbers),
  ]
  names = {v: c.name for v, c in cfgs.items()}
  baselines = evals["temporal"]["answer_baselines"]
  table2 = tables.table2({names[v]: r for v, r in evals.items()}, baselines)
  return {
    "findings": results,
    "templama_f1": f1,
    "news": {v: {k: evals[v].get("news", {}).get(k) for k in findings.SLICES} for v in VARIANTS},
    "adaptation": {
      v: {"matched_retrained_at_step": adapted[v]["matched_at_step"], "steps": adapted[v]["steps"]}
      for v in adapted
    },
    "configs": {v: configs.to_dict(c) for v, c in cfgs.items()},
    "table2": table2,
  }


def _write_outputs(results, cfgs, evals, gap, by_duration, future, adapted, summary, log):
  names = {v: c.name for v, c in cfgs.items()}
  write_json(os.path.join(results, "summary.json"), summary)
  write_json(
    os.path.join(results, "eval.json"),
    {
      names[v]: {k: evals[v][k] for k in ("templama", "news", "answer_baselines") if k in evals[v]}
      for v in evals
    },
  )
  write_json(os.path.join(results, "future.json"), {names[v]: r for v, r in future.items()})
  write_json(os.path.join(results, "adapt.json"), {names[v]: r for v, r in adapted.items()})
  write_json(os.path.join(results, "figure2.json"), {"by_gap": gap, "by_duration": by_duration})
  with atomic_output_file(os.path.join(results, "table2.md")) as f:
    f.write(summary["table2"])
  with atomic_output_file(os.path.join(results, "table7.md")) as f:
    f.write(tables.table7({names[v]: evals[v] for v in evals}))
  draws = [
    (figures.figure2, gap, {names[v]: d for v, d in by_duration.items()}, "figure2.png"),
    (figures.figure3, {names[v]: r["loglik_change"] for v, r in future.items()}, "figure3.png"),
    (
      figures.figure4,
      {names[v]: r["entropy"]["entropy"] for v, r in future.items()},
      "figure4.png",
    ),  # fmt: skip
  ]
  for fn, *args, name in draws:
    experiments.draw(log, fn, *args, os.path.join(results, name))
  adaptation.draw_figure5(
    {names[v]: r for v, r in adapted.items()}, os.path.join(results, "figure5.png"), log
  )


def load_summary(workdir: str) -> dict:
  with open(os.path.join(workdir, "results", "summary.json")) as f:
    return json.load(f)
