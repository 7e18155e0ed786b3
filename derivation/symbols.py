"""The named SymPy symbols of the theorem (proofs_notes/theory.md (conventions)).

Every symbol that stands for a quantity that is positive in the theorem is declared
``positive=True``; that is what lets SymPy decide signs in the symbolic checks (derivative signs,
monotonicity of the ceilings).  Symbols that may be zero (a rank bound, an integer grid index) are
declared with the weakest true assumption.

Per-matrix symbols are *generic*: one expression over ``s, c, p, r_max, d, kappa, ...`` serves every
matrix j; a backend evaluates it once per matrix (vectorised in torch, one ball per matrix in Arb).
"""

from __future__ import annotations

import sympy as sp

# -- lemma constants (overridable through assemble(overrides)) ------------------------------------
C_sm = sp.Symbol("C_sm", positive=True)  #: softmax l_inf -> l_1 constant (proved: 1; safe: 2)
L_phi = sp.Symbol("L_phi", positive=True)  #: Lipschitz constant of the activation
B_phi = sp.Symbol("B_phi", positive=True)  #: |phi(t)| <= B_phi |t|

# -- spectral radii of one layer (for the Lipschitz lemmas) ---------------------------------------
c_A = sp.Symbol("c_A", positive=True)  #: ||A_lh|| (or its radius c~)
c_V = sp.Symbol("c_V", positive=True)  #: ||V_lh||
c_in = sp.Symbol("c_in", positive=True)  #: ||M_in^l||
c_out = sp.Symbol("c_out", positive=True)  #: ||M_out^l||
head_sum = sp.Symbol("Sigma_h", positive=True)  #: sum over heads of the head summand
layer_L = sp.Symbol("mathcal_L", positive=True)  #: a layer Lipschitz constant
R_row = sp.Symbol("R", positive=True)  #: row radius (residual variant without projection)

# -- generic per-matrix symbols -------------------------------------------------------------------
s = sp.Symbol("s", nonnegative=True)  #: Schatten radius s~_j (p>0) or proven rank bound (p=0); may be 0
c = sp.Symbol("c", positive=True)  #: spectral radius c~_j
p = sp.Symbol("p", positive=True)  #: Schatten index p_j in (0, 2]  (p = 0 uses the rank forms)
r_max = sp.Symbol("r_max", integer=True, nonnegative=True)  #: structural rank cap
d = sp.Symbol("d", positive=True, integer=True)  #: m_j + n_j for an m_j x n_j matrix
m_rows = sp.Symbol("m", positive=True, integer=True)
n_cols = sp.Symbol("n_c", positive=True, integer=True)
r = sp.Symbol("r", integer=True, nonnegative=True)  #: a truncation rank
eps = sp.Symbol("epsilon", positive=True)  #: covering radius (operator norm)
tau = sp.Symbol("tau", positive=True)  #: split point of the Schatten cover
u = sp.Symbol("u", positive=True)  #: loss scale of one matrix (single scale) / integration variable
alpha = sp.Symbol("alpha", positive=True)  #: layer amplification alpha_l (product of later layers)
gamma = sp.Symbol("gamma", positive=True)  #: sensitivity gamma_j
kappa = sp.Symbol("kappa", positive=True)  #: kappa_j = B_w alpha gamma / rho
vartheta = sp.Symbol("vartheta", positive=True)  #: Dudley weight of the matrix (> 0)
sigma_next = sp.Symbol("sigma_r1", nonnegative=True)  #: sigma_{r+1}(W)
S_p = sp.Symbol("S_p", positive=True)  #: Schatten power S_p(W)
k = sp.Symbol("k", integer=True)  #: an integer grid index
k_c = sp.Symbol("k_c", integer=True)  #: grid index of c~_j
k_s = sp.Symbol("k_s", integer=True)  #: grid index of s~_j (p>0)
k_w = sp.Symbol("k_w", integer=True)
k_rho = sp.Symbol("k_rho", integer=True)
beta = sp.Symbol("beta", positive=True)  #: a grid base > 1
x = sp.Symbol("x", positive=True)  #: a measured positive quantity to be rounded onto a grid

# -- global symbols -------------------------------------------------------------------------------
n = sp.Symbol("n", positive=True, integer=True)  #: sample size
N = sp.Symbol("N", positive=True, integer=True)  #: width
L = sp.Symbol("L", positive=True, integer=True)  #: depth
H = sp.Symbol("H", positive=True, integer=True)  #: heads per layer
J = sp.Symbol("J", positive=True, integer=True)  #: number of covered matrices, L(2H+2)
B_w = sp.Symbol("B_w", positive=True)  #: read-out radius B~_w
rho = sp.Symbol("rho", positive=True)  #: margin rho~
delta = sp.Symbol("delta", positive=True)  #: confidence parameter
u_w = sp.Symbol("u_w", positive=True)  #: loss scale of the read-out
vartheta_w = sp.Symbol("vartheta_w", positive=True)  #: Dudley weight of the read-out
alpha_D = sp.Symbol("alpha_D", positive=True)  #: Dudley lower limit, in (0, 1/4]
m_grid = sp.Symbol("m_grid", positive=True, integer=True)  #: grid resolution m of P_m
card = sp.Symbol("N_cover", positive=True)  #: a covering number
kappa_sum = sp.Symbol("kappa_sum", positive=True)

