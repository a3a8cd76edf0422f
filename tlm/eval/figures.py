"""PNG figures for the paper's Figures 2-5, drawn from plain result dictionaries.

A curve maps x to a number, or to a list of numbers, one per seed (`reproduce.seeds`): the line
is then their mean and a shaded band spans their minimum to maximum, so a reader sees how far
the seeds agree.

matplotlib is optional (requirements.txt lists it; nothing else needs it): without it every
function raises `FiguresUnavailable`, whose message says how to install it, and callers write
their JSON results anyway. The Agg backend is forced so figures render on headless machines.
"""

from collections.abc import Mapping, Sequence

from tlm.errors import UserError


class FiguresUnavailable(UserError):
  """matplotlib is not installed."""


def stack(values: Sequence):
  """Nested dicts of numbers, one per seed -> the same nesting with a list of numbers at each
  leaf (a key absent from a seed, or None, is left out of that leaf's list)."""
  present = [v for v in values if v is not None]
  if present and all(isinstance(v, Mapping) for v in present):
    keys = list(dict.fromkeys(k for v in present for k in v))
    return {k: stack([v.get(k) for v in present]) for k in keys}
  return [float(v) for v in present]


def _pyplot():
  try:
    import matplotlib
  except ImportError:
    raise FiguresUnavailable(
      "matplotlib is not installed, so no PNG figures were drawn (pip install matplotlib); "
      "the JSON results are complete"
    ) from None
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


def _save(fig, path: str) -> None:
  from tlm.files import atomic_output_file

  fig.tight_layout()
  with atomic_output_file(path, "wb") as f:
    fig.savefig(f, format="png", dpi=120)
  _pyplot().close(fig)


def _sorted_items(d: Mapping):
  return sorted(((float(k), v) for k, v in d.items()), key=lambda kv: kv[0])


def _values(v) -> list[float]:
  return [float(x) for x in v] if isinstance(v, list | tuple) else [float(v)]


def _line(ax, curve: Mapping, label: str, **kwargs):
  """One line (mean over seeds) with a min-max band where a point has several seeds."""
  import numpy as np

  points = [(x, _values(v)) for x, v in _sorted_items(curve) if _values(v)]
  xs = [x for x, _ in points]
  (line,) = ax.plot(xs, [np.mean(v) for _, v in points], marker="o", label=label, **kwargs)
  if any(len(v) > 1 for _, v in points):
    lo, hi = [min(v) for _, v in points], [max(v) for _, v in points]
    ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, lw=0)
  return line


def figure2(
  f1_by_gap: Mapping[str, Mapping], f1_by_duration: Mapping[str, Mapping], path: str
) -> None:
  """Figure 2. Left: F1 of the yearly experts against test year - train year, one line per
  benchmark (e.g. TempLAMA, news SSM). Right: TempLAMA F1 by fact duration (years), one line per
  model (Uniform, Yearly, Temporal)."""
  plt = _pyplot()
  fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
  for name, curve in f1_by_gap.items():
    _line(left, curve, name)
  left.axvline(0, color="gray", lw=0.8, ls="--")
  left.set_xlabel("test year - train year")
  left.set_ylabel("F1")
  left.set_title("Yearly experts away from their year")
  left.legend()
  for name, curve in f1_by_duration.items():
    _line(right, curve, name)
  right.set_xlabel("fact duration (years, from the facts' dates)")
  right.set_ylabel("TempLAMA F1")
  right.set_title("F1 by how long the answer holds")
  right.legend()
  _save(fig, path)


def figure3(delta_loglik: Mapping[str, Mapping[str, Mapping]], path: str) -> None:
  """Figure 3: change of log-likelihood of the 2018-correct answer as the query year goes into
  the future, `delta_loglik[model][single|multiple][year]`, one panel per model (other keys,
  such as the group counts, are ignored)."""
  plt = _pyplot()
  models = list(delta_loglik)
  fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models), 3.8), squeeze=False)
  for ax, model in zip(axes[0], models):
    for group in ("single", "multiple"):
      curve = delta_loglik[model].get(group)
      if curve:
        _line(ax, curve, group)
    ax.axhline(0, color="gray", lw=0.8, ls="--")
    ax.set_title(model)
    ax.set_xlabel("query year")
    ax.set_ylabel("log-likelihood change vs 2018")
    if ax.get_legend_handles_labels()[0]:  # no group may have a 2018-correct query
      ax.legend()
  _save(fig, path)


def figure4(entropy: Mapping[str, Mapping[str, Mapping]], path: str) -> None:
  """Figure 4: entropy over the candidate set by year, `entropy[model][set][year]`, one panel
  per model, one line per query set (frequent / rare / never)."""
  plt = _pyplot()
  models = list(entropy)
  fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models), 3.8), squeeze=False)
  for ax, model in zip(axes[0], models):
    for name, curve in entropy[model].items():
      _line(ax, curve, name)
    ax.set_title(model)
    ax.set_xlabel("query year")
    ax.set_ylabel("entropy (nats)")
    ax.legend()
  _save(fig, path)


def figure5(
  adapted: Mapping[str, Mapping], retrained: Mapping[str, Mapping[str, float]], path: str
) -> None:
  """Figure 5: F1 after adaptation against alpha, `adapted[model][alpha][panel]`, one panel per
  key (e.g. "TempLAMA 2010-18", "TempLAMA 2019", "news 2010-18", "news 2019": the paper's
  TempLAMA and CustomNews panels), in the order first seen, two to a row; the model
  retrained from scratch, `retrained[model][panel]`, as a dashed line of the same colour."""
  import math

  plt = _pyplot()
  panels = list(
    dict.fromkeys(p for curves in adapted.values() for row in curves.values() for p in row)
  )
  cols = max(1, min(2, len(panels)))
  rows = math.ceil(len(panels) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.8 * rows), squeeze=False)
  for ax, panel in zip(axes.flat, panels):
    for model, curve in adapted.items():
      points = {a: row[panel] for a, row in curve.items() if panel in row}
      if not points:
        continue
      line = _line(ax, points, f"{model} adapted")
      if panel in retrained.get(model, {}):
        level = _values(retrained[model][panel])
        color = line.get_color()
        ax.axhline(sum(level) / len(level), color=color, ls="--", label=f"{model} retrained")
        if len(level) > 1:
          ax.axhspan(min(level), max(level), color=color, alpha=0.1, lw=0)
    ax.set_title(f"F1 on {panel}")
    ax.set_xlabel("alpha (share of the new year)")
    ax.set_ylabel("F1")
    ax.legend(fontsize="small")
  for ax in list(axes.flat)[len(panels) :]:
    ax.set_visible(False)
  _save(fig, path)
