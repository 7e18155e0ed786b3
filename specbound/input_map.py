"""The input map of the analysis-family Transformer: how an example becomes the rows ``X^(0)``.

The theorem (proofs_notes/theory.md section 1) needs the inputs ``X_i`` to be a function of the
example alone, fixed before the sample S is seen: the map is part of the *model class*, never of the
learned weights.  Three maps are supported (``vocabulary.INPUT_MAPS``):

* ``random``: a token table ``E`` (V, N) and a positional table ``P`` (T, N) drawn once from a
  recorded seed (:func:`fixed_embedding`, entries N(0, 1/N)); ``X = Pi(E[tokens] + P[:T])``.
* ``pretrained``: a frozen token table (and optionally a positional table) taken from a pretrained
  checkpoint -- e.g. MiniLM-L6's word and position embeddings, width 384 -- optionally followed by a
  fixed random projection ``R`` (N_src, N) to a smaller width drawn from a recorded seed
  (:func:`projection_matrix`; the tables are read by :func:`specbound.pretrained.pretrained_map`).  The tables the model uses are ``E' = E_src R`` and ``P' = P_src R``
  computed once in binary64 by the fixed sequential algorithm of :func:`project_table` (bit for bit
  the same on every IEEE machine), and *those* float64 tables are the input map: the certified
  forward passes read them as exact reals, so nothing about the rounding of the product needs to be
  enclosed.  ASSUMPTION (stated in every scope): the source table was trained without S; choosing
  among K candidate tables on S costs delta / K (proofs_notes/selection.md).
* ``embedded``: the user embeds each example into float rows (T, N); the model projects each row with
  ``Pi``.  ASSUMPTION: the user's embedding is fixed before S (not fitted on it).

A trainable embedding is not an input map: it is fitted on S, so the inputs would depend on the
sample; :mod:`specbound.nn` refuses it.

Provenance is recorded in the checkpoint metadata (:meth:`InputMap.metadata`, docs/checkpoint_format.md):
the kind, the seed, the source's label, its SHA-256 (of the source tables' exact values, in the
in-memory digest format of :func:`specbound.formats.state_dict.state_sha256`), its width, the
projection seed, and the SHA-256 of the tables actually used (checked when the file is read).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
import numpy as np

from .errors import LayoutError
from .formats.state_dict import state_sha256
from .vocabulary import INPUT_MAP_EMBEDDED, INPUT_MAP_PRETRAINED, INPUT_MAP_RANDOM, INPUT_MAPS

MINILM_TOKENS = "embeddings.word_embeddings.weight"
"""The token table of a BERT-family checkpoint (MiniLM-L6's is 30522 x 384)."""
MINILM_POSITIONS = "embeddings.position_embeddings.weight"
"""The positional table of a BERT-family checkpoint (MiniLM-L6's is 512 x 384)."""

SELECTION_NOTE = "choosing among K candidate tables on S costs delta/K"


def fixed_embedding(vocab_size: int, seq_len: int, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Token and positional embeddings drawn once from ``seed`` (entries N(0, 1/width)).

    They are part of the *input map*, not of the learned weights: they are fixed before any data
    is seen, so the inputs ``X_i = Pi(E[tokens_i] + P)`` are i.i.d. whenever the token sequences are.
    """
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xE3B]))
    scale = 1.0 / np.sqrt(width)
    E = rng.standard_normal((vocab_size, width)) * scale
    P = rng.standard_normal((seq_len, width)) * scale
    return E, P


def projection_matrix(source_width: int, width: int, seed: int) -> np.ndarray:
    """The fixed random projection ``R`` (source_width, width), entries N(0, 1/width), drawn from
    ``seed`` (a Johnson-Lindenstrauss map: ``||x R|| ~ ||x||``, so ``Pi`` acts on rows of the same
    size as before the projection)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x9E0]))
    return rng.standard_normal((source_width, width)) / np.sqrt(width)


def project_table(table: np.ndarray, R: np.ndarray) -> np.ndarray:
    """``table @ R`` by one fixed algorithm: for j = 0, 1, ... in order, ``acc <- fl(acc + fl(table[:, j] R[j]))``.

    Every step is one correctly rounded binary64 multiply or add (numpy ufuncs, never fused), so the
    result is the same bit pattern on every IEEE machine, unlike a BLAS product whose summation
    order depends on the library.  The result *defines* the input map (it is stored and read back
    exactly); it is not meant to equal the real product."""
    table = np.asarray(table, dtype=np.float64)
    R = np.asarray(R, dtype=np.float64)
    acc = np.zeros((table.shape[0], R.shape[1]), dtype=np.float64)
    for j in range(table.shape[1]):
        acc += table[:, j:j + 1] * R[j:j + 1, :]
    return acc


