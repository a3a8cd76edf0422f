"""The studies' tests run as the library's do: one XLA compilation cache for the run and each
test file on one xdist worker (the hooks of tests/conftest.py)."""

from tests.conftest import pytest_collection_modifyitems, pytest_configure  # noqa: F401
