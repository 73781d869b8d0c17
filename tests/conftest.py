"""Fixtures and markers for the unit tests in tests/.

The environment (NUMBA_ENABLE_CUDASIM, MPLBACKEND) is set by the repository's root
conftest.py, which pytest loads before this file and before any test imports numba.
"""

import os

import pytest

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a real device: skip them under the CUDA simulator."""
    if not SIMULATOR:
        return
    skip = pytest.mark.skip(reason="needs a real CUDA device (NUMBA_ENABLE_CUDASIM=1)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
