"""The rendered theorem is a golden file: any change to a lemma or the assembly shows up here.

Regenerate after an intended change with
    SPECBOUND_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/derivation/test_golden.py
"""

import os

import pytest

from specbound.derivation.render import FORMATS, render
from specbound.derivation.routes import assemble_occam, assemble_routes
from specbound.derivation.theorem import assemble, unified_diff

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
SUFFIX = {"text": "txt", "markdown": "md", "latex": "tex"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_rendering_matches_golden_file(fmt):
    path = os.path.join(GOLDEN, f"theorem.{SUFFIX[fmt]}")
    current = render(assemble(), fmt)
    if os.environ.get("SPECBOUND_UPDATE_GOLDEN") == "1":
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(current)
    with open(path, encoding="utf-8") as fh:
        golden = fh.read()
    if current != golden:
        pytest.fail(
            f"rendered theorem ({fmt}) differs from {path}:\n"
            + unified_diff(golden, current, (path, "current"))
            + "\nIf the change is intended, regenerate with\n"
            "  SPECBOUND_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/derivation/test_golden.py",
            pytrace=False,
        )


def test_rendering_is_deterministic():
    assert render(assemble(), "text") == render(assemble(), "text")


#: golden files of the model variants (file stem -> assemble keywords)
VARIANT_GOLDEN = {
    "theorem_causal": {"model": "causal"},
    "theorem_ls": {"model": "ls", "activation": "silu"},
    "theorem_ls_residual": {"model": "ls_residual", "activation": "silu"},
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("stem", sorted(VARIANT_GOLDEN))
def test_model_variant_rendering_matches_golden_file(stem, fmt):
    path = os.path.join(GOLDEN, f"{stem}.{SUFFIX[fmt]}")
    current = render(assemble(**VARIANT_GOLDEN[stem]), fmt)
    if os.environ.get("SPECBOUND_UPDATE_GOLDEN") == "1":
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(current)
    with open(path, encoding="utf-8") as fh:
        golden = fh.read()
    assert current == golden, unified_diff(golden, current, (path, "current"))


#: golden files of the Occam route and of both routes (file stem -> the assembled object)
ROUTE_GOLDEN = {
    "theorem_occam": lambda: assemble_occam(),
    "theorem_occam_ls": lambda: assemble_occam(model="ls", activation="silu"),
    "theorem_both": lambda: assemble_routes(),
    # the k-class theorem (proofs_notes/k_class.md): kappa doubled, the read-out over W in k N dimensions,
    # the Occam route's output cover at gamma/4 and read-out weight k N
    "theorem_kclass": lambda: assemble(classes="k"),
    "theorem_both_kclass": lambda: assemble_routes(classes="k"),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("stem", sorted(ROUTE_GOLDEN))
def test_route_rendering_matches_golden_file(stem, fmt):
    path = os.path.join(GOLDEN, f"{stem}.{SUFFIX[fmt]}")
    current = render(ROUTE_GOLDEN[stem](), fmt)
    if os.environ.get("SPECBOUND_UPDATE_GOLDEN") == "1":
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(current)
    with open(path, encoding="utf-8") as fh:
        golden = fh.read()
    assert current == golden, unified_diff(golden, current, (path, "current"))
