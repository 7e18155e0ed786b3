"""What a bound is a bound *for*: the analysis model an adapter extracted from a checkpoint.

The theorem is proven for the analysis model (proofs_notes/theory.md section 1), not for the
checkpoint's own network: an adapter keeps the covered matrices and replaces or drops the rest.
:class:`ModelScope` records that, so every output can say it (the certificate's scope block).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


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
