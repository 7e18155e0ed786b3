"""specbound: certified spectrum-adaptive post hoc generalization bounds for trained Transformers.

Layers (installed as subpackages of this one import name):

- ``specbound.derivation`` -- SymPy: every lemma, its constant and covering term; the theorem.
- ``specbound.certified``  -- python-flint (Arb) balls that provably contain the true values.
- ``specbound.numeric``    -- fast torch path (CPU/CUDA), cross-checked against ``certified``.

The Python API (:mod:`specbound.api`, the path of every command): ``specbound.certify`` (a
:class:`Certification` with its :class:`Verdict`), ``specbound.verify``, ``specbound.spectra``,
``specbound.proxies``, ``specbound.inspect`` and ``specbound.load_weights`` accept a path, a cached
repo id, a state dict, a ``torch.nn.Module`` or a ``transformers`` model; ``specbound.theorem``
assembles the theorem; ``specbound.plan_n`` estimates the sample size a target bound needs and
``specbound.monitor.BoundMonitor`` logs float estimates while a model trains (estimates, not bounds);
``specbound.DataSet`` is a labelled sample for ``certify(data=...)`` (which
also takes a ``.npz`` path or a mapping ``{"labels": ..., "tokens" or "inputs": ...}``).  They are
loaded on first use, so
``import specbound`` stays light (it imports neither torch nor the numeric layers).
"""

from __future__ import annotations

from typing import Any

from .version import __version__

_API = frozenset(
    {"certify", "verify", "spectra", "proxies", "load_weights", "inspect", "theorem", "plan_n", "Certification",
     "SpectraResult", "ProxiesResult"}
)
_MODULES = frozenset({"monitor"})
_VERDICT = frozenset({"Verdict"})
_DATA = frozenset({"DataSet"})
_ERRORS = frozenset({"SpecboundError", "CheckpointError", "LayoutError", "NonFiniteError"})

__all__ = sorted(_API | _ERRORS | _VERDICT | _DATA | _MODULES | {"__version__"})


def __getattr__(name: str) -> Any:
    # PEP 562 lazy attributes: the API module imports numpy and the loaders only when first used.
    if name in _API:
        from . import api

        return getattr(api, name)
    if name in _ERRORS:
        from . import errors

        return getattr(errors, name)
    if name in _VERDICT:
        from . import verdict

        return getattr(verdict, name)
    if name in _DATA:
        from . import dataset

        return getattr(dataset, name)
    if name in _MODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'specbound' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API | _ERRORS | _VERDICT | _DATA | _MODULES)
