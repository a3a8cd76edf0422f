"""FSDP (`mesh.fsdp=true`): on 8 simulated devices, 20 training steps with the parameters and
the optimizer state split over "data" give the losses and the checkpoint of 20 steps without."""

import json
import os

import numpy as np
import pytest

from tests.helpers import run_fixture
from tlm.models.checkpoints import flatten, load_checkpoint

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp("fsdp")
  out = root / "out.json"
  run_fixture("fsdp_train.py", 8, str(root), str(out))
  return root, json.loads(out.read_text())


def _losses(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line)["loss"] for line in f]


def test_fsdp_trains_as_replicated_parameters(runs):
  root, _ = runs
  want, got = _losses(root / "replicated"), _losses(root / "fsdp")
  assert len(want) == 20 and len(set(want)) == 20  # every step changed the model
  # The same sums in another order (the FSDP all-gathers and the sharded Adafactor reductions):
  # equal to float32 rounding at first; training then amplifies the rounding differences
  # (measured: within 2e-6 over the first 10 steps, up to 5e-5 by step 20). A wrong sharding
  # of a parameter or slot shows at the first steps, by far more.
  np.testing.assert_allclose(got[:10], want[:10], rtol=2e-6)
  np.testing.assert_allclose(got, want, rtol=1e-4)
  # The checkpoints, read back as numpy through the converter's loader, hold the same model.
  (cfg_a, params_a), (cfg_b, params_b) = (
    load_checkpoint(str(root / n)) for n in ("replicated", "fsdp")
  )
  assert cfg_a == cfg_b
  a, b = dict(flatten(params_a)), dict(flatten(params_b))
  assert a.keys() == b.keys()
  for k in a:
    # The drift above, after 20 steps. Measured (largest difference over the array's largest
    # magnitude): 1e-8 after one step, 1e-6 after three, 4e-3 after 20 (Adafactor's normalised
    # update turns a rounding-sized gradient difference into an lr-sized one); the guard
    # against a wrong sharding is the loss check of the first steps above.
    np.testing.assert_allclose(b[k], a[k], rtol=0, atol=1e-2 * np.abs(a[k]).max(), err_msg=k)


def test_fsdp_splits_parameters_and_optimizer_state_over_data(runs):
  _, shardings = runs
  # encoder/layers_0/mlp/wi_0/kernel is [embed=64, mlp=128] on mesh data=8 x model=1.
  assert shardings["replicated"]["kernel_spec"] == "(None, 'model')"
  assert shardings["replicated"]["kernel_shard"] == [64, 128]
  assert shardings["fsdp"]["kernel_spec"] == "('data', 'model')"
  assert shardings["fsdp"]["kernel_shard"] == [8, 128]
  # Its Adafactor slot (unfactored at this size) follows the parameter.
  # optax's FactoredState: the slot is the attribute `v` of the chain's first state.
  slots = {k: v for k, v in shardings["fsdp"]["opt_specs"].items() if "name='v')" in k}
  assert list(slots.values()) == ["('data', 'model')"]
