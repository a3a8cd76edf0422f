"""The table of docs/sizing.md: memory per device of the paper's models, from tlm's dry runs.

  python benchmarks/sizing.py > sizing.md        # ~30 minutes on 2 CPU cores
  python benchmarks/sizing.py --child 32 > v3.jsonl   # or one device count at a time, then
  python benchmarks/sizing.py --rows v3.jsonl gpu.jsonl > sizing.md

For small / large / xxl (`*_temporal`: batch 2048 of 128 + 32 tokens, the paper's meshes and
remat) on a TPU v3-32 (32 devices of 16 GiB) and on 8 GPUs of 80 GB, FSDP off and on, it runs
the dry runs of `tlm.train.train_dry_run` on that many simulated CPU devices (one child process per
device count, XLA_FLAGS set before jax starts) and prints a Markdown table:
- parameters and Adafactor state per device: exact, from the shardings of the full model;
- temporaries per device (activations, gradients, XLA's workspace) of the train step and of
  evaluation (greedy decoding and scoring of `eval.batch_size` rows, the larger of the two):
  XLA's buffer assignment of the compiled program. XLA's CPU compiler needs ~10 minutes for
  the whole `large` step, so the programs are compiled with 1 and 2 layers per stack and the
  temporaries extrapolated linearly to the full depth (each layer adds the same buffers);
- whether parameters + optimizer state + temporaries fit the device's memory.
XLA's CPU scheduler is not the TPU's or GPU's, so the temporaries are approximate; for the
train step they are an upper bound: on CPU they do not shrink with remat (measured for
large at 64 rows, 1 -> 2 layers: +1.4 GiB with model.remat=none, full and dots alike),
so a "not shown" there means the bound exceeds the device, not that the step cannot fit.
Single rows: `python run.py --mode=train --config=... --dry_run` and `--mode=eval --dry_run`,
on a machine with the real devices or simulated ones.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARDWARE = (  # name, devices, bytes per device
  ("TPU v3-32", 32, 16 * 2**30),
  ("8 x 80 GB GPU", 8, 80 * 10**9),
)
SIZES = ("small", "large", "xxl")
GIB = 2**30


def _mesh_sets(size: str, devices: int) -> list[str]:
  # The paper configs' meshes: model parallelism 8 for xxl, data parallelism otherwise.
  model = 8 if size == "xxl" else 1
  return [f"mesh.data={devices // model}", f"mesh.model={model}"]


def measure(size: str, devices: int, fsdp: bool) -> dict:
  """One row on the devices of this process (run with that many simulated devices)."""
  import jax
  from flax import linen as nn

  from tlm import configs
  from tlm.infer import eval_dry_run as infer_dry_run
  from tlm.models.shapes import model_config
  from tlm.models.t5 import Transformer, get_preset
  from tlm.sharding import partitioning
  from tlm.train import train_dry_run as dry_run
  from tlm.train.optim import make_optimizer
  from tlm.train.state import state_layout

  base = configs.override(
    configs.get(f"{size}_temporal"), _mesh_sets(size, devices) + [f"mesh.fsdp={fsdp}"]
  )
  t5 = model_config(base.model, get_preset(base.model.preset).vocab_size)
  mesh = partitioning.make_mesh(base.mesh.data, base.mesh.model)
  tc = base.train
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.axis_rules(fsdp)):
    layout = state_layout(Transformer(t5), make_optimizer(tc.schedule, tc.learning_rate), mesh)
  row = {
    "size": size,
    "devices": devices,
    "fsdp": fsdp,
    "mesh": dict(mesh.shape),
    "parameters": partitioning.bytes_per_device(layout.abstract.params),
    "optimizer": partitioning.bytes_per_device(layout.abstract.opt_state),
  }
  quiet = lambda _: None
  train, evaluate = [], []
  for layers in (1, 2):
    config = configs.replace(base, "model.num_layers", layers)
    train.append(dry_run.dry_run(config, log=quiet)["memory_per_device"]["temporaries"])
    report = infer_dry_run.config_eval_dry_run(config, log=quiet)
    evaluate.append(max(m["temporaries"] for m in report["memory_per_device"].values()))
  depth = t5.num_encoder_layers
  row["train_temporaries"] = train[0] + (depth - 1) * (train[1] - train[0])
  row["eval_temporaries"] = evaluate[0] + (depth - 1) * (evaluate[1] - evaluate[0])
  return row


def _child(devices: int) -> list[dict]:
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
  # LLVM optimisation does not change the buffer assignment, only the compile time.
  env["XLA_FLAGS"] = (
    f"--xla_force_host_platform_device_count={devices} --xla_backend_optimization_level=0"
  )
  out = subprocess.run(
    [sys.executable, __file__, "--child", str(devices)],
    env=env,
    check=True,
    capture_output=True,
    text=True,
  )
  return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _fits(total: int, capacity: int) -> str:
  return "yes" if total <= capacity else "no"


def _train_fits(total: int, capacity: int) -> str:
  # The CPU temporaries are an upper bound for remat configs (module docstring): above the
  # capacity they do not show that the step cannot fit.
  return "yes" if total <= capacity else "not shown"


def table(rows: list[dict]) -> str:
  head = (
    "| model | hardware | mesh (data x model) | FSDP | params f32 (GiB) | Adafactor (MiB) "
    "| train temp. (GiB) | train fits (total) | params bf16 (GiB) | eval temp. (GiB) "
    "| eval fits (f32 / bf16) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|\n"
  )
  lines = []
  for r in rows:
    name, _, capacity = next(h for h in HARDWARE if h[1] == r["devices"])
    p32, opt = r["parameters"], r["optimizer"]
    p16 = p32 // 2
    train = p32 + opt + r["train_temporaries"]
    ev32, ev16 = p32 + r["eval_temporaries"], p16 + r["eval_temporaries"]
    g = lambda b: f"{b / GIB:.2f}" if b < GIB else f"{b / GIB:.1f}"
    lines.append(
      f"| {r['size']} | {name} | {r['mesh']['data']} x {r['mesh']['model']} | "
      f"{'on' if r['fsdp'] else 'off'} | {g(p32)} | {opt / 2**20:.1f} | "
      f"{g(r['train_temporaries'])} | {_train_fits(train, capacity)} ({g(train)}) | {g(p16)} | "
      f"{g(r['eval_temporaries'])} | {_fits(ev32, capacity)} / {_fits(ev16, capacity)} |"
    )
  return head + "\n".join(lines) + "\n"


def main() -> None:
  if len(sys.argv) == 3 and sys.argv[1] == "--child":  # with XLA_FLAGS set by the caller
    devices = int(sys.argv[2])
    for size in SIZES:
      for fsdp in (False, True):
        print(json.dumps(measure(size, devices, fsdp)), flush=True)
    return
  if len(sys.argv) > 2 and sys.argv[1] == "--rows":
    rows = []
    for path in sys.argv[2:]:
      with open(path) as f:
        rows += [json.loads(line) for line in f if line.startswith("{")]
    print(table(rows))
    return
  rows = [row for _, devices, _ in HARDWARE for row in _child(devices)]
  print(json.dumps(rows), file=sys.stderr)
  print(table(rows))


if __name__ == "__main__":
  main()
