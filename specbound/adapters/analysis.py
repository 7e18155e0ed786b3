"""The project's own checkpoint format ``specbound-analysis-v1`` (docs/checkpoint_format.md).

Tensors, for layers ``l = 0..L-1`` and heads ``h = 0..H-1``::

    layers.{l}.attn.W_Q, W_K, W_V  (H, N, d)      layers.{l}.attn.W_O  (H, d, N)
    layers.{l}.ff.M_in             (N, d_ff)      layers.{l}.ff.M_out  (d_ff, N)
    readout.w                      (N,), or (k, N) with metadata num_outputs = k >= 2
    embedding.E (V, N), embedding.P (T, N)        the fixed input map, not covered (absent for
                                                  input_map "embedded"; a "pretrained" map's
                                                  tables must have the recorded input_map_sha256)

Covered matrices (proofs_notes/theory.md section 1, row-vector convention, no residual):

* ``QK_lh      = W_Q[h] @ W_K[h].T``  kept factored as (left=W_Q[h], right=W_K[h].T), rank <= d;
* ``V_tilde_lh = W_V[h] @ W_O[h]``    kept factored as (left=W_V[h], right=W_O[h]),   rank <= d;
* ``M_in``, ``M_out`` dense as stored.

Variants (metadata ``variant``, docs/checkpoint_format.md): ``causal`` has the same tensors (causal
mask, read-out at the last token); ``ls`` has ``W_K``, ``W_V`` of shape (n_kv, N, d), the gated
feed-forward ``layers.{l}.ff.G`` (N, d_ff), ``ff.U`` (N, d_ff), ``ff.D`` (d_ff, N) and the rotary
tables ``rope.cos``, ``rope.sin`` (T, d/2), and covers ``Q_h = W_Q[h]``, ``K_g = W_K[g]``,
``V_tilde_h = W_V[g(h)] W_O[h]`` (factored), ``G``, ``U``, ``D`` (vocabulary.LS_MATRIX_KINDS).

Architecture facts come from the metadata (``num_layers``, ``num_heads``, ``width``, ``head_dim``,
``ff_dim``, ``activation``) when present and from the tensor shapes otherwise; every tensor used is
checked against them, so metadata that disagrees with the tensors is an error, not a silent choice.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import LayoutError
from ..input_map import from_metadata, kind_of
from ..scope import ModelScope
from ..vocabulary import kv_group
from ..matrices import AnalysisWeights, NamedMatrix, ordered
from ..vocabulary import (
    ANALYSIS_LAYOUT, CAPABILITY_CERTIFY, CAPABILITY_FLOAT_FORWARD, CAPABILITY_MATRICES,
    BIDIRECTIONAL_VARIANTS, CAPABILITY_RECORDED_TASK, INPUT_MAP_RANDOM, LS_VARIANTS, MODEL_VARIANTS, VIEW_ANALYSIS,
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
                 "task", "variant", "num_kv_heads", "num_outputs", "input_map"),
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

    ff0 = "layers.0.ff.G" if meta.get("variant") in LS_VARIANTS else "layers.0.ff.M_in"
    q0 = ckpt.shape("layers.0.attn.W_Q")
    m0 = ckpt.shape(ff0)
    for name, shp, rank in (("layers.0.attn.W_Q", q0, 3), (ff0, m0, 2)):
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
    if min(H, N, d, d_ff) < 1:
        raise LayoutError(f"{ckpt.path}: tensors 'layers.0.attn.W_Q' {tuple(q0)} and '{ff0}' {tuple(m0)} have an "
                          "empty axis: heads, width, head dimension and feed-forward width must all be >= 1")
    H = helpers.agree(ckpt, "num_heads", H, num_heads, "the checkpoint")
    act = helpers.agree(ckpt, "activation", meta.get("activation"), activation, "metadata")
    if act is None:
        raise LayoutError(
            f"{ckpt.path}: activation unknown (no 'activation' metadata); pass activation"
        )
    act = helpers.activation(ckpt, act)

    variant = meta.get("variant", "plain")
    if variant not in MODEL_VARIANTS:
        raise LayoutError(f"{ckpt.path}: unsupported variant {variant!r} (supported: {', '.join(MODEL_VARIANTS)})")
    if variant in LS_VARIANTS:
        return _adapt_ls(ckpt, reads, meta, L, H, N, d, d_ff, act, variant)

    matrices: list[NamedMatrix] = []
    for l in range(L):
        p = f"layers.{l}."
        W_Q = reads.tensor(p + "attn.W_Q", (H, N, d), "W_Q")
        W_K = reads.tensor(p + "attn.W_K", (H, N, d), "W_K")
        W_V = reads.tensor(p + "attn.W_V", (H, N, d), "W_V")
        W_O = reads.tensor(p + "attn.W_O", (H, d, N), "W_O")
        for h in range(H):
            matrices.append(
                NamedMatrix(l, h, "QK", helpers.copied(W_Q[h]), helpers.contiguous(W_K[h].T))
            )
            matrices.append(NamedMatrix(l, h, "V_tilde", helpers.copied(W_V[h]), helpers.copied(W_O[h])))
        matrices.append(NamedMatrix(l, -1, "M_in", reads.tensor(p + "ff.M_in", (N, d_ff), "M_in")))
        matrices.append(NamedMatrix(l, -1, "M_out", reads.tensor(p + "ff.M_out", (d_ff, N), "M_out")))
    readout = _readout(ckpt, reads, meta, N)
    return _weights(ckpt, reads, meta, matrices, readout, L, H, N, d, d_ff, act, variant, 0)


def _readout(ckpt, reads, meta, N: int) -> np.ndarray:
    """The read-out: ``w`` (N,) for one output, the rows ``W`` (k, N) for ``num_outputs = k >= 2``."""
    k = helpers.positive_int(ckpt, "num_outputs", meta.get("num_outputs"), "metadata") or 1
    return reads.tensor("readout.w", (N,) if k == 1 else (k, N), "read-out vector w" if k == 1 else f"read-out rows W ({k} outputs)")


def _adapt_ls(ckpt, reads, meta, L, H, N, d, d_ff, act, variant) -> AnalysisWeights:
    """The LS variant's covered matrices (module contract) and its rotary tables."""
    G = helpers.positive_int(ckpt, "num_kv_heads", meta.get("num_kv_heads"), "metadata") or H
    if H % G:
        raise LayoutError(f"{ckpt.path}: {H} heads do not split into {G} key/value groups")
    matrices: list[NamedMatrix] = []
    for l in range(L):
        p = f"layers.{l}."
        W_Q = reads.tensor(p + "attn.W_Q", (H, N, d), "W_Q")
        W_K = reads.tensor(p + "attn.W_K", (G, N, d), "W_K")
        W_V = reads.tensor(p + "attn.W_V", (G, N, d), "W_V")
        W_O = reads.tensor(p + "attn.W_O", (H, d, N), "W_O")
        matrices += [NamedMatrix(l, h, "Q", helpers.copied(W_Q[h])) for h in range(H)]
        matrices += [NamedMatrix(l, g, "K", helpers.copied(W_K[g])) for g in range(G)]
        matrices += [NamedMatrix(l, h, "V_tilde", helpers.copied(W_V[kv_group(h, H, G)]), helpers.copied(W_O[h]))
                     for h in range(H)]
        matrices.append(NamedMatrix(l, -1, "G", reads.tensor(p + "ff.G", (N, d_ff), "gate G")))
        matrices.append(NamedMatrix(l, -1, "U", reads.tensor(p + "ff.U", (N, d_ff), "up U")))
        matrices.append(NamedMatrix(l, -1, "D", reads.tensor(p + "ff.D", (d_ff, N), "down D")))
    readout = _readout(ckpt, reads, meta, N)
    weights = _weights(ckpt, reads, meta, matrices, readout, L, H, N, d, d_ff, act, variant, G)
    cos_shape = ckpt.shape("rope.cos")
    if len(cos_shape) != 2 or cos_shape[1] != d // 2:
        raise LayoutError(f"{ckpt.path}: tensor 'rope.cos' has shape {tuple(cos_shape)}, expected (T, {d // 2})")
    weights.extra["rope.cos"] = reads.tensor("rope.cos", tuple(cos_shape), "rotary table")
    weights.extra["rope.sin"] = reads.tensor("rope.sin", tuple(cos_shape), "rotary table")
    return weights


