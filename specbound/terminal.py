"""What the command line writes: a rich console for tables, and text made safe to print.

Contract.  :func:`console` is a ``rich`` console whose output, piped into a reader that stops early
(``| head``), raises :class:`BrokenPipeError` (``rich`` would exit with status 1, the status
``verify`` uses for INVALID); :func:`specbound.cli.main` ends such a run quietly with
:data:`specbound.cli.BROKEN_PIPE_STATUS`.  :func:`printable`
escapes control characters (NUL, ESC, ...) so that names taken from files cannot drive the terminal.
"""

from __future__ import annotations

from .errors import printable  # noqa: F401 - one definition, shared with the error lines


def console():
    """A rich console for stdout: whole rows when piped (rich's default is 80 columns), and a
    :class:`BrokenPipeError` when the reader has gone (module contract)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    out = _Console(highlight=False)
    if not out.is_terminal:
        out = _Console(highlight=False, width=160)
    return out


def print_table(out, table) -> None:
    """Print a :class:`specbound.table.Table` on the console ``out``: its plain lines written directly
    where rich would print exactly those (no colours, plain strings that fit), else through rich."""
    from .table import plain_lines

    lines = plain_lines(table, out.width) if out.color_system is None and not out.is_jupyter else None
    if lines is None:
        out.print(table.to_rich())
        return
    out.file.write("\n".join(lines) + "\n")
    out.file.flush()