def tables_sha256(E: np.ndarray | None, P: np.ndarray | None) -> str:
    """SHA-256 of the tables a model uses, named ``embedding.E`` / ``embedding.P`` as float64 (the
    in-memory digest format of :func:`specbound.formats.state_dict.state_sha256`)."""
    tables = {}
    if E is not None:
        tables["embedding.E"] = np.ascontiguousarray(E, dtype=np.float64)
    if P is not None and P.shape[0] > 0:
        tables["embedding.P"] = np.ascontiguousarray(P, dtype=np.float64)
    return state_sha256(tables)


@dataclass(frozen=True, eq=False)
class InputMap:
    """A fixed input map (module contract): its ``kind`` (one of ``vocabulary.INPUT_MAPS``), the
    model ``width`` N, the tables ``E`` (V, N) and ``P`` (T, N) or None (float64; None for
    ``embedded``), and its provenance: ``seed`` (the embedding seed of ``random``, the projection
    seed of a projected ``pretrained`` table), ``source`` / ``source_sha256`` / ``source_width``
    (``pretrained``) and ``projected``."""

    kind: str
    width: int
    E: np.ndarray | None = None
    P: np.ndarray | None = None
    seed: int = 0
    source: str = ""
    source_sha256: str = ""
    source_width: int = 0
    projected: bool = False

    def __post_init__(self) -> None:
        if self.kind not in INPUT_MAPS:
            raise LayoutError(f"input map: unknown kind {self.kind!r} (use one of {', '.join(INPUT_MAPS)})")
        if self.kind == INPUT_MAP_EMBEDDED:
            if self.E is not None or self.P is not None:
                raise LayoutError("input map: an 'embedded' map has no tables (the user embeds the inputs)")
            return
        if self.E is None or np.ndim(self.E) != 2 or self.E.shape[1] != self.width or self.E.shape[0] < 1:
            raise LayoutError(f"input map: token table must have shape (vocab >= 1, {self.width}), "
                              f"got {None if self.E is None else np.shape(self.E)}")
        if self.P is not None and (np.ndim(self.P) != 2 or self.P.shape[1] != self.width):
            raise LayoutError(f"input map: positional table must have shape (T, {self.width}), got {np.shape(self.P)}")
        for name, table in (("token", self.E), ("positional", self.P)):
            if table is not None and not np.isfinite(table).all():
                raise LayoutError(f"input map: the {name} table has NaN/Inf entries")

    @property
    def vocab_size(self) -> int:
        """Rows of the token table (0 for ``embedded``)."""
        return 0 if self.E is None else int(self.E.shape[0])

    @property
    def positions(self) -> int:
        """Rows of the positional table (0 when there is none)."""
        return 0 if self.P is None else int(self.P.shape[0])

    @cached_property
    def sha256(self) -> str:
        """:func:`tables_sha256` of the tables (of nothing for ``embedded``)."""
        return tables_sha256(self.E, self.P)

    def metadata(self) -> dict[str, str]:
        """The checkpoint metadata of this map (docs/checkpoint_format.md); a ``random`` map writes
        only ``embedding_seed``, as every earlier checkpoint did."""
        if self.kind == INPUT_MAP_RANDOM:
            return {"embedding_seed": str(int(self.seed))}
        meta = {"input_map": self.kind}
        if self.kind == INPUT_MAP_PRETRAINED:
            meta.update(input_map_source=self.source, input_map_source_sha256=self.source_sha256,
                        input_map_source_width=str(int(self.source_width)), input_map_sha256=self.sha256)
            if self.projected:
                meta["input_map_projection_seed"] = str(int(self.seed))
        return meta

    def describe(self) -> str:
        """What the map is, in one phrase (the scope's ``kept`` entry)."""
        return describe(self.metadata(), self.vocab_size, self.positions, self.width)

    def assumption(self) -> str | None:
        """The assumption this map adds to a bound (None for ``random``)."""
        return assumption(self.metadata())


def random_map(vocab_size: int, seq_len: int, width: int, seed: int = 0) -> InputMap:
    """The ``random`` map: :func:`fixed_embedding` of ``seed`` (``seq_len`` 0: no positional table)."""
    E, P = fixed_embedding(vocab_size, seq_len, width, seed)
    return InputMap(INPUT_MAP_RANDOM, width, E, P if seq_len > 0 else None, seed=int(seed))


def embedded_map(width: int) -> InputMap:
    """The ``embedded`` map: the user gives float rows (T, ``width``); the model applies ``Pi``."""
    return InputMap(INPUT_MAP_EMBEDDED, int(width))


