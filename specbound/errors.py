"""The one exception family users see.

Every failure caused by bad input (missing file, unknown layout, wrong shapes, NaN/Inf, truncated
file, a pickle that is not plain weights) raises a :class:`SpecboundError` whose message is a single
line naming the file or tensor.  The CLI prints that line and exits non-zero.
"""


class SpecboundError(Exception):
    """Base class: a user-facing error with a one-line message."""


class CheckpointError(SpecboundError):
    """A checkpoint file cannot be read as plain weights (missing, truncated, corrupt, unsafe)."""


class LayoutError(SpecboundError):
    """The tensors were read but do not form a known model layout (missing tensor, bad shape)."""


class NonFiniteError(SpecboundError):
    """A weight tensor contains NaN or Inf."""


class CertificationError(SpecboundError):
    """A rigorous step could not be completed (e.g. an enclosure could not be certified)."""


class SourceNotFoundError(CheckpointError):
    """A checkpoint argument is neither an existing path nor a repo id in the local model cache."""


def option(keyword: str, flag: str | None = None) -> str:
    """A setting as a message shared by the Python API and the command line names it, for both:
    ``option("n")`` is ``"n= (--n on the command line)"``; ``flag`` when the flag differs."""
    return f"{keyword}= (--{flag or keyword.replace('_', '-')} on the command line)"


def one_line(text: object) -> str:
    """Collapse a library message to one line (the user-facing contract is one line per error),
    with control characters that are not whitespace (NUL, ESC: from file or tensor names) escaped,
    so that printing it cannot drive the terminal."""
    return printable(" ".join(str(text).split()))


def printable(text: object) -> str:
    """``text`` with every non-printable character (control characters, NUL, ESC) written as its
    Python escape (``\\x1b``); printable text, non-ASCII letters included, is unchanged."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
