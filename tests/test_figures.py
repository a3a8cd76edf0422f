"""Figures 2-5 render to valid PNG files from result dictionaries."""

import struct

import pytest

pytest.importorskip("matplotlib")

from tlm.eval import figures  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
  with open(path, "rb") as f:
    head = f.read(24)
  assert head[:8] == PNG_MAGIC
  width, height = struct.unpack(">II", head[16:24])
  return width, height


def test_all_figures_are_pngs(tmp_path):
  years = range(2018, 2030)
  figures.figure2(
    {"TempLAMA": {-2: 0.1, -1: 0.2, 0: 0.5, 1: 0.3}, "news SSM": {-1: 0.2, 0: 0.4, 1: 0.1}},
    {"uniform": {1: 0.1, 3: 0.3, 8: 0.6}, "yearly": {1: 0.3, 3: 0.3, 8: 0.4}},
    str(tmp_path / "figure2.png"),
  )
  figures.figure3(
    {
      "temporal": {"single": {y: -0.1 * (y - 2018) for y in years}, "multiple": {}},
      "uniform": {"single": {2019: -0.1}, "multiple": {2019: -0.3}},
    },
    str(tmp_path / "figure3.png"),
  )
  figures.figure4(
    {"temporal": {s: {y: float(i) for y in years} for i, s in enumerate(["never", "rare"])}},
    str(tmp_path / "figure4.png"),
  )
  figures.figure5(
    {"temporal": {0.5: {"2010-18": 0.5, "2019": 0.3}, 0.2: {"2010-18": 0.55, "2019": 0.2}}},
    {"temporal": {"2010-18": 0.52, "2019": 0.31}},
    str(tmp_path / "figure5.png"),
  )
  for name in ("figure2", "figure3", "figure4", "figure5"):
    width, height = _png_size(tmp_path / f"{name}.png")
    assert width > 300 and height > 200
  assert sorted(p.name for p in tmp_path.iterdir()) == [f"figure{i}.png" for i in range(2, 6)]


def test_a_line_per_model_with_a_band_over_seeds(tmp_path):
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots()
  line = figures._line(ax, {"2": [0.2, 0.4, 0.3], "1": [0.1, 0.3]}, "temporal")
  assert list(line.get_xdata()) == [1.0, 2.0]
  assert line.get_ydata() == pytest.approx([0.2, 0.3])  # the mean over seeds
  (band,) = ax.collections  # min..max over seeds
  ys = band.get_paths()[0].vertices[:, 1]
  assert min(ys) == pytest.approx(0.1) and max(ys) == pytest.approx(0.4)
  figures._line(ax, {1: 0.5, 2: 0.6}, "one seed")
  assert len(ax.collections) == 1  # a single seed draws no band
  plt.close(fig)
  seeds = [0.1, 0.2, 0.15]
  figures.figure2(
    {"TempLAMA": {-1: seeds, 0: seeds, 1: seeds}},
    {"tiny_uniform": {2: seeds, 6: seeds}, "tiny_yearly": {2: seeds, 6: [0.3]}},
    str(tmp_path / "figure2.png"),
  )
  figures.figure5(
    {"temporal": {0.5: {"2010-18": seeds, "2019": seeds}}},
    {"temporal": {"2010-18": seeds, "2019": [0.3]}},
    str(tmp_path / "figure5.png"),
  )
  assert _png_size(tmp_path / "figure2.png")[0] > 300 and (tmp_path / "figure5.png").is_file()


def _adapt_result(shift: float, news: bool = True) -> dict:
  """An `adaptation.adapt` result (the keys Figure 5 reads), F1 offset by `shift`."""

  def slices(x):
    out = {"2010-18": 0.5 - x + shift, "2019": 0.3 + x + shift, "2019-20": 0.3 + shift}
    if news:
      out["news"] = {"2010-18": 0.4 - x + shift, "2019": 0.35 + x + shift, "2019-20": 0.3}
    return out

  return {
    "new_year": 2019,
    "alphas": {"0.3": slices(0.1), "0.5": slices(0.2)},
    "retrained": slices(0.15),
  }