def kind_of(meta: dict) -> str:
    """The input-map kind a checkpoint's metadata states (absent: ``random``, as in every earlier file)."""
    kind = str(meta.get("input_map", INPUT_MAP_RANDOM))
    if kind not in INPUT_MAPS:
        raise LayoutError(f"metadata input_map is {kind!r}, expected one of {', '.join(INPUT_MAPS)}")
    return kind


def from_metadata(meta: dict, E: np.ndarray | None, P: np.ndarray | None, width: int, where: str = "checkpoint") -> InputMap:
    """The map a checkpoint records, with its stored tables; a ``pretrained`` map's tables must have
    the recorded SHA-256, a ``random`` map's that record ``embedding_seed`` must be exactly the tables
    :func:`fixed_embedding` draws from it (LayoutError, one line, otherwise)."""
    kind = kind_of(meta)
    if kind == INPUT_MAP_EMBEDDED:
        if E is not None:
            raise LayoutError(f"{where}: input_map 'embedded' but the file holds a token table embedding.E")
        return embedded_map(width)
    if E is None:
        raise LayoutError(f"{where}: missing tensor embedding.E (input map {kind!r})")
    P = None if P is None or P.shape[0] == 0 else P
    if kind == INPUT_MAP_RANDOM:
        if "embedding_seed" in meta:  # the scope will say "drawn from seed s": the tables must be those
            seed = _int(meta["embedding_seed"], "embedding_seed", where)
            E0, P0 = fixed_embedding(E.shape[0], 0 if P is None else P.shape[0], width, seed)
            if not (np.array_equal(E, E0) and (P is None or np.array_equal(P, P0))):
                raise LayoutError(f"{where}: the stored embedding tables are not those of embedding_seed {seed}: "
                                  "an embedding changed (or fitted on S) is outside the theorem, whose input map "
                                  "is fixed before S")
            return InputMap(kind, width, E, P, seed=seed)
        return InputMap(kind, width, E, P, seed=0)
    projected = "input_map_projection_seed" in meta
    out = InputMap(kind, width, E, P,
                   seed=_int(meta["input_map_projection_seed"], "input_map_projection_seed", where) if projected else 0,
                   source=str(meta.get("input_map_source", "")), source_sha256=str(meta.get("input_map_source_sha256", "")),
                   source_width=_int(meta.get("input_map_source_width", str(width)), "input_map_source_width", where),
                   projected=projected)
    recorded = meta.get("input_map_sha256")
    if recorded != out.sha256:
        raise LayoutError(f"{where}: the stored embedding tables do not have the recorded input_map_sha256 "
                          f"({str(recorded)[:16]}... recorded, {out.sha256[:16]}... stored)")
    return out


def _int(text, key: str, where: str) -> int:
    try:
        return int(str(text))
    except ValueError:
        raise LayoutError(f"{where}: metadata {key} is not an integer ({text!r})") from None


def describe(meta: dict, vocab_size: int, positions: int, width: int) -> str:
    """The scope phrase of the map a checkpoint's metadata states (with its table sizes)."""
    kind = kind_of(meta)
    if kind == INPUT_MAP_EMBEDDED:
        return f"input map: rows embedded by the user (width {width}), each projected by Pi"
    pos = f" + positional table ({positions} rows)" if positions else ""
    if kind == INPUT_MAP_RANDOM:
        seed = meta.get("embedding_seed")
        drawn = f"drawn from seed {seed}" if seed is not None else "stored in the checkpoint"
        return f"input map: fixed token table ({vocab_size} x {width}){pos} {drawn}, then Pi"
    proj = (f", projected from width {meta.get('input_map_source_width')} to {width} by a fixed Gaussian "
            f"matrix of seed {meta['input_map_projection_seed']}" if "input_map_projection_seed" in meta else "")
    return (f"input map: frozen pretrained table from {meta.get('input_map_source')} "
            f"(sha256 {str(meta.get('input_map_source_sha256', ''))[:16]}...; {vocab_size} tokens{pos}){proj}, then Pi")


def assumption(meta: dict) -> str | None:
    """The ASSUMPTION a map adds to the scope (None for ``random``: its seed is fixed in advance)."""
    kind = kind_of(meta)
    if kind == INPUT_MAP_PRETRAINED:
        return (f"ASSUMPTION: the pretrained embedding table {meta.get('input_map_source')} (sha256 "
                f"{str(meta.get('input_map_source_sha256', ''))[:16]}...) was trained without S; {SELECTION_NOTE}")
    if kind == INPUT_MAP_EMBEDDED:
        return "ASSUMPTION: the user's embedding of the inputs was fixed before S (not fitted on S)"
    return None


__all__ = ["InputMap", "MINILM_POSITIONS", "MINILM_TOKENS", "assumption", "describe", "embedded_map",
           "fixed_embedding", "from_metadata", "kind_of", "project_table", "projection_matrix", "random_map",
           "tables_sha256"]
