"""`--mode=convert`: a checkpoint rewritten as an HF directory, a tlm model directory or a T5X
checkpoint.

  python run.py --mode=convert --checkpoint=SRC --output_dir=DST --format=hf|tlm|t5x [--vocab=...]

SRC is anything `tlm.models.checkpoints.load_checkpoint` reads: an HF directory (safetensors,
pytorch_model.bin or flax_model.msgpack), a Mesh-TF checkpoint prefix (e.g. the paper's
T5-CBQA / SSM baselines), a T5X checkpoint (legacy or Orbax), a tlm model directory or a
training workdir. `--format=hf` writes `config.json`, `model.safetensors` and `spiece.model`,
loadable by transformers' `T5ForConditionalGeneration.from_pretrained`; `--format=tlm` writes
`model_config.json`, `spiece.model` and orbax `params/` (docs/ARCHITECTURE.md); `--format=t5x`
writes a T5X model directory, `DST/checkpoint_0/` in T5X's legacy layout (msgpack + gzip zarr,
version 3, with T5X's initial Adafactor state) that T5X's `restore_checkpoint` reads, and
`DST/spiece.model`. The vocabulary is copied from
`--vocab` or from beside SRC when there is one (a conversion needs none). The conversion is
strict (every source tensor used once, shapes checked) and DST appears only when complete; a
full disk is a one-line error naming DST. One convert at a time writes DST (a lock beside it).
DST is replaced as a whole, so it must be absent, empty or a previous convert's output (only
the files a convert writes, in any format): a file, or a directory holding anything else (a
user's notes, the wrong directory typed, a T5X run's later `checkpoint_STEP`), is an error
before anything is read or written; replacing a previous output (redoing a conversion) is
done with a notice naming what was replaced. Staging directories that killed converts into
DST left beside it are removed, with a notice.
"""

import os

from tlm import checksums, storage
from tlm.cli.data import clean_interrupted
from tlm.cli.inference import find_vocabulary, require_flags
from tlm.console import notice
from tlm.errors import ConfigError, DataError
from tlm.files import check_replaceable

# What a convert writes in DST, in each format (hf; tlm; t5x, whose step is 0): a directory
# holding only these may be replaced by another convert.
OUTPUTS = frozenset(
  {"config.json", "model.safetensors", "spiece.model"}
  | {"model_config.json", "params", checksums.MANIFEST}
  | {"checkpoint_0"}
)


def _inside(path: str, directory: str) -> bool:
  """`storage.within`, seeing through links of local paths."""
  path, directory = storage.location(path), storage.location(directory)
  real = [
    p if p.is_remote else storage.Location(os.path.realpath(p), None) for p in (path, directory)
  ]
  return storage.within(*real)


def _earlier_output(output_dir: str) -> list[str]:
  """What an earlier convert wrote in `output_dir` (`check_replaceable` allowed nothing else)."""
  if not storage.isdir(output_dir):
    return []
  return sorted(n for n in storage.listdir(output_dir) if not n.startswith("."))


def main(flags) -> None:
  """--mode=convert: reads --checkpoint and writes --output_dir in --format."""
  require_flags(flags, "convert", "checkpoint", "output_dir")
  if flags.format not in ("hf", "tlm", "t5x"):
    raise ConfigError(f"--format must be hf, tlm or t5x, got {flags.format!r}")
  if _inside(flags.checkpoint, flags.output_dir):
    raise ConfigError(
      f"--output_dir={flags.output_dir} would replace the checkpoint being converted"
    )
  # Nothing convert did not write is ever replaced (the whole DST is): checked before the
  # checkpoint is read, and again under the lock, where nothing can change it any more.
  check_replaceable(flags.output_dir, OUTPUTS)
  spiece_model = None
  vocab_path = find_vocabulary(flags)
  if vocab_path is not None:
    try:
      spiece_model = storage.read_bytes(vocab_path)
    except OSError as e:
      raise DataError(f"cannot read vocabulary ({e.strerror})", vocab_path) from None

  from tlm.models import checkpoints
  from tlm.workdir_lock import WorkdirLock

  # A second convert into the same --output_dir stops at once instead of racing the rename.
  with WorkdirLock.beside(flags.output_dir, "convert"):
    check_replaceable(flags.output_dir, OUTPUTS)
    clean_interrupted(flags.output_dir)
    replaced = _earlier_output(flags.output_dir)
    config, params = checkpoints.load_checkpoint(flags.checkpoint)
    save = {"hf": checkpoints.save_hf, "tlm": checkpoints.save_tlm, "t5x": checkpoints.save_t5x}
    save = save[flags.format]
    save(flags.output_dir, config, params, spiece_model=spiece_model)
  if replaced:
    # Replacing an earlier convert's output is how a conversion is redone; said, so that an
    # export a user meant to keep (a T5X directory handed on) is not replaced unnoticed.
    notice(f"replaced the earlier convert output in {flags.output_dir} ({', '.join(replaced)})")
  print(
    f"convert: {flags.checkpoint} -> {flags.output_dir} ({flags.format}"
    f"{', with spiece.model' if spiece_model else ', no vocabulary found'})"
  )
