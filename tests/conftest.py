"""Shared test hooks."""

import gc

import pytest


@pytest.fixture(autouse=True)
def _unfreeze_gc():
    """A sweep freezes the objects alive at its start (``freeze_startup_objects``); in the
    test process that would keep every earlier test's objects out of collection."""
    yield
    gc.unfreeze()
