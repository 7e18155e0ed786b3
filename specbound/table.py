"""A text table of the command line: a title, columns with a side to align to, rows of strings.

Contract.  :class:`Table` holds plain strings only.  :func:`plain_lines` gives, for a table whose every
string is plain printable ASCII without rich markup or emoji codes and which fits ``width`` columns,
exactly the lines ``rich`` prints for :meth:`Table.to_rich` on an uncoloured console of that width
(rich's default look: heavy head box, one space of padding, the title centred above); otherwise
``None``, and the caller lets rich lay it out (wrapping, styles on a terminal).  The point is speed:
rich spends about a millisecond per row, which on a 180-row table is a tenth of a second, as much as
the rest of ``specbound proxies``' own work on a small model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

JUSTIFY = ("left", "right")
"""The sides a column aligns its cells to."""

# rich replaces ``:name:`` by an emoji and reads ``[...]`` as markup: such strings go to rich.
_RICH_SYNTAX = re.compile(r"\[|:\S*?:")


@dataclass
class Table:
    """A titled table of strings; ``justify[i]`` is column ``i``'s side (:data:`JUSTIFY`)."""

    title: str
    columns: list[str]
    justify: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.justify) != len(self.columns) or any(j not in JUSTIFY for j in self.justify):
            raise ValueError(f"one side of {JUSTIFY} per column, got {self.justify!r}")

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row has {len(self.columns)} cells, got {len(cells)}")
        self.rows.append([str(c) for c in cells])

    def to_rich(self):
        """The same table as a ``rich.table.Table`` (rich's defaults)."""
        from rich.table import Table as RichTable

        table = RichTable(title=self.title)
        for name, side in zip(self.columns, self.justify):
            table.add_column(name, justify=side)
        for row in self.rows:
            table.add_row(*row)
        return table


def _plain(text: str) -> bool:
    # rich trims a cell's outer spaces in some alignments: such strings go to rich as well
    return text.isascii() and text.isprintable() and text == text.strip() and not _RICH_SYNTAX.search(text)


def plain_lines(table: Table, width: int) -> list[str] | None:
    """The lines rich prints for ``table`` on an uncoloured console ``width`` columns wide, or
    ``None`` when rich would do more than lay out plain strings (module contract)."""
    texts = [table.title, *table.columns, *(c for row in table.rows for c in row)]
    if not table.rows or not table.columns or not all(_plain(t) for t in texts):
        return None
    widths = [max(len(name), *(len(row[i]) for row in table.rows)) for i, name in enumerate(table.columns)]
    total = sum(widths) + 3 * len(widths) + 1
    if total > width or len(table.title) > total:
        return None

    def line(left: str, fill: str, cross: str, right: str) -> str:
        return left + cross.join(fill * (w + 2) for w in widths) + right

    def cells(values: list[str], bar: str) -> str:
        parts = (v.ljust(w) if side == "left" else v.rjust(w)
                 for v, w, side in zip(values, widths, table.justify))
        return bar + bar.join(f" {p} " for p in parts) + bar

    out = []
    if table.title:
        pad = total - len(table.title)
        out.append(" " * (pad // 2) + table.title + " " * (pad - pad // 2))
    out.append(line("┏", "━", "┳", "┓"))
    out.append(cells(table.columns, "┃"))
    out.append(line("┡", "━", "╇", "┩"))
    out.extend(cells(row, "│") for row in table.rows)
    out.append(line("└", "─", "┴", "┘"))
    return out
