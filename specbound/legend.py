"""What the symbols in ``specbound certify``'s output mean, one line each (``--explain``,
``--verbose``).  Said in words here once; the formulas are in proofs_notes/theory.md (sections 6, 7
and 12) and ``specbound theorem``."""

from __future__ import annotations

SYMBOLS: tuple[tuple[str, str], ...] = (
    ("numbers", "every certified number is printed as a decimal >= the upper end of its Arb ball "
                "(shares of H are floats, for orientation only)"),
    ("delta", "the confidence parameter: the bound holds with probability >= 1 - delta over S; with both "
              "routes, each is evaluated at delta/2 and the smaller is reported"),
    ("rho~", "the margin of the ramp loss, rounded down onto its grid beta_rho^k; the empirical term is "
             "the ramp loss of the analysis model on S at rho~"),
    ("SS", "single-scale complexity (Rademacher route): the smaller of its closed form (the matrices' "
           "contributions plus a read-out term) and the exact objective at the plan's loss scales"),
    ("DD", "Dudley-integral complexity (Rademacher route); the complexity term is 2 min(SS, DD)"),
    ("Lambda", "log(1/prior) of the grid point chosen after training (the p's, the radii, the margin): "
               "the price of choosing post hoc; confidence term = sqrt((log(1/delta) + Lambda) / (2n)); the "
               "Occam route's Lambda prices its own p's and gamma~"),
    ("gamma~", "the Occam route's margin, rounded down onto its grid beta_gamma^k"),
    ("K^", "a certified upper count of the examples of S with margin y f(x) <= gamma~"),
    ("H", "the Occam route's entropy: log of the number of centres of a cover of the network class "
          "at sup distance gamma~/2, in nats (the matrices' H_j plus the read-out's)"),
    ("C", "H + Lambda + log(1/level): the Occam route's bound is BinInv(n, K^, e^-C), the largest risk q "
          "with P(Binomial(n, q) <= K^) >= e^-C"),
    ("grid m", "each matrix's Schatten index p is chosen from the grid {0, 1/m, 2/m, ..., 2}"),
    ("p", "the matrix's chosen Schatten index (p = 0: its proven rank is used); p (Occam): the Occam "
          "route's own choice"),
    ("proven rank", "a proven upper bound on the matrix's rank"),
    ("contribution", "the matrix's term in the closed form of SS"),
    ("H_j", "the matrix's entropy in H; share of H: H_j / H"),
    ("kinds", "QK = c W_Q W_K^T and V_tilde = W_V W_O per head, M_in / M_out the feed-forward input and "
              "output; Llama-style: Q = c W_Q per head, K = W_K per key/value group, G / U / D gate, up, down"),
)
"""(symbol, meaning) in the order the output uses them."""


def legend_lines() -> list[str]:
    """The legend as printed: a title line, then ``  symbol: meaning`` per symbol."""
    width = max(len(s) for s, _ in SYMBOLS)
    return ["legend (proofs_notes/theory.md; `specbound theorem` prints the formulas):"] + [
        f"  {symbol.ljust(width)}  {meaning}" for symbol, meaning in SYMBOLS]
