"""tlm.miniature.environment: the machine-and-software record of a seed (no jax imported)."""

import importlib.metadata
import os
import subprocess

import pytest

from tlm.miniature import environment

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: another
flags\t\t: fpu
"""


def test_cpu_reads_the_first_processor(tmp_path):
  path = tmp_path / "cpuinfo"
  path.write_text(CPUINFO)
  got = environment.cpu(str(path))
  assert got == {
    "vendor": "AuthenticAMD",
    "model_name": "AMD EPYC",
    "family": "25",
    "model": "17",
    "stepping": "1",
    "flags": ["avx", "avx2", "avx512bw", "avx512f", "fma", "fpu", "sse4_2"],
  }


def test_cpu_without_cpuinfo_records_no_flags(tmp_path):
  assert environment.cpu(str(tmp_path / "missing"))["flags"] is None


@pytest.mark.parametrize(
  "flags, xla_flags, want",
  [
    (["sse4_2", "avx", "avx2", "avx512f"], "", "AVX512"),
    (["sse4_2", "avx", "avx2", "avx512f"], "--xla_cpu_max_isa=AVX2", "AVX2"),
    (["sse4_2", "avx", "avx2", "avx512f"], "--xla_cpu_max_isa=avx", "AVX"),
    # the last flag wins, as XLA parses XLA_FLAGS
    (["sse4_2", "avx", "avx2"], "--xla_cpu_max_isa=SSE4_2 --xla_cpu_max_isa=AVX512", "AVX2"),
    # a cap XLA does not know is ignored (XLA warns and keeps the host's features)
    (["sse4_2", "avx", "avx2", "avx512f"], "--xla_cpu_max_isa=BOGUS", "AVX512"),
    (["sse4_2", "avx"], "", "AVX"),
    (["fpu"], "", None),
    (None, "", None),
  ],
)
def test_xla_cpu_isa_is_the_hosts_newest_tier_under_the_cap(flags, xla_flags, want):
  assert environment.xla_cpu_isa(flags, xla_flags) == want


def test_thread_variables_keep_threads_memory_and_xla_settings_only():
  env = {
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
    "OMP_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",
    "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
    "PJRT_NPROC": "4",
    "TF_CPP_MIN_LOG_LEVEL": "0",
    "JAX_ENABLE_X64": "1",
    "TF_CLI_CONFIG_FILE": "/root/.terraformrc",
    "HOME": "/root",
    "PATH": "/bin",
  }
  assert environment.thread_variables(env) == {
    k: env[k]
    for k in (
      "GLIBC_TUNABLES",
      "JAX_ENABLE_X64",
      "MALLOC_ARENA_MAX",
      "OMP_NUM_THREADS",
      "PJRT_NPROC",
      "TF_CPP_MIN_LOG_LEVEL",
      "XLA_FLAGS",
    )
  }


@pytest.mark.parametrize(
  "env, want",
  [
    ({}, 2),
    ({"PJRT_NPROC": "8"}, 8),
    ({"NPROC": "3"}, 3),
    ({"PJRT_NPROC": "5", "NPROC": "3"}, 5),
    ({"PJRT_NPROC": ""}, 2),  # not a number: XLA falls back to the affinity
    ({"PJRT_NPROC": "x", "NPROC": "1"}, 1),
  ],
)
def test_xla_cpu_threads_follow_xlas_rule(env, want):
  assert environment.xla_cpu_threads(env, affinity=2) == want


def _git(repo, *args):
  subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_git_commit_names_the_commit_and_a_dirty_tree(tmp_path):
  repo = str(tmp_path)
  _git(repo, "init", "-q")
  (tmp_path / "a.txt").write_text("a\n")
  _git(repo, "add", "a.txt")
  _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
  head = subprocess.run(
    ["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
  ).stdout.strip()
  assert environment.git_commit(repo) == head
  (tmp_path / "a.txt").write_text("b\n")
  assert environment.git_commit(repo) == f"{head} dirty"
  assert environment.git_commit(str(tmp_path / "not_a_checkout")) is None


def test_record_names_the_machine_and_the_software():
  env = {"XLA_FLAGS": "--xla_cpu_max_isa=AVX", "PJRT_NPROC": "3", "HOME": "/root"}
  got = environment.record(env, reproduce={"workers": 2, "pin_workers": True})
  assert got["affinity"] == sorted(os.sched_getaffinity(0))
  assert got["cpu_count"] == os.cpu_count()
  assert got["xla_cpu_threads"] == 3
  assert got["environment"] == {"PJRT_NPROC": "3", "XLA_FLAGS": "--xla_cpu_max_isa=AVX"}
  assert got["reproduce"] == {"workers": 2, "pin_workers": True}
  assert got["packages"]["jax"] == importlib.metadata.version("jax")
  assert got["packages"]["numpy"] == importlib.metadata.version("numpy")
  assert set(environment.PACKAGES) <= set(got["packages"])
  assert got["python"].count(".") == 2
  if got["cpu"]["flags"] is not None and "avx" in got["cpu"]["flags"]:
    assert got["xla_cpu_isa"] == "AVX"
