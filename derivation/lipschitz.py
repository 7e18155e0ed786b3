"""Lipschitz lemmas of the analysis model (proofs_notes/theory.md section 2).

All maps act on the unit-row ball X_T; output distances are in the (2, inf) norm.  The constants
are SymPy expressions over the spectral radii ``c_A, c_V, c_in, c_out`` of one layer and the lemma
constants ``C_sm, L_phi, B_phi`` (symbols; their values in force are set by :func:`assemble`).
"""

from __future__ import annotations

import sympy as sp

from .lemma import Lemma
from .symbols import B_phi, C_sm, L_phi, R_row, alpha, c_A, c_in, c_out, c_V, head_sum, layer_L

_t = sp.Symbol("t", real=True)
_osc = sp.Symbol("osc", nonnegative=True)  # osc(z - z')
_dz = sp.Symbol("Delta_inf", nonnegative=True)  # ||z - z'||_inf
_dsm = sp.Symbol("Delta_sm", nonnegative=True)  # ||sigma(z) - sigma(z')||_1
_dX = sp.Symbol("Delta_X", nonnegative=True)  # ||X - X'||_{2,inf}
_dW = sp.Symbol("Delta_W", nonnegative=True)  # ||W - W'|| (operator norm)
_dout = sp.Symbol("Delta_out", nonnegative=True)  # output distance

#: the default (proved) softmax constant; 2 is the safe alternative of the literature.
C_SM_PROVED = sp.Integer(1)
C_SM_SAFE = sp.Integer(2)

#: Standard normal cdf and density, for GELU phi(t) = t Phi(t).
_Phi = (1 + sp.erf(_t / sp.sqrt(2))) / 2
_pdf = sp.exp(-_t**2 / 2) / sp.sqrt(2 * sp.pi)
GELU = _t * _Phi
#: sup |phi'| = phi'(sqrt 2) = Phi(sqrt 2) + sqrt 2 phi(sqrt 2) = (1 + erf 1)/2 + e^{-1}/sqrt(pi).
L_PHI_GELU = (1 + sp.erf(1)) / 2 + sp.exp(-1) / sp.sqrt(sp.pi)

softmax_linf_l1 = Lemma(
    name="softmax_linf_l1",
    assumptions=("z, z' in R^T for any T >= 1",),
    statement=sp.And(sp.Le(_dsm, _osc / 2), sp.Le(_osc / 2, C_sm * _dz)),
    constants={"C_sm": C_SM_PROVED},
    source="ours (Popoviciu on the softmax Jacobian); Edelman et al. 2022 use 2",
)

proj_unit_ball = Lemma(
    name="proj_unit_ball",
    assumptions=("Pi is the metric projection onto the closed unit l2 ball, applied row by row",),
    statement=sp.Le(_dout, _dX),
    constants={"Lip_Pi": sp.Integer(1)},
)

HEAD_INPUT_SUMMAND = c_V * (1 + 2 * C_sm * c_A)
attn_input_lipschitz = Lemma(
    name="attn_input_lipschitz",
    assumptions=("X, X' in X_T", "softmax_linf_l1"),
    statement=sp.Le(_dout, head_sum * _dX),
    constants={"head_summand": HEAD_INPUT_SUMMAND},
)

attn_qk_lipschitz = Lemma(
    name="attn_qk_lipschitz",
    assumptions=("X in X_T fixed", "softmax_linf_l1"),
    statement=sp.Le(_dout, C_sm * c_V * _dW),
    constants={"gamma_head_A": C_sm * c_V},
)

attn_v_lipschitz = Lemma(
    name="attn_v_lipschitz",
    assumptions=("X in X_T fixed",),
    statement=sp.Le(_dout, _dW),
    constants={"gamma_head_V": sp.Integer(1)},
)

ff_lipschitz = Lemma(
    name="ff_lipschitz",
    assumptions=("Y, Y' in X_T", "phi entrywise, L_phi-Lipschitz, |phi(t)| <= B_phi |t|"),
    statement=None,  # three inequalities; their constants are below
    constants={
        "input": L_phi * c_in * c_out,  # (a)
        "M_in": L_phi * c_out,  # (b)
        "M_out": B_phi * c_in,  # (c)
    },
)

gelu_constants = Lemma(
    name="gelu_constants",
    assumptions=("phi(t) = t Phi(t) (exact erf GELU)",),
    statement=sp.Eq(sp.diff(GELU, _t, 2), _pdf * (2 - _t**2), evaluate=False),
    constants={"L_phi": L_PHI_GELU, "B_phi": sp.Integer(1)},
)

relu_constants = {"L_phi": sp.Integer(1), "B_phi": sp.Integer(1)}
#: tanh-approximate GELU: L_phi has no closed form; 113/100 is the proven upper bound of
#: proofs_notes/gelu_constants.md (step 6, an Arb enclosure of |phi'| plus a tail bound).
gelu_tanh_constants = {"L_phi": sp.Rational(113, 100), "B_phi": sp.Integer(1)}

layer_lipschitz = Lemma(
    name="layer_lipschitz",
    assumptions=("attn_input_lipschitz", "ff_lipschitz (a)", "proj_unit_ball"),
    statement=None,
    constants={
        "head_summand": HEAD_INPUT_SUMMAND,  # summed over heads -> Sigma_h
        "layer": ff_lipschitz.constants["input"] * head_sum,  # L_l
        # alpha_{l-1} = L_l alpha_l with alpha_L = 1, i.e. alpha_l = prod_{k>l} L_k
        "alpha_step": layer_L * alpha,
    },
)

sensitivity_gamma = Lemma(
    name="sensitivity_gamma",
    assumptions=("attn_qk_lipschitz", "attn_v_lipschitz", "ff_lipschitz", "proj_unit_ball"),
    statement=None,
    constants={
        # changing only W_j moves X^(l) by gamma_j ||W_j - W_j'||: the head-level constant times the
        # input-Lipschitz constant of what follows inside the layer (the FF block, then Pi).
        "A": attn_qk_lipschitz.constants["gamma_head_A"] * ff_lipschitz.constants["input"],
        "V": attn_v_lipschitz.constants["gamma_head_V"] * ff_lipschitz.constants["input"],
        "M_in": ff_lipschitz.constants["M_in"],
        "M_out": ff_lipschitz.constants["M_out"],
        "w": sp.Integer(1),
    },
)

_ff_R = 1 + L_phi * c_in * c_out
residual_variant = Lemma(
    name="residual_variant",
    assumptions=("residual layers with Pi: Y = Pi(X + Att(X)), X' = Pi(Y + phi(Y M_in) M_out)",),
    statement=None,
    constants={
        "layer": (1 + head_sum) * _ff_R,
        "A": C_sm * c_V * _ff_R,
        "V": _ff_R,
        "M_in": L_phi * c_out,
        "M_out": B_phi * c_in,
        # without Pi, with row radius R of the block's input:
        "noproj_head_input": c_V * (1 + 2 * C_sm * R_row**2 * c_A),
        "noproj_A": C_sm * R_row**3 * c_V,
        "noproj_V": R_row,
    },
)

LEMMAS = (
    softmax_linf_l1, proj_unit_ball, attn_input_lipschitz, attn_qk_lipschitz, attn_v_lipschitz,
    ff_lipschitz, gelu_constants, layer_lipschitz, sensitivity_gamma, residual_variant,
)
