"""What a bound is a bound *for*: the analysis model an adapter extracted from a checkpoint.

The theorem is proven for the analysis model (proofs_notes/theory.md section 1), not for the
checkpoint's own network: an adapter keeps the covered matrices and replaces or drops the rest.
:class:`ModelScope` records that, so every output can say it (the certificate's scope block).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .verdict import NOT_PROVEN, Verdict, is_vacuous, proven_in  # noqa: F401  (is_vacuous: still imported from here by specbound.experiments)
from .vocabulary import (
    EMPIRICAL_DATA,
    EMPIRICAL_TASK,
    EMPIRICAL_TRAIN,
    EMPIRICAL_USER,
    READOUT_FIXED,
    READOUT_TRAINED,
)


@dataclass(frozen=True)
class ModelScope:
    """The adapter's account of the analysis model of one checkpoint.

    ``family`` names the checkpoint family ("BERT encoder", "specbound analysis model", ...);
    ``kept`` the parts entering the covered matrices; ``replaced`` the parts the analysis model
    replaces (e.g. "LayerNorm -> identity"); ``dropped`` the parts it leaves out (biases, residual
    connections, q/k norms, ...); ``activation_source`` where the activation came from (a config key
    and its value, the checkpoint's own metadata, or "assumed: ... (no config)"); ``readout`` the
    read-out and its token; ``config_keys`` the configuration keys the adapter read.
    """

    family: str
    kept: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    activation_source: str = ""
    readout: str = ""
    config_keys: tuple[str, ...] = ()
    own_network: bool = False
    """True when the checkpoint's network *is* an analysis model (the own format, :mod:`specbound.nn`):
    the bound is then for the network the checkpoint computes, not a stand-in for it."""
    assumptions: tuple[str, ...] = ()
    """Assumptions the model itself brings (e.g. that a frozen pretrained input map was trained
    without S); every scope block lists them."""

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def statement(self) -> str:
        """One sentence saying what a certified number is about, e.g. "analysis model of a BERT
        encoder: kept ...; replaced: LayerNorm -> projection onto the unit ball; dropped: biases,
        ...; activation: ...; read-out: ..."."""
        parts = [f"analysis model of {self.family}"]
        if self.kept:
            parts.append("kept: " + ", ".join(self.kept))
        if self.replaced:
            parts.append("replaced: " + ", ".join(self.replaced))
        if self.dropped:
            parts.append("dropped: " + ", ".join(self.dropped))
        if self.activation_source:
            parts.append("activation: " + self.activation_source)
        if self.readout:
            parts.append("read-out: " + self.readout)
        return "; ".join(parts)

# ------------------------------------------------------------------------------------------------
# the scope block of a certified result: what the number is a bound *for*, in every output

READOUT_PHRASES: dict[str, str] = {
    READOUT_TRAINED: "treated as fitted on S: its cover is included (paid for in the bound)",
    READOUT_FIXED: ("ASSUMPTION: chosen independently of S (readout='fixed' / --readout fixed, or no read-out "
              "vector w of the analysis model in the checkpoint): "
              "its cover is dropped; the bound is invalid if w was fitted on S"),
}
"""How each read-out mode (vocabulary.READOUTS) enters the theorem, said in words."""

USER_EMPIRICAL_PHRASE = ("ASSUMPTION: the empirical term is a number supplied by the user, NOT certified; it "
                         "must be the ramp loss of the analysis model (not the checkpoint's own network or "
                         "loss) at the printed rounded margin rho~ on S")


def training_sample_assumption(tries: int = 1) -> str:
    """What a bound on S = the training sample rests on and the tool cannot check: S is i.i.d. draws
    of the task and its data seed and n were fixed before training or looking (a seed or n chosen
    after seeing bounds is selection on S); the training record states it, specbound does not prove
    it.  ``tries``: the record's K, charged as delta / K (proofs_notes/selection.md, item 4)."""
    return ("ASSUMPTION: S = the training sample consists of i.i.d. draws of the task, with its data seed "
            "and n fixed before training and before looking at any result; this is the training record's "
            "statement (the user's), not something specbound proves; "
            f"K = {tries} bound sample{'s' if tries != 1 else ''} (data seed, n) tried in all, "
            f"charged: the theorem is applied at delta / {tries}")


def _sample_phrase(kind: str, detail: dict, n: int) -> str:
    if kind == EMPIRICAL_DATA:
        sha = str(detail.get("sha256", ""))[:16]
        path = str(detail.get("path"))
        what = f"the sample given in memory {path}" if path.startswith("<") else f"the data file {path}"
        return what + (f" (sha256 {sha}...)" if sha else "") + f", n = {n}"
    if kind == EMPIRICAL_TASK:
        task = detail.get("task") or {}
        return (f"n = {n} fresh i.i.d. samples of the recorded task {task.get('name')!s} "
                f"(numpy default_rng seed {detail.get('seed')})")
    if kind == EMPIRICAL_TRAIN:
        task = detail.get("task") or {}
        return (f"S = the training sample: the n = {n} training examples of task {task.get('name')!s} "
                f"(regenerated from data seed {detail.get('data_seed')})")
    if kind == EMPIRICAL_USER:
        return f"the user's sample of n = {n} examples (not seen by specbound)"
    return f"none (n = {n} enters the complexity and confidence terms only)"


def scope_block(*, checkpoint: str, sha256: str, model: ModelScope | None, variant: str, activation: str,
                readout: str, empirical_kind: str, empirical_certified: bool, empirical_detail: dict,
                n: int, margin: str, overrides: list[dict], verdict: Verdict) -> dict:
    """The scope of one certified result as a JSON-able dict (keys in the order they are printed).

    ``overrides``: one dict per lemma-constant override with ``name``, ``value``, ``proven_value``
    and ``proven`` (value >= the proven value).  ``verdict``: the result's :class:`Verdict`, whose
    ``proven``, ``is_bound`` and ``vacuous`` the block records (``proven`` must be False as soon as
    one override is below its proven value).
    """
    model = model or ModelScope(family="unknown (the adapter gave no account)")
    assumptions = []
    if readout == READOUT_FIXED:
        assumptions.append("read-out " + READOUT_PHRASES[READOUT_FIXED])
    if empirical_kind == EMPIRICAL_USER:
        assumptions.append(USER_EMPIRICAL_PHRASE)
    assumptions += list(model.assumptions)
    if empirical_kind == EMPIRICAL_TRAIN:
        assumptions.append(training_sample_assumption(int(empirical_detail.get("tries", 1))))
    if verdict.proven and any(not o["proven"] for o in overrides):
        raise ValueError("a verdict of 'proven' with a lemma constant below its proven value")
    for o in overrides:
        tag = "at or above the proven value" if o["proven"] else NOT_PROVEN
        assumptions.append(f"lemma constant {o['name']} = {o['value']} (proven value {o['proven_value']}): {tag}")
    return {
        "bound_for": f"the analysis model of {checkpoint} (sha256 {sha256[:16]}...), "
                     + ("which is the checkpoint's own network" if model.own_network else "not the checkpoint's own network"),
        "family": model.family,
        "variant": variant,
        "kept": list(model.kept),
        "replaced": list(model.replaced),
        "dropped": list(model.dropped),
        "activation": f"{activation} ({model.activation_source or 'source not stated'})",
        "readout": (f"{model.readout or 'read-out vector w'}; "
                    + (READOUT_PHRASES[READOUT_TRAINED] if readout == READOUT_TRAINED else "fixed (see the ASSUMPTION below)")),
        "sample": _sample_phrase(empirical_kind, empirical_detail, n),
        "n": n,
        "margin": margin,
        "empirical_certified": bool(empirical_certified),
        "empirical": ("certified (certified forward passes on S: Arb, or binary64 with a proven error bound)" if empirical_certified
                      else "NOT certified (user-supplied)" if empirical_kind == EMPIRICAL_USER
                      else "absent: complexity + confidence only, NOT a bound"),
        "assumptions": assumptions,
        "overrides": overrides,
        "proven": verdict.proven,
        "is_bound": verdict.is_bound,
        "vacuous": verdict.vacuous,
    }


def scope_lines(block: dict) -> list[str]:
    """The scope block as printed by ``certify`` and ``verify`` (one fact per line)."""
    out = [f"scope: a bound for {block['bound_for']}",
           f"  family: {block['family']} (analysis model variant {block['variant']})"]
    for key in ("kept", "replaced", "dropped"):
        if block.get(key):
            out.append(f"  {key}: " + "; ".join(block[key]))
    out += [f"  activation: {block['activation']}",
            f"  read-out: {block['readout']}",
            f"  S: {block['sample']}",
            f"  margin: rho~ = {block['margin']} (the rounded margin of the empirical ramp loss)",
            f"  empirical term: {block['empirical']}"]
    out += [f"  {a}" for a in block["assumptions"]]
    if not proven_in(block):  # fail closed: a block that does not say proven is not
        out.append(f"  {NOT_PROVEN}: a lemma constant is below its proven value")
    return out


def scope_summary(block: dict) -> str:
    """The scope block in one line: which model, which sample, which empirical term, how many
    assumptions (``verify`` prints it next to the verdict)."""
    assumptions = len(block.get("assumptions") or ())
    return (f"the analysis model of {block['bound_for'].removeprefix('the analysis model of ')}; "
            f"S: {block['sample']}; empirical term: {block['empirical']}"
            + (f"; {assumptions} ASSUMPTION{'S' if assumptions > 1 else ''} (listed below)" if assumptions else ""))


# ------------------------------------------------------------------------------------------------
# pretrained checkpoints: what a certified number of theirs is (and is not), in one short paragraph

OWN_MODELS_POINTER = "docs/own_models.md: a model built with specbound.nn"
"""Where a user learns to train a model whose own network is the analysis model."""


def pretrained_note(own_network: bool, subject: str = "this number") -> list[str]:
    """For a checkpoint whose network is not an analysis model (a pretrained BERT, GPT-2, Gemma, ...:
    :attr:`ModelScope.own_network` False): what ``subject`` is, one sentence a line (``certify`` and
    ``inspect`` print it); for a model that is its own analysis model, nothing."""
    if own_network:
        return []
    return [f"what {subject} is: a certified statement about the ANALYSIS MODEL built from this checkpoint's "
            "matrices (see the scope), NOT a bound on the checkpoint's own network, head or task.",
            "For a bound on a network itself, train a model of the analysis family and certify it on its "
            f"training sample ({OWN_MODELS_POINTER})."]