def _input_map(meta, E, P, N: int, where: str) -> tuple[str, str | None]:
    """(the scope phrase of the input map, its ASSUMPTION or None); a "pretrained" map's stored tables
    must have the recorded SHA-256 (:func:`specbound.input_map.from_metadata`).  A file of the older
    layout without tables has no input map: its data are rows, each projected by Pi."""
    if E is None and kind_of(meta) == INPUT_MAP_RANDOM:
        return "input map: none stored (inputs given as rows, each projected by Pi)", None
    imap = from_metadata(meta, E, P, N, where)
    return imap.describe(), imap.assumption()


def _weights(ckpt, reads, meta, matrices, readout, L, H, N, d, d_ff, act, variant, num_kv) -> AnalysisWeights:
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
    input_map, assumption = _input_map(meta, extra.get("embedding.E"),
                                       None if variant in LS_VARIANTS else extra.get("embedding.P"), N, str(ckpt.path))
    k = 1 if readout.ndim == 1 else int(readout.shape[0])
    token = "the CLS token (position 0)" if variant in BIDIRECTIONAL_VARIANTS else "the last token (causal mask)"
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
            family="specbound analysis model" + ("" if variant == "plain" else f" ({variant} variant)"),
            kept=("every weight of the network",) + (("the rotary tables rope.cos/rope.sin",) if variant in LS_VARIANTS else ())
            + (input_map,),
            activation_source=f"checkpoint metadata -> {act}",
            readout=(f"the checkpoint's read-out vector w on {token}" if k == 1
                     else f"the checkpoint's {k} read-out rows W on {token} (labels 0..{k - 1})"),
            config_keys=tuple(key for key in SPEC.config_keys if key in meta),
            assumptions=(assumption,) if assumption else (),
            own_network=True,
        ),
        variant=variant,
        num_kv_heads=num_kv,
    )
