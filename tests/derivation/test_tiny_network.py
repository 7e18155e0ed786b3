"""End to end on a tiny network (L = H = 1, N = 2, d_ff = 2): the single-scale closed form, its
read-out term and the confidence term evaluated through the summand + combiner interface in Arb,
each against a hand computation in mpmath typed from proofs_notes/theory.md sections 2, 6, 7 and
10 (the whole assembled bound is pinned in tests/certified/test_hand_bound.py)."""

import mpmath
from flint import arb, ctx, fmpq

from specbound.derivation import assemble
from specbound.derivation.backends import compile_expr

# radii (already on the grid), margin, read-out radius, sample size; every p_j = 1, s_j = 1
RADII = {"A": fmpq(1, 2), "V": fmpq(1), "M_in": fmpq(2), "M_out": fmpq(1)}
B_W, RHO, N_SAMPLES, WIDTH, D_J = fmpq(1), fmpq(1, 2), 1000, 2, 4


def _hand_value():
    mp = mpmath.mp
    Lphi = (1 + mpmath.erf(1)) / 2 + mpmath.exp(-1) / mpmath.sqrt(mp.pi)
    cA, cV, cin, cout = (mpmath.mpf(int(x.p)) / int(x.q) for x in RADII.values())
    gam = {"A": 1 * Lphi * cV * cin * cout, "V": Lphi * cin * cout, "M_in": Lphi * cout, "M_out": cin}
    n, rho = mpmath.mpf(N_SAMPLES), mpmath.mpf(1) / 2
    C1 = (1 + 2) * mpmath.mpf(1 / 2) ** (mpmath.mpf(2) / 3)
    total = 0
    readout = mpmath.sqrt(WIDTH * mpmath.log(1 + 2 * n * 1 / rho) / (2 * n)) + 1 / n
    for key in ("A", "V", "M_in", "M_out"):
        kappa = 1 * 1 * gam[key] / rho  # B_w alpha gamma / rho, alpha = 1 (last layer)
        c = {"A": cA, "V": cV, "M_in": cin, "M_out": cout}[key]
        a = 1 * (2 * kappa) * D_J * mpmath.log(1 + 8 * n * c * kappa)
        total += C1 * (a / (2 * n)) ** (mpmath.mpf(1) / 3) + 1 / n
    total += readout
    return total, readout


def _hand_confidence(Lam, delta):
    """sqrt((log(1/delta) + Lambda) / (2n)): one McDiarmid step (sharpenings.md S3, posthoc_union.md)."""
    return mpmath.sqrt((mpmath.log(1 / delta) + Lam) / (2 * mpmath.mpf(N_SAMPLES)))


def _agrees(ball, ref) -> bool:
    """The ball meets [ref - 1e-40, ref + 1e-40] (the 50-digit reference's own error) and is narrow."""
    return abs(ball - arb(mpmath.nstr(ref, 50))).lower() < 1e-40 and ball.rad() < 1e-12


def test_single_scale_closed_form_on_a_tiny_network():
    th = assemble()
    gamma_fns = {k: compile_expr(th.gamma[k], "arb") for k in RADII}
    kappa_fn = compile_expr(th.kappa, "arb")
    term_fn = compile_expr(th.ss_matrix_term, "arb")
    read_fn = compile_expr(th.ss_readout_term, "arb")
    combine = compile_expr(th.ss_closed, "arb")
    radius_of = {"c_A": RADII["A"], "c_V": RADII["V"], "c_in": RADII["M_in"], "c_out": RADII["M_out"]}
    T = arb(0)
    for key in ("A", "V", "M_in", "M_out"):
        g = gamma_fns[key](*(radius_of[a.name] for a in gamma_fns[key].args))
        kap = kappa_fn(*({"B_w": B_W, "alpha": 1, "gamma": g, "rho": RHO}[a.name] for a in kappa_fn.args))
        vals = {"c": RADII[key], "d": D_J, "kappa": kap, "n": N_SAMPLES, "p": 1, "s": 1}
        T += term_fn(*(vals[a.name] for a in term_fn.args))
    vals = {"B_w": B_W, "N": WIDTH, "n": N_SAMPLES, "rho": RHO}
    readout = read_fn(*(vals[a.name] for a in read_fn.args))
    vals.update(T_sum=T)
    ours = combine(*(vals[a.name] for a in combine.args))
    assert ours.rad() < 1e-12
    mpmath.mp.dps = 50
    try:
        ref, ref_readout = _hand_value()
        ref_conf = _hand_confidence(mpmath.mpf(29) / 4, mpmath.mpf(1) / 20)
    finally:
        mpmath.mp.dps = 15
    old = ctx.prec
    ctx.prec = 240
    try:
        assert ours.contains(arb(mpmath.nstr(ref, 60))), (ours, ref)
        assert _agrees(readout, ref_readout), (readout, ref_readout)
        conf_fn = compile_expr(th.confidence, "arb")
        vals = {"Lambda": fmpq(29, 4), "delta": fmpq(1, 20), "n": N_SAMPLES}
        conf = conf_fn(*(vals[a.name] for a in conf_fn.args))
        assert _agrees(conf, ref_conf), (conf, ref_conf)
    finally:
        ctx.prec = old
