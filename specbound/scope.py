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
