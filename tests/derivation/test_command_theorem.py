"""``specbound theorem``: renders, accepts overrides, rejects bad input with one line."""

import subprocess
import sys

from specbound.cli import main


def test_text_output_is_the_rendering(capsys):
    assert main(["theorem"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("specbound: spectrum-adaptive")
    assert "variants: massart=centred, dudley=centred" in out


def test_override_is_shown(capsys):
    assert main(["theorem", "--format", "markdown", "--set", "C_sm=2"]) == 0
    assert "constant C_sm: $2$ (user override)" in capsys.readouterr().out


def test_bad_override_is_one_error_line(capsys):
    assert main(["theorem", "--set", "C_sm=-3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specbound: error: override C_sm")


def test_theorem_command_does_not_import_torch():
    code = ("import sys, io, contextlib; from specbound.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(['theorem'])\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_model_option_renders_each_variant(capsys):
    from specbound.derivation.render import render
    from specbound.derivation.theorem import assemble

    for option, model in (("analysis", "plain"), ("residual", "residual"), ("causal", "causal"),
                          ("ls", "ls"), ("ls_residual", "ls_residual")):
        assert main(["theorem", "--model", option, "--activation", "silu", "--format", "latex"]) == 0
        assert capsys.readouterr().out == render(assemble(model=model, activation="silu"), "latex")


def test_rho_R_override_outside_rotary_models_is_one_error_line(capsys):
    assert main(["theorem", "--set", "rho_R=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rho_R" in err[0]


def test_classes_option_renders_the_k_class_theorem_and_one_the_binary_one(capsys):
    from pathlib import Path

    golden = Path(__file__).parent / "golden"
    assert main(["theorem", "--classes", "3"]) == 0
    assert capsys.readouterr().out == (golden / "theorem_kclass.txt").read_text(encoding="utf-8")
    assert main(["theorem", "--classes", "5", "--route", "both", "--format", "markdown"]) == 0
    assert capsys.readouterr().out == (golden / "theorem_both_kclass.md").read_text(encoding="utf-8")
    assert main(["theorem", "--classes", "1"]) == 0
    assert capsys.readouterr().out == (golden / "theorem.txt").read_text(encoding="utf-8")
    assert main(["theorem", "--classes", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "classes must be an integer k >= 1" in err[0]
