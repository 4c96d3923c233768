"""Shared test set-up: models built once per session in a temporary directory (not the work
tree), and xDSL's process-wide resource-blob table emptied after every test (weights of a
model are hex strings there, never freed otherwise: the suite grew to 9 GB)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(autouse=True)
def _fresh_blobs():
    yield
    from snowir.resources import reset_blobs

    reset_blobs()  # the hex strings go with their last reference (no gc.collect(): seconds per test)