# -- aggregate placeholders (the "combiner" side of summand + combiner) ---------------------------
U_total = sp.Symbol("U_total", positive=True)  #: sum_j u_j + u_w
H_total = sp.Symbol("H_total", nonnegative=True)  #: sum_j H_j(u_j/kappa_j) + H_w(rho u_w)
T_sum = sp.Symbol("T_sum", positive=True)  #: sum_j (closed-form single-scale matrix term)
D_sum = sp.Symbol("D_sum", nonnegative=True)  #: sum_j (Dudley closed-form matrix piece)
Lambda_sum = sp.Symbol("Lambda_sum", nonnegative=True)  #: sum_j (per-matrix part of Lambda)
Lambda = sp.Symbol("Lambda", nonnegative=True)  #: Lambda(theta) = log 1/pi(theta)
SS = sp.Symbol("SS", positive=True)  #: single-scale complexity
DD = sp.Symbol("DD", positive=True)  #: Dudley complexity
emp = sp.Symbol("hat_E", nonnegative=True)  #: empirical ramp loss (1/n) sum l_rho(y f)
R_hat = sp.Symbol("hat_R", nonnegative=True)  #: empirical Rademacher complexity
T4_sum = sp.Symbol("T4_sum", positive=True)  #: sum_j (explicit-corollary matrix term)

# -- modern blocks (masks, RoPE, grouped-query heads, gated feed-forward; proofs_notes/theory.md
#    section 11) -------------------------------------------------------------------------------
c_Q = sp.Symbol("c_Q", positive=True)  #: ||Q_h|| = ||tau W_Q^(h)|| (N x d_h)
c_K = sp.Symbol("c_K", positive=True)  #: ||K_g|| = ||W_K^(g)|| (N x d_h), shared by the heads of group g
c_G = sp.Symbol("c_G", positive=True)  #: ||G|| (gate, N x d_ff)
c_U = sp.Symbol("c_U", positive=True)  #: ||U|| (up, N x d_ff)
c_D = sp.Symbol("c_D", positive=True)  #: ||D|| (down, d_ff x N)
rho_R = sp.Symbol("rho_R", positive=True)  #: max_{t,s} ||R_ts|| of the rotation tables (exact: 1)
group_sum = sp.Symbol("Sigma_g", positive=True)  #: sum over the heads h of group g of ||V~_h|| ||Q_h||
d_h = sp.Symbol("d_h", positive=True, integer=True)  #: head dimension
d_ff = sp.Symbol("d_ff", positive=True, integer=True)  #: gated feed-forward width
n_kv = sp.Symbol("n_kv", positive=True, integer=True)  #: key/value groups per layer

# -- the Occam route (proofs_notes/occam_route.md, binomial_inversion.md) ---------------------------
gamma_m = sp.Symbol("gamma_m", positive=True)  #: the Occam route's margin gamma = beta_gamma^k_gamma
k_gamma = sp.Symbol("k_gamma", integer=True)  #: grid index of the margin gamma (the coordinate of k_rho)
K_hat = sp.Symbol("hat_K", integer=True, nonnegative=True)  #: certified upper margin count K^ >= #{i: y_i f(X_i) <= gamma}
C_mass = sp.Symbol("C", nonnegative=True)  #: confidence mass C = log(1/d) = H + Lambda + lambda(k) + log(1/delta)
H_theta = sp.Symbol("H_theta", nonnegative=True)  #: H_theta(gamma): log of the number of centres
H_sum = sp.Symbol("H_sum", nonnegative=True)  #: sum_j H_j(eps_j) at the Occam scales
omega = sp.Symbol("omega", nonnegative=True)  #: allocation weight of a matrix (r_j d_j)
Omega = sp.Symbol("Omega", positive=True)  #: total allocation weight sum_j omega_j + omega_w
Omega_sum = sp.Symbol("Omega_sum", nonnegative=True)  #: sum_j omega_j
P_err = sp.Symbol("P_err", nonnegative=True)  #: the risk P(y f(X) <= 0)

# -- k-class margins (proofs_notes/k_class.md) ------------------------------------------------------
k_cls = sp.Symbol("k_cls", positive=True, integer=True)  #: read-out rows k of a k-class model (k >= 2)

#: quantities measured on the sample S.  The one-McDiarmid-step confidence of the Rademacher route
#: (proofs_notes/sharpenings.md S3) needs SS and DD free of every one of them (theorem.py checks it)
SAMPLE_SYMBOLS = frozenset({emp, R_hat, K_hat})
