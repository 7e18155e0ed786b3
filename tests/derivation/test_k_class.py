"""The k-class theorem as assembled from the lemma ``k_class`` (proofs_notes/k_class.md): exactly the fields
the note changes differ from the binary theorem, each by the note's substitution; k = 1 is the binary theorem."""

from __future__ import annotations

import sympy as sp

from specbound.derivation import evaluated, symbols as S
from specbound.derivation.routes import assemble_occam
from specbound.derivation.theorem import REGISTRY, assemble

#: the fields the note changes (c), (d); every other field of the one list is the binary one
CHANGED = {"kappa", "ss_closed", "ss_readout_entropy", "dd_readout_piece", "dd_closed", "occam_Omega_total",
           "occam_share_readout", "occam_entropy_readout", "occam_H_total"}


def test_exactly_the_fields_the_note_changes_have_k_class_twins_in_every_variant():
    for key in evaluated.variant_keys()[::16]:
        twins = evaluated.kclass_twins(evaluated.theorem_of(key), evaluated.theorem_of(key, "k"))
        assert {name[len(evaluated.KCLASS_PREFIX):] for name in twins} == CHANGED, key


def test_each_changed_field_is_the_binary_one_at_rho_over_two_with_k_n_read_out_dimensions():
    T, Tk = assemble(), assemble(classes="k")
    half = {S.rho: S.rho / 2}
    assert sp.simplify(Tk.kappa - T.kappa.xreplace(half)) == 0
    for name in ("ss_readout_entropy", "dd_readout_piece"):
        binary = getattr(T, name).xreplace(half)
        k_class = getattr(Tk, name)
        # the read-out entropy is k times the binary one at the same scale (k N dimensions)
        ratio = sp.simplify((k_class / binary) ** (2 if name == "dd_readout_piece" else 1))
        assert ratio == S.k_cls, name
    O, Ok = assemble_occam(), assemble_occam(classes="k")
    assert Ok.weight_readout == S.k_cls * O.weight_readout
    assert sp.simplify(Ok.eps_readout - O.eps_readout / 2) == 0  # the output cover at gamma/4
    assert sp.simplify(Ok.kappa - 2 * O.kappa) == 0  # eps_j = vartheta/(2 kappa) with kappa doubled


def test_the_lemma_states_the_note_s_constants():
    kc = REGISTRY["k_class"].constants
    assert kc["margin_lipschitz"] == 2 and kc["ramp_lipschitz"] == 2 / S.rho
    assert kc["cover_radius"] == S.gamma_m / 4 and kc["weight_readout"] == S.k_cls * S.N
    assert "k_class" in assemble(classes="k").lemmas and "k_class" not in assemble().lemmas
    assert "k_class" in assemble_occam(classes="k").lemmas


def test_the_binary_theorem_is_unchanged_by_the_k_class_variant():
    T = assemble()
    assert "classes" not in T.variants and not any(e.has(S.k_cls) for _, e in T.items() if isinstance(e, sp.Basic))
