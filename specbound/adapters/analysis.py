"""The project's own checkpoint format ``specbound-analysis-v1`` (docs/checkpoint_format.md).

Tensors, for layers ``l = 0..L-1`` and heads ``h = 0..H-1``::

    layers.{l}.attn.W_Q, W_K, W_V  (H, N, d)      layers.{l}.attn.W_O  (H, d, N)
    layers.{l}.ff.M_in             (N, d_ff)      layers.{l}.ff.M_out  (d_ff, N)
    readout.w                      (N,)
    embedding.E (V, N), embedding.P (T, N)        fixed embeddings, not covered, optional here

Covered matrices (proofs_notes/theory.md section 1, row-vector convention, no residual):

* ``QK_lh      = W_Q[h] @ W_K[h].T``  kept factored as (left=W_Q[h], right=W_K[h].T), rank <= d;
* ``V_tilde_lh = W_V[h] @ W_O[h]``    kept factored as (left=W_V[h], right=W_O[h]),   rank <= d;
* ``M_in``, ``M_out`` dense as stored.

Architecture facts come from the metadata (``num_layers``, ``num_heads``, ``width``, ``head_dim``,
``ff_dim``, ``activation``) when present and from the tensor shapes otherwise; every tensor used is
checked against them, so metadata that disagrees with the tensors is an error, not a silent choice.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import LayoutError
from ..scope import ModelScope
from ..matrices import AnalysisWeights, NamedMatrix, ordered
from ..vocabulary import (
    ANALYSIS_LAYOUT, CAPABILITY_CERTIFY, CAPABILITY_FLOAT_FORWARD, CAPABILITY_MATRICES,
    CAPABILITY_RECORDED_TASK, VIEW_ANALYSIS,
)
from . import helpers
from .helpers import AdapterSpec, Reads, check_view

LAYOUT = ANALYSIS_LAYOUT
EXPECTED = "layers.{l}.attn.W_Q/W_K/W_V/W_O, layers.{l}.ff.M_in/M_out, readout.w"
SPEC = AdapterSpec(
    layout=LAYOUT,
    families=("specbound",),
    expected=EXPECTED,
    capabilities=frozenset({CAPABILITY_MATRICES, CAPABILITY_FLOAT_FORWARD, CAPABILITY_RECORDED_TASK,
                            CAPABILITY_CERTIFY}),
    config_keys=("format", "num_layers", "num_heads", "width", "head_dim", "ff_dim", "activation",
                 "task"),
)
"""The analysis model itself: no score scale (scores are x A x^T), so every view is the same."""

_LAYER = re.compile(r"^layers\.(\d+)\.")


def matches(ckpt) -> bool:
    fmt = ckpt.metadata.get("format")
    if fmt is not None and str(fmt).startswith("specbound-analysis"):
        return True
    return "layers.0.attn.W_Q" in ckpt


def _num_layers(ckpt, stated: int | None) -> int:
    if stated is not None:
        return stated
    found = [int(m.group(1)) for n in ckpt.names() if (m := _LAYER.match(n))]
    # Layers are numbered 0..L-1; a gap shows up later as a missing tensor naming it.
    return 1 + max(found) if found else 1


def adapt(ckpt, *, num_heads: int | None = None, activation: str | None = None,
          view: str = VIEW_ANALYSIS) -> AnalysisWeights:
    """Covered matrices of a ``specbound-analysis-v1`` checkpoint (see the module contract)."""
    check_view(view)
    reads = Reads(ckpt)
    meta = ckpt.metadata
    fmt = meta.get("format")
    if fmt is not None and fmt != LAYOUT:
        raise LayoutError(f"{ckpt.path}: unsupported format {fmt!r} (supported: {LAYOUT})")

    def stated(key: str) -> int | None:
        return helpers.positive_int(ckpt, key, meta.get(key), "metadata")

    q0 = ckpt.shape("layers.0.attn.W_Q")
    m0 = ckpt.shape("layers.0.ff.M_in")
    for name, shp, rank in (("layers.0.attn.W_Q", q0, 3), ("layers.0.ff.M_in", m0, 2)):
        if len(shp) != rank:
            raise LayoutError(
                f"{ckpt.path}: tensor '{name}' has shape {tuple(shp)} ({len(shp)}-D), "
                f"expected a {rank}-D tensor"
            )
    L = _num_layers(ckpt, stated("num_layers"))
    H = stated("num_heads") or int(q0[0])
    N = stated("width") or int(q0[1])
    d = stated("head_dim") or int(q0[2])
    d_ff = stated("ff_dim") or int(m0[1])
    H = helpers.agree(ckpt, "num_heads", H, num_heads, "the checkpoint")
    act = helpers.agree(ckpt, "activation", meta.get("activation"), activation, "metadata")
    if act is None:
        raise LayoutError(
            f"{ckpt.path}: activation unknown (no 'activation' metadata); pass activation"
        )
    act = helpers.activation(ckpt, act)

    matrices: list[NamedMatrix] = []
    for l in range(L):
        p = f"layers.{l}."
        W_Q = reads.tensor(p + "attn.W_Q", (H, N, d), "W_Q of every head (QK left factors)")
        W_K = reads.tensor(p + "attn.W_K", (H, N, d), "W_K of every head (QK right factors, transposed)")
        W_V = reads.tensor(p + "attn.W_V", (H, N, d), "W_V of every head (V_tilde left factors)")
        W_O = reads.tensor(p + "attn.W_O", (H, d, N), "W_O of every head (V_tilde right factors)")
        for h in range(H):
            matrices.append(
                NamedMatrix(l, h, "QK", W_Q[h].copy(), np.ascontiguousarray(W_K[h].T))
            )
            matrices.append(NamedMatrix(l, h, "V_tilde", W_V[h].copy(), W_O[h].copy()))
        matrices.append(NamedMatrix(l, -1, "M_in", reads.tensor(p + "ff.M_in", (N, d_ff), "M_in")))
        matrices.append(NamedMatrix(l, -1, "M_out", reads.tensor(p + "ff.M_out", (d_ff, N), "M_out")))
    readout = reads.tensor("readout.w", (N,), "read-out vector w")

    extra: dict = {"container": ckpt.container, "weights_file": str(ckpt.path),
                   "metadata": dict(meta), "tensors_read": reads.used,
                   "config_used": {k: meta[k] for k in SPEC.config_keys if k in meta}}
    if "task" in meta:
        extra["task"] = meta["task"]
    for name in ("embedding.E", "embedding.P"):
        if name in ckpt:
            shp = ckpt.shape(name)
            if len(shp) != 2 or shp[1] != N:
                raise LayoutError(
                    f"{ckpt.path}: tensor '{name}' has shape {tuple(shp)}, expected (rows, {N})"
                )
            extra[name] = reads.tensor(name, None, "fixed embedding (not covered; forward passes)")
    return AnalysisWeights(
        matrices=ordered(matrices),
        num_layers=L,
        num_heads=H,
        width=N,
        head_dim=d,
        ff_dim=d_ff,
        activation=act,
        readout=readout,
        source=str(ckpt.source),
        sha256=ckpt.sha256(),
        layout=LAYOUT,
        extra=extra,
        scope=ModelScope(
            family="specbound analysis model",
            kept=("every weight of the network",),
            activation_source=f"checkpoint metadata -> {act}",
            readout="the checkpoint's read-out vector w on the CLS token (position 0)",
            config_keys=tuple(k for k in SPEC.config_keys if k in meta),
        ),
    )
