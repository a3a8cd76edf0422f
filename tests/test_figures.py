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
