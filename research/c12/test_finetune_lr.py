"""C12's finetuning-rate lever (research/c12/finetune_lr.py): its workdirs and its criterion."""

from research.c12 import finetune_lr as ft


def test_the_control_is_the_wording_runs_model_and_each_lever_has_its_own_dir():
  assert ft.arm_dir("/w", ft.CONTROL_LR) == "/w/cbqa_ft"
  assert ft.arm_dir("/w", ft.LEVER_LR) == "/w/cbqa_ft_lr=0.003"
  assert ft.arm_dir("/w", ft.PAPER_LR) == "/w/cbqa_ft_lr=0.001"


def test_the_lever_changes_only_the_learning_rate(tmp_path):
  control = ft.arm_config(3, str(tmp_path), ft.CONTROL_LR)
  lever = ft.arm_config(3, str(tmp_path), ft.LEVER_LR)
  assert control.train.learning_rate == 3e-2 and lever.train.learning_rate == 3e-3
  assert lever.train.steps == control.train.steps and lever.data == control.data
  assert lever.model == control.model


def _seed(v1=True, fall=1.2, margin=0.1):
  return {"V1": v1, "P1": fall >= ft.FALL, "P2": margin > 0}


def test_the_criterion():
  assert ft.judge([_seed(), _seed()])["outcome"].startswith("fails for a measured reason")
  assert ft.judge([_seed(), _seed(margin=-0.2)])["outcome"].startswith("the finetuning's rate")
  assert ft.judge([_seed(fall=0.3), _seed()])["outcome"] == "not explained"
  assert ft.judge([_seed(v1=False), _seed()])["outcome"].startswith("void")


def test_the_combined_criterion():
  from research.c12 import combined

  ok = {"V1": True, "P": True}
  assert combined.judge([ok, ok])["outcome"].startswith("fails for a measured reason")
  assert combined.judge([ok, {**ok, "P": False}])["outcome"] == "not explained"
  assert combined.judge([ok, {**ok, "V1": False}])["outcome"].startswith("void")
