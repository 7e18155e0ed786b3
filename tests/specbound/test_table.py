"""``specbound.table``: the plain lines are exactly what rich prints for the same table, or ``None``."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings, strategies as st
from rich.console import Console

from specbound.table import Table, plain_lines
from specbound.terminal import print_table


def rich_lines(table: Table, width: int) -> list[str]:
    """What rich itself prints for ``table`` on an uncoloured console (the reference)."""
    buf = io.StringIO()
    Console(file=buf, width=width, highlight=False, color_system=None, force_terminal=False).print(table.to_rich())
    return buf.getvalue().split("\n")[:-1]


# Mostly strings of the tables' own kind (digits, signs, dots, inner spaces); sometimes ones that matter
# to rich: colons (emoji codes), brackets (markup), outer spaces, non-ASCII.
PLAIN_TEXT = st.text(alphabet="ab1.-_()/+e x", max_size=12).map(str.strip)
TEXT = st.one_of(PLAIN_TEXT, PLAIN_TEXT, PLAIN_TEXT, PLAIN_TEXT, st.text(alphabet="a1:[] \u00e9", max_size=6))


@st.composite
def tables(draw) -> Table:
    text = TEXT if draw(st.booleans()) else PLAIN_TEXT  # half the tables hold strings of rich's syntax
    ncol = draw(st.integers(1, 6))
    table = Table(draw(text), [draw(text) for _ in range(ncol)],
                  [draw(st.sampled_from(["left", "right"])) for _ in range(ncol)])
    for _ in range(draw(st.integers(0, 4))):  # 0 rows: rich's business
        table.add_row(*[draw(text) for _ in range(ncol)])
    return table


@settings(max_examples=400, deadline=None)
@given(tables(), st.sampled_from([30, 60, 160]))
def test_plain_lines_are_rich_lines_or_none(table, width):
    lines = plain_lines(table, width)
    if lines is not None:
        assert lines == rich_lines(table, width)


def test_a_typical_numeric_table_takes_the_plain_path():
    table = Table("per-matrix", ["kind", "layer", "spectral norm"],
                  ["left", "right", "right"])
    for l in range(3):
        table.add_row("QK", str(l), f"{1.5 * l + 0.25:.6g}")
    lines = plain_lines(table, 160)
    assert lines is not None and lines == rich_lines(table, 160)
    assert lines[4] == "│ QK   │     0 │          0.25 │"


@pytest.mark.parametrize("cell", ["[bold]x", ":smile:", " padded", "caf\u00e9", "tab\there"])
def test_strings_rich_would_change_go_to_rich(cell):
    table = Table("t", ["a"], ["left"])
    table.add_row(cell)
    assert plain_lines(table, 160) is None


def test_too_wide_or_empty_tables_go_to_rich():
    wide = Table("t", ["a" * 50, "b" * 50], ["left", "left"])
    wide.add_row("1", "2")
    assert plain_lines(wide, 60) is None
    assert plain_lines(Table("t", ["a"], ["left"]), 160) is None


def test_rows_and_sides_are_checked():
    with pytest.raises(ValueError):
        Table("t", ["a", "b"], ["left"])
    with pytest.raises(ValueError):
        Table("t", ["a"], ["centre"])
    with pytest.raises(ValueError):
        Table("t", ["a"], ["left"]).add_row("1", "2")


def test_print_table_writes_what_rich_would_on_a_pipe():
    table = Table("title", ["x", "y"], ["left", "right"])
    table.add_row("a", "1")
    table.add_row("[b]", "2")  # markup: this table goes through rich
    for t in (table, Table("title", ["x"], ["left"], [["a"], ["b"]])):
        buf = io.StringIO()
        print_table(Console(file=buf, width=80, highlight=False, color_system=None), t)
        ref = io.StringIO()
        Console(file=ref, width=80, highlight=False, color_system=None).print(t.to_rich())
        assert buf.getvalue() == ref.getvalue()