def test_figure5_has_templama_and_news_panels_with_bands_over_seeds(monkeypatch, tmp_path):
  from tlm.eval import adaptation

  adapted, retrained = adaptation.figure5_inputs(
    [{"tiny_temporal": _adapt_result(0.0)}, {"tiny_temporal": _adapt_result(0.1)}]
  )
  panels = ["TempLAMA 2010-18", "TempLAMA 2019", "news 2010-18", "news 2019"]
  assert list(adapted["tiny_temporal"][0.5]) == panels
  assert adapted["tiny_temporal"][0.5]["news 2019"] == pytest.approx([0.55, 0.65])
  assert retrained["tiny_temporal"]["TempLAMA 2010-18"] == pytest.approx([0.35, 0.45])
  drawn = []
  monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.append(fig))
  figures.figure5(adapted, retrained, str(tmp_path / "figure5.png"))
  (fig,) = drawn
  axes = [ax for ax in fig.axes if ax.get_visible()]
  assert [ax.get_title() for ax in axes] == [f"F1 on {p}" for p in panels]
  for ax in axes:
    assert len(ax.collections) == 1  # the adapted line's band over the two seeds
    assert len(ax.patches) == 1  # the retrained model's band
  # Without news numbers (a run that evaluated none) only the TempLAMA panels are drawn.
  adapted, _ = adaptation.figure5_inputs([{"m": _adapt_result(0.0, news=False)}])
  assert list(adapted["m"][0.3]) == panels[:2]


def _write(path, obj):
  import json

  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(obj))


def test_combined_seeds_draw_every_figure_from_the_saved_files(tmp_path):
  """`--mode=combine_seeds` draws Figures 2-5 with bands from each seed's saved numbers."""
  from tlm.miniature import over_seeds

  variant = {"tiny_uniform": "uniform", "tiny_temporal": "temporal"}
  future = {
    "loglik_change": {"single": {"2019": -0.1}, "multiple": {"2019": -0.3}},
    "entropy": {"entropy": {"frequent": {"2019": 1.0, "2020": 1.2}}},
  }
  per_seed = []
  for seed in (0, 1):
    results = tmp_path / f"seed={seed}" / "results"
    gap = {"TempLAMA": {"-1": 0.2 + seed, "0": 0.5}}
    _write(results / "figure2.json", {"by_gap": gap, "by_duration": {"uniform": {"2": 0.3}}})
    _write(results / "future.json", {"tiny_uniform": future, "tiny_temporal": future})
    _write(results / "adapt.json", {"tiny_temporal": _adapt_result(0.1 * seed)})
    loaded = over_seeds.load_figure_numbers(str(results), variant)
    assert set(loaded) == {"gap", "by_duration", "future", "adapted"}
    assert set(loaded["future"]) == {"uniform", "temporal"}
    per_seed.append({"seed": seed, "names": {v: n for n, v in variant.items()}} | loaded)
  out = tmp_path / "combined"
  notes = []
  over_seeds.draw_figures(str(out), per_seed, notes.append)
  assert notes == [] and sorted(p.name for p in out.iterdir()) == [
    f"figure{i}.png" for i in range(2, 6)
  ]
  assert _png_size(out / "figure5.png")[1] > 400  # two rows of panels
  del per_seed[1]["adapted"]
  over_seeds.draw_figures(str(tmp_path / "partial"), per_seed, notes.append)
  assert notes == ["note: figure5.png not drawn: no saved numbers for it on seed(s) [1]"]
  assert not (tmp_path / "partial" / "figure5.png").exists()
  _write(tmp_path / "bad" / "future.json", {"tiny_cbqa": future})
  with pytest.raises(over_seeds.DataError, match="not in seed_summary"):
    over_seeds.load_figure_numbers(str(tmp_path / "bad"), variant)
