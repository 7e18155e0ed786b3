"""One compiled-theorem class, called by name, over one field list: the generated Arb and numpy
tables and the SymPy fallback (a lemma constant overridden) all behind it, with the same values."""

from __future__ import annotations

import numpy as np
import pytest
from flint import arb

from specbound.certified import generated as arb_table
from specbound.certified.arb import WORK_PREC, precision
from specbound.certified.compiled import CompiledTheorem, compiled_theorem
from specbound.derivation import evaluated
from specbound.numeric import generated as float_table
from specbound.plan import BoundSettings

PROVEN = BoundSettings(n=100)
#: the proven value passed as an override: the SymPy fallback must compile the very same theorem
SAME_BY_OVERRIDE = BoundSettings(n=100, overrides=(("C_sm", 1.0),))


def _inputs(names, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for a in names:
        if a == "p":
            out[a] = float(rng.uniform(0.1, 1.9))
        elif a in ("vartheta", "vartheta_w", "delta", "alpha_D", "u", "u_w"):
            out[a] = float(rng.uniform(0.01, 0.2))
        elif a in ("n", "N", "d", "r_max", "m_grid", "k_c", "k_s", "k_rho", "k_w"):
            out[a] = int(rng.integers(2, 64))
        else:
            out[a] = float(rng.uniform(0.5, 3.0))
    return out


@pytest.mark.parametrize("table", [arb_table, float_table], ids=["arb", "numpy"])
def test_one_class_holds_every_field_of_the_one_list(table):
    ct = compiled_theorem(table, PROVEN, "gelu", "ls")
    assert isinstance(ct, CompiledTheorem) and ct.origin == "generated" and ct.backend == table.BACKEND
    T = evaluated.theorem_of(("centred", "centred", "gelu", "ls"))
    assert set(ct.fields) == set(evaluated.fields(T))
    assert ct.dd_upper == 1 / 4 and ct.rho_R == 1 and ct.layout["shared"] == "K"


@pytest.mark.parametrize("table", [arb_table, float_table], ids=["arb", "numpy"])
def test_fields_are_called_by_name_and_say_what_is_missing(table):
    ct = compiled_theorem(table, PROVEN, "gelu")
    with precision(WORK_PREC):
        a = ct("kappa", B_w=2, alpha=1.5, gamma=0.5, rho=0.25, unused=123)
        b = ct("kappa", rho=0.25, gamma=0.5, alpha=1.5, B_w=2)
    assert float(a) == float(b) == 6.0
    with pytest.raises(TypeError, match="kappa needs"):
        ct("kappa", B_w=2)
    with pytest.raises(KeyError, match="no field"):
        ct("no_such_field")


@pytest.mark.parametrize("table", [arb_table, float_table], ids=["arb", "numpy"])
def test_the_sympy_fallback_is_the_same_theorem_behind_the_same_class(table):
    gen = compiled_theorem(table, PROVEN, "gelu")
    fallback = compiled_theorem(table, SAME_BY_OVERRIDE, "gelu")
    assert fallback.origin == "sympy" and gen.origin == "generated"
    assert set(fallback.fields) == set(gen.fields) and fallback.dd_upper == gen.dd_upper
    for seed, name in enumerate(sorted(gen.fields)):
        assert fallback.args[name] == gen.args[name], name
        vals = _inputs(gen.args[name], seed)
        with precision(WORK_PREC):
            x, y = gen(name, **vals), fallback(name, **vals)
        if table is arb_table:
            assert isinstance(x, arb) and x.overlaps(y), (name, x, y)
        elif np.isfinite(x):
            assert float(y) == pytest.approx(float(x), rel=1e-12), name
