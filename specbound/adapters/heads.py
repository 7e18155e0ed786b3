"""The checkpoint's own head: pooler and task-head tensors that the analysis model does not use.

A foreign checkpoint often carries a head of its own (``BertForSequenceClassification``:
``bert.pooler.dense.weight`` and ``classifier.weight``; a causal LM: ``lm_head.weight``).  The
analysis model never uses it: it reads out one token with a fixed unit vector w (the theorem's
read-out, proofs_notes/theory.md section 1), so the scope must say both what the checkpoint has
and what the analysis model uses instead.  :func:`readout_statement` turns an adapter's read-out
phrase ``"none in the checkpoint: <what the analysis model does>"`` into that statement when the
checkpoint does have a head; :func:`head_kind` is the one name test, shared with ``inspect``.
"""

from __future__ import annotations

from typing import Any, Iterable

NO_READOUT = "none in the checkpoint: "
"""How an adapter's read-out phrase starts when the analysis model's w is not in the checkpoint."""

POOLER = "pooler"
TASK_HEAD = "task head"

_NEEDLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (POOLER, ("pooler", "pre_classifier")),
    (TASK_HEAD, ("classifier", "lm_head", "score.", "qa_outputs", "cls.predictions", "cls.seq_relationship",
                 "_predictions.")),
)
_GGUF_HEAD = ("output.weight",)  # llama.cpp's name of an untied language-model head

SHOWN = 3
"""Head tensors named in the statement (the rest are counted; ``inspect`` lists every one)."""


def head_kind(name: str) -> str | None:
    """:data:`POOLER`, :data:`TASK_HEAD` or None: what a tensor of this name is, by its name alone."""
    low = name.lower()
    if low in _GGUF_HEAD:
        return TASK_HEAD
    for kind, needles in _NEEDLES:
        if any(n in low for n in needles):
            return kind
    return None


def head_tensors(names: Iterable[str], read: Iterable[str], shape) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every weight (>= 2 axes) among ``names`` that is not in ``read`` and is a
    pooler or task-head tensor by :func:`head_kind`, in the checkpoint's order; ``shape(name)``
    gives a tensor's shape."""
    used = set(read)
    out = []
    for name in names:
        if name in used or head_kind(name) is None:
            continue
        dims = tuple(int(d) for d in shape(name))
        if len(dims) >= 2:
            out.append((name, dims))
    return out


def head_architecture(config: dict[str, Any]) -> str | None:
    """The config's ``architectures[0]`` when it names a model with a head (``...For...``,
    ``...LMHead...``), else None.  Informational only: it changes no matrix of the analysis model."""
    archs = config.get("architectures")
    if not isinstance(archs, (list, tuple)) or not archs or not isinstance(archs[0], str):
        return None
    arch = archs[0]
    return arch if ("For" in arch or "LMHead" in arch) else None


def readout_statement(phrase: str, heads: list[tuple[str, tuple[int, ...]]], architecture: str | None) -> str:
    """The adapter's read-out ``phrase`` with what the checkpoint has in place of
    :data:`NO_READOUT`: ``"the checkpoint's own pooler and task head (Arch: classifier.weight 2x32,
    pooler.dense.weight 32x32) are NOT used; instead the analysis model reads out ..."``.

    Unchanged when the phrase does not say "none in the checkpoint" (the checkpoint's own w is the
    read-out) or when the checkpoint has no head (no head tensor, no head architecture)."""
    if NO_READOUT not in phrase or not (heads or architecture):
        return phrase
    kinds = [k for k in (POOLER, TASK_HEAD) if any(head_kind(n) == k for n, _ in heads)]
    what = " and ".join(kinds) or "head"
    if heads:
        shown = ", ".join(f"{n} {'x'.join(map(str, s))}" for n, s in heads[:SHOWN])
        if len(heads) > SHOWN:
            shown += f", ... ({len(heads)} tensors)"
    else:
        shown = "no tensor of its own in the file, e.g. tied to the token embedding"
    details = f"{architecture}: {shown}" if architecture else shown
    verb = "are" if len(kinds) > 1 else "is"
    return phrase.replace(NO_READOUT, f"the checkpoint's own {what} ({details}) {verb} NOT used; instead ", 1)
