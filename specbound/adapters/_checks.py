"""Consistency checks shared by the adapters (each failure is one LayoutError line)."""

from __future__ import annotations

from ..errors import LayoutError
from ..matrices import ACTIVATIONS


def agree(ckpt, what: str, stated, given, stated_where: str):
    """The value of ``what``: ``stated`` (from the checkpoint) unless absent, else ``given``.

    Both present and different is an error: an argument may fill a gap, never override the file.
    """
    if stated is not None and given is not None and stated != given:
        raise LayoutError(
            f"{ckpt.path}: {what}={given!r} was given but {stated_where} says {stated!r}"
        )
    return stated if stated is not None else given


def positive_int(ckpt, what: str, text, where: str) -> int | None:
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        raise LayoutError(f"{ckpt.path}: {where} {what}={text!r} is not an integer") from None
    if value <= 0:
        raise LayoutError(f"{ckpt.path}: {where} {what}={value} must be positive")
    return value


def activation(ckpt, name: str) -> str:
    if name not in ACTIVATIONS:
        raise LayoutError(
            f"{ckpt.path}: unsupported activation {name!r} (supported: {', '.join(ACTIVATIONS)})"
        )
    return name
