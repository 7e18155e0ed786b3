"""Lemmas for modern blocks: fixed masks and score biases, rotary embeddings, shared (grouped-query)
heads, gated feed-forward blocks, the SiLU constants, and the Llama-style analysis model (LS) built
from them (proofs_notes/theory.md section 11, register entries 24-30).

The constants are SymPy expressions over the spectral radii of one layer (``c_Q, c_K, c_V`` for a
head, ``c_G, c_U, c_D`` for the gated block), the rotation-table bound ``rho_R`` and the lemma
constants ``C_sm, L_phi, B_phi`` (symbols; the values in force are set by ``assemble``).
"""

from __future__ import annotations

import sympy as sp

from .lemma import Lemma
from .lipschitz import attn_v_lipschitz, softmax_linf_l1
from .symbols import (
    B_phi, C_sm, H, L, L_phi, N, c_D, c_G, c_K, c_Q, c_U, c_V, d_ff, d_h, group_sum, head_sum, n_kv,
    rho_R,
)

_t = sp.Symbol("t", real=True)
_osc = sp.Symbol("osc_M", nonnegative=True)  # osc over M of (z - z')
_dz = sp.Symbol("Delta_inf", nonnegative=True)
_dsm = sp.Symbol("Delta_sm", nonnegative=True)
_dX = sp.Symbol("Delta_X", nonnegative=True)
_dW = sp.Symbol("Delta_W", nonnegative=True)
_dout = sp.Symbol("Delta_out", nonnegative=True)
_z, _zp, _b = sp.symbols("z_ts z'_ts b_ts", real=True)

masked_softmax = Lemma(
    name="masked_softmax",
    assumptions=("M a nonempty index set fixed independently of the weights (causal, padding, window)",
                 "sigma_M = softmax on M, 0 off M", "softmax_linf_l1 on the subvector indexed by M",
                 "read-out at a token index tau(T) chosen independently of the weights"),
    statement=sp.And(sp.Le(_dsm, _osc / 2), sp.Le(_osc / 2, C_sm * _dz)),
    constants={"C_sm": softmax_linf_l1.constants["C_sm"]},
)

score_bias = Lemma(
    name="score_bias",
    assumptions=("b_ts fixed independently of the weights (ALiBi, a -inf mask); a trained bias is not covered",),
    statement=sp.Eq((_z + _b) - (_zp + _b), _z - _zp),
    constants={},
)

#: head-level constants with rotations R_ts of norm <= rho_R between Q and K^T
ROPE_HEAD_INPUT = c_V * (1 + 2 * C_sm * rho_R * c_Q * c_K)
rope_attention = Lemma(
    name="rope_attention",
    assumptions=("scores z_ts = x_t Q R_ts K^T x_s^T, R_ts fixed independently of the weights",
                 "||R_ts|| <= rho_R for all t, s (exact rotations: 1; binary64 tables: Arb bound)",
                 "X, X' in X_T", "masked_softmax"),
    statement=sp.Le(_dout, ROPE_HEAD_INPUT * _dX),
    constants={
        "head_summand": ROPE_HEAD_INPUT,  # (a)
        "Q": C_sm * rho_R * c_V * c_K,  # (b)
        "K": C_sm * rho_R * c_V * c_Q,  # (c)
        "V": attn_v_lipschitz.constants["gamma_head_V"],  # (d)
        "rho_R_exact": sp.Integer(1),
    },
)

_h, _G = sp.symbols("h n_group", positive=True, integer=True)
_gamma_h = sp.IndexedBase("gamma")
shared_matrix_sensitivity = Lemma(
    name="shared_matrix_sensitivity",
    assumptions=("W enters the heads h = 1..n_group of one layer; Att is the sum of its heads",
                 "head h moves by at most gamma_h ||W - W'|| when only W changes"),
    statement=sp.Le(_dout, sp.Sum(_gamma_h[_h], (_h, 1, _G)) * _dW),
    constants={
        "gamma_shared": sp.Sum(_gamma_h[_h], (_h, 1, _G)),
        # the shared key matrix of a group: sum over its heads of rope_attention (c)
        "K_group": C_sm * rho_R * group_sum,
    },
)

