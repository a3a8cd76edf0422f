"""`--dry_run` of the modes that load a model: the memory per device of evaluating xxl on a
simulated 32-device mesh, without weights; FSDP and bfloat16 parameters divide it."""

import json

import numpy as np
import pytest

from tests.helpers import run_fixture
from tlm.models import checkpoints, t5

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
  out = tmp_path_factory.mktemp("eval_dry_run") / "out.json"
  run_fixture("eval_dry_runs.py", 32, str(out))
  return json.loads(out.read_text())


def test_xxl_evaluation_memory_per_device(reports):
  f32, bf16 = reports["xxl"]["float32"], reports["xxl"]["bfloat16_fsdp"]
  shapes = checkpoints.param_shapes(t5.get_preset("t5-v1_1-xxl"))
  n = sum(int(np.prod(s)) for s in shapes.values())
  assert f32["parameters"] == bf16["parameters"] == n > 11e9
  assert f32["devices"] == 32 and f32["mesh"] == {"data": 4, "model": 8}
  # Without FSDP the model axis alone splits the big kernels: about 1/8 of 4 bytes each
  # (norm scales and relative position embeddings are tiny).
  assert 0.99 < f32["parameter_bytes_per_device"] / (4 * n / 8) < 1.01
  # FSDP splits over all 32 devices and bfloat16 halves each: 1/8 of that.
  assert 0.99 < bf16["parameter_bytes_per_device"] / (f32["parameter_bytes_per_device"] / 8) < 1.01
  assert f32["memory_per_device"] is None  # lowered only
  assert any(line == "per device: parameters 5.19 GiB" for line in reports["lines"])


def test_eval_dry_run_through_the_cli_compiles(reports):
  tiny = reports["tiny"]
  assert tiny["mesh"] == {"data": 16, "model": 2} and tiny["batch_size"] == 256
  for program in ("decode", "score"):
    memory = tiny["memory_per_device"][program]
    assert memory["temporaries"] > 0 and memory["arguments"] >= tiny["parameter_bytes_per_device"]
  assert any(line.startswith("decode: ") for line in reports["lines"])
