"""A committed result file, as the studies read it: bounded JSON, NAME.xz where NAME is kept
compressed (the large per-query dumps under docs/results/: docs/results/README.md)."""

from tlm import safe_read
from tlm.errors import DataError

# The largest committed result, decompressed, is an eval.json of about 4 MB.
MAX_RESULT_BYTES = 1 << 30


def read_json(path: str):
  """The JSON value of a committed result file (or of its `.xz`), one DataError line if not."""
  return safe_read.read_json(path, MAX_RESULT_BYTES, error=DataError, what="a committed result")


# ---- how the committed results are packed -------------------------------------------------
#
# A seed's per_query.json and eval.json are 2.6-3.8 MB of JSON each; XZ keeps them at about 5%
# of that, and a reader (`read_json`, `tlm.safe_read.read_json`) takes them as they are. The
# figures are kept as 256-colour PNGs (a third of matplotlib's RGBA bytes, the same picture at
# the eye's resolution); a rerun writes full RGBA again.
PACKED_JSON = ("per_query.json", "eval.json")


def pack_json(path: str) -> str:
  """Replaces `path` by `path.xz` (XZ, preset 9e: the same bytes for the same input); returns
  the new path."""
  import lzma
  import os

  from tlm.files import atomic_output_file

  with open(path, "rb") as f:
    raw = f.read()
  packed = lzma.compress(raw, format=lzma.FORMAT_XZ, preset=9 | lzma.PRESET_EXTREME)
  if lzma.decompress(packed) != raw:  # never drop a file whose copy does not read back
    raise DataError(f"{path}: its XZ copy does not decompress to it")
  with atomic_output_file(path + safe_read.XZ_SUFFIX, mode="wb") as f:
    f.write(packed)
  os.remove(path)
  return path + safe_read.XZ_SUFFIX


def pack_png(path: str) -> None:
  """Rewrites a figure as a 256-colour PNG (median cut), in place."""
  from PIL import Image

  with Image.open(path) as im:
    quantized = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
  quantized.save(path, optimize=True)


def main() -> None:
  """`python -m research.committed DIR...`: packs every results dump and figure under DIRs."""
  import argparse
  import os

  ap = argparse.ArgumentParser(description=main.__doc__)
  ap.add_argument("dirs", nargs="+")
  args = ap.parse_args()
  for top in args.dirs:
    for dirpath, _, names in os.walk(top):
      for name in sorted(names):
        path = os.path.join(dirpath, name)
        if name in PACKED_JSON:
          print(f"{path} -> {pack_json(path)}")
        elif name.endswith(".png"):
          before = os.path.getsize(path)
          pack_png(path)
          print(f"{path}: {before} -> {os.path.getsize(path)} bytes")


if __name__ == "__main__":
  main()