GATED_INPUT = (B_phi + L_phi) * c_G * c_U * c_D
gated_ff = Lemma(
    name="gated_ff",
    assumptions=("F(Y) = (phi(Y G) * (Y U)) D entrywise product", "Y, Y' in X_T",
                 "phi entrywise, L_phi-Lipschitz, |phi(t)| <= B_phi |t| (so |phi(a)| <= B_phi ||G|| for ||y|| <= 1)"),
    statement=sp.Le(_dout, GATED_INPUT * _dX),
    constants={
        "input": GATED_INPUT,  # (a)
        "G": L_phi * c_U * c_D,  # (b)
        "U": B_phi * c_G * c_D,  # (c)
        "D": B_phi * c_G * c_U,  # (d)
    },
)

_sig = 1 / (1 + sp.exp(-_t))
SILU = _t * _sig
_s = sp.Symbol("s_t", positive=True)
#: proven upper bound of sup |SiLU'| = SiLU'(t*) = 1.0998393201288669169...(Arb enclosure in
#: proofs_notes/silu_constants.md); the smallest 17-digit decimal above the enclosure.
L_PHI_SILU = sp.Rational(109983932012886692, 10**17)
silu_constants = Lemma(
    name="silu_constants",
    assumptions=("phi(t) = t s(t), s(t) = 1/(1 + e^-t) (SiLU / swish)",),
    statement=sp.Eq(sp.diff(SILU, _t, 2), (_s * (1 - _s) * (2 + _t * (1 - 2 * _s))).subs(_s, _sig),
                    evaluate=False),
    constants={"L_phi": L_PHI_SILU, "B_phi": sp.Integer(1)},
)
silu_activation_constants = dict(silu_constants.constants)

# -- the Llama-style analysis model ---------------------------------------------------------------
_gff = gated_ff.constants["input"]
_rope = rope_attention.constants
LS_MATRIX_KINDS = ("Q", "K", "Vt", "G", "U", "D")
ls_model = Lemma(
    name="ls_model",
    assumptions=("per layer Y = Pi(Att(X)), X' = Pi(F(Y)): Att with RoPE (rope_attention), grouped "
                 "keys (shared_matrix_sensitivity) and a fixed mask (masked_softmax), F gated (gated_ff)",
                 "covered per layer: Q_h (H), K_g (n_kv), V~_h = W_V^(g) W_O^(h) (H), G, U, D",
                 "read-out at the last token; masks never depend on weights or hidden states",
                 "Sigma_h = sum_h head_summand, Sigma_g = sum_{h in g} ||V~_h|| ||Q_h||"),
    statement=None,
    constants={
        "gff": _gff,
        "head_summand": _rope["head_summand"],
        "layer": _gff * head_sum,
        "Q": _rope["Q"] * _gff,
        "K": shared_matrix_sensitivity.constants["K_group"] * _gff,
        "Vt": _rope["V"] * _gff,
        "G": gated_ff.constants["G"],
        "U": gated_ff.constants["U"],
        "D": gated_ff.constants["D"],
        # residual variant (R) with these blocks
        "layer_R": (1 + head_sum) * (1 + _gff),
        "Q_R": _rope["Q"] * (1 + _gff),
        "K_R": shared_matrix_sensitivity.constants["K_group"] * (1 + _gff),
        "Vt_R": _rope["V"] * (1 + _gff),
        # shapes d_j = m_j + n_j, structural rank caps, matrices per model
        "d_Q": N + d_h, "rmax_Q": d_h, "d_K": N + d_h, "rmax_K": d_h,
        "d_Vt": 2 * N, "rmax_Vt": d_h,
        "d_G": N + d_ff, "rmax_G": sp.Min(N, d_ff), "d_U": N + d_ff, "rmax_U": sp.Min(N, d_ff),
        "d_D": N + d_ff, "rmax_D": sp.Min(N, d_ff),
        "J": L * (2 * H + n_kv + 3),
        "beta_c": 1 + 1 / (24 * L),  # sharpenings S2: beta_c^(6L) <= e^(1/4)
    },
)

LEMMAS = (masked_softmax, score_bias, rope_attention, shared_matrix_sensitivity, gated_ff,
          silu_constants, ls_model)
