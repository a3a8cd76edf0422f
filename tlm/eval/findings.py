"""The paper's findings, each computed as a boolean from the measured numbers.

`reproduce` writes these to `results/summary.json`. Nothing here is written in: every `holds`
is a comparison of numbers that the evaluation measured, and the numbers are stored beside it,
so a reader can check the verdict — and a finding that does not hold on a run is reported as
such.

The four findings (paper §3.1–§3.3):
1. Temporal beats Uniform on TempLAMA F1, on 2010–18 and on 2019–20 (Table 2).
2. Uniform does better than Yearly on long-lived facts and worse on short-lived ones
   (Figure 2, right; the paper's split is at 5 years).
3. For the Temporal model, future entropy over a fixed candidate set is ordered
   frequent > rare > never, and grows with the year (Figure 4).
4. At alpha = 0.5, adapting Temporal to 2019 loses less on 2010–18 than adapting Uniform, while
   Temporal gains on 2019 (Figure 5).
"""

from collections.abc import Mapping, Sequence

import numpy as np

SEEN = "2010-18"
FUTURE = "2019-20"
SHORT, LONG = "short", "long"
SLICES = (SEEN, FUTURE)


def _finding(name: str, statement: str, holds: bool, numbers: dict) -> dict:
  return {"name": name, "statement": statement, "holds": bool(holds), "numbers": numbers}


def temporal_beats_uniform(f1: Mapping[str, Mapping[str, float]]) -> dict:
  """Finding 1 from TempLAMA F1 per model and slice: `f1[model][slice]`."""
  t, u = f1["temporal"], f1["uniform"]
  return _finding(
    "temporal_beats_uniform",
    "Temporal beats Uniform on TempLAMA F1, 2010-18 and 2019-20",
    t[SEEN] > u[SEEN] and t[FUTURE] > u[FUTURE],
    {"temporal": {SEEN: t[SEEN], FUTURE: t[FUTURE]}, "uniform": {SEEN: u[SEEN], FUTURE: u[FUTURE]}},
  )


def uniform_vs_yearly_by_duration(f1_by_duration: Mapping[str, Mapping[str, float]]) -> dict:
  """Finding 2 from F1 on short- and long-lived facts: `f1_by_duration[model][short|long]`."""
  u, y = f1_by_duration["uniform"], f1_by_duration["yearly"]
  return _finding(
    "uniform_vs_yearly_by_duration",
    "Uniform does better than Yearly on long-lived facts and worse on short-lived ones",
    u[LONG] > y[LONG] and u[SHORT] < y[SHORT],
    {"uniform": {SHORT: u[SHORT], LONG: u[LONG]}, "yearly": {SHORT: y[SHORT], LONG: y[LONG]}},
  )


def _slope(years: Sequence[int], values: Sequence[float]) -> float:
  """Least-squares slope of values against years."""
  x = np.asarray(years, dtype=np.float64)
  v = np.asarray(values, dtype=np.float64)
  return float(np.polyfit(x, v, 1)[0])


def future_entropy_calibration(
  entropy: Mapping[str, Mapping[int, float]], first_future_year: int = 2019
) -> dict:
  """Finding 3 from the Temporal model's mean entropy `entropy[set][year]`.

  Ordering: the mean entropy over the future years (>= first_future_year) of each set satisfies
  frequent > rare > never. Growth: the least-squares slope over all evaluated years of the
  entropy averaged over the three sets is positive.
  """
  sets = ("frequent", "rare", "never")
  years = sorted(entropy["frequent"])
  future = [y for y in years if y >= first_future_year]
  mean_future = {s: float(np.mean([entropy[s][y] for y in future])) for s in sets}
  averaged = [float(np.mean([entropy[s][y] for s in sets])) for y in years]
  slope = _slope(years, averaged)
  slopes = {s: _slope(years, [entropy[s][y] for y in years]) for s in sets}
  ordered = mean_future["frequent"] > mean_future["rare"] > mean_future["never"]
  return _finding(
    "future_entropy_calibration",
    "For the Temporal model, future entropy is ordered frequent > rare > never and grows with "
    "the year",
    ordered and slope > 0,
    {
      "mean_future_entropy": mean_future,
      "ordered": ordered,
      "slope_per_year_mean_of_sets": slope,
      "slope_per_year": slopes,
      "years": years,
    },
  )


def adaptation_forgets_less(adapt: Mapping[str, Mapping[str, Mapping[str, float]]]) -> dict:
  """Finding 4 from `adapt[model]["before" | "after"][slice]` with slices "2010-18" and "2019".

  "after" is the model adapted with alpha = 0.5.
  """
  models = ("temporal", "uniform")
  loss = {m: adapt[m]["before"][SEEN] - adapt[m]["after"][SEEN] for m in models}
  gain = {m: adapt[m]["after"]["2019"] - adapt[m]["before"]["2019"] for m in models}
  return _finding(
    "adaptation_forgets_less",
    "At alpha 0.5, Temporal loses less on 2010-18 than Uniform while gaining on 2019",
    loss["temporal"] < loss["uniform"] and gain["temporal"] > 0,
    {"loss_on_2010_18": loss, "gain_on_2019": gain, "f1": {m: adapt[m] for m in loss}},
  )
