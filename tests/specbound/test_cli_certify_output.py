"""What ``specbound certify`` prints and how much: the headline first and last, ``--quiet`` /
``--verbose`` / ``--explain``, whole lines off a terminal, the read-out of a checkpoint with its own
head, and the word on what a pretrained checkpoint's number is (``certify`` and ``inspect``)."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from specbound.cli import main

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

BERT = dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=6, intermediate_size=32, vocab_size=30)
BERT_MATRICES = 2 * (2 * 6 + 2)  # per layer: QK and V_tilde per head, M_in, M_out


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _save(folder, cls: str, **kwargs):
    torch.manual_seed(0)
    model = getattr(transformers, cls)(transformers.BertConfig(**BERT), **kwargs)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    """A tiny BertForSequenceClassification: pooler and classifier head in the checkpoint."""
    return _save(tmp_path_factory.mktemp("bert_cls"), "BertForSequenceClassification")


@pytest.fixture(scope="module")
def headless_dir(tmp_path_factory):
    """A tiny BertModel without its pooler: no head at all."""
    return _save(tmp_path_factory.mktemp("bert_bare"), "BertModel", add_pooling_layer=False)


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip()]


def _scope_lines(capsys, *argv) -> list[str]:
    from specbound.scope import scope_lines

    code, out, _ = run(capsys, "certify", *argv, "--json")
    assert code == 0
    return scope_lines(json.loads(out)["scope"])


# ------------------------------------------------------------------------- how much is printed


def test_quiet_prints_the_headline_first_and_last_and_the_scope_between(capsys):
    argv = ("--samples", "16")
    scope = _scope_lines(capsys, *argv)
    code, out, _ = run(capsys, "certify", *argv, "--quiet")
    lines = _lines(out)
    assert code == 0
    assert lines[0].startswith("certified bound on the 0-1 risk:") and lines[-1] == lines[0]
    assert lines[1].startswith("checkpoint: ") and lines[2:-1] == scope  # the embedded default: no pretrained word
    assert not any(word in out for word in ("per-matrix", "time:", "complexity", "legend"))


def test_the_default_prints_the_parts_after_the_headline_and_repeats_it_last(capsys):
    code, out, _ = run(capsys, "certify", "--samples", "16")
    lines = _lines(out)
    assert code == 0 and lines[-1] == lines[0] and lines[0].startswith("certified bound on the 0-1 risk:")
    assert lines[1].startswith("  Occam route") and lines[4].startswith("  Rademacher route")
    assert any(line.startswith("  complexity 2min(SS,DD)") for line in lines[:10])
    assert "per-matrix (certified upper endpoints)" in out  # 12 matrices: one row each
    assert "--explain" in out and "legend" not in out


def test_a_large_model_gets_one_row_per_kind_and_verbose_one_row_per_matrix(capsys, classifier_dir):
    argv = ("certify", str(classifier_dir), "--n", "1000")
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "per matrix kind" in out and "per-matrix (" not in out
    assert f"{BERT_MATRICES} matrices, one row per kind; --verbose prints one row per matrix" in out
    kinds = _table_rows(out)
    assert [r[0] for r in kinds] == ["QK", "V_tilde", "M_in", "M_out"]
    code, full, _ = run(capsys, *argv, "--verbose")
    rows = _table_rows(full)
    assert code == 0 and len(rows) == BERT_MATRICES and "legend (" in full
    code, doc, _ = run(capsys, *argv, "--json")
    matrices = json.loads(doc)["matrices"]
    for kind_row in kinds:
        kind, count, layers, spectral, _p, rank, contribution = kind_row
        mine = [m for m in matrices if m["type"] == kind_row[0]]
        assert int(count) == len(mine) and layers == "0..1"
        # the largest spectral norm is the largest of the per-matrix rows (both rounded up to 6 digits)
        assert float(spectral) == max(float(r[3]) for r in rows if r[0] == kind)
        assert int(rank) == max(m["proven_rank"] for m in mine)
        # an Arb sum, printed >= its upper end: at least the sum of the lower ends, near the uppers' sum
        low = sum(m["contribution_lower"] for m in mine)
        high = sum(m["contribution_upper"] for m in mine)
        assert low <= float(contribution) <= high * (1 + 1e-5)


def _table_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("│ ").split("│")] for line in out.splitlines()
            if line.startswith("│")]


def test_explain_says_what_every_symbol_of_the_output_means(capsys):
    code, out, _ = run(capsys, "certify", "--samples", "16", "--explain")
    assert code == 0
    legend = out.split("legend (", 1)[1].splitlines()[1:]
    symbols = {line.split()[0] for line in legend if line.startswith("  ")}
    for symbol in ("SS", "DD", "Lambda", "rho~", "gamma~", "K^", "H", "C", "grid", "p", "delta", "H_j"):
        assert symbol in symbols, symbol
    assert _lines(out)[-1] == _lines(out)[0]  # the headline still comes last


def test_quiet_and_verbose_together_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:  # argparse's usage error
        main(["certify", "--samples", "16", "--quiet", "--verbose"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--quiet" in err and "--verbose" in err


def test_json_is_the_certificate_whatever_the_detail_flags(capsys):
    argv = ("certify", "--n", "1000", "--empirical-loss", "0", "--margin", "1", "--json")
    docs = []
    for extra in ((), ("--quiet",), ("--verbose", "--explain")):
        code, out, _ = run(capsys, *argv, *extra)
        assert code == 0
        docs.append(json.loads(out))
    assert docs[0] == docs[1] == docs[2]


def test_no_line_is_wrapped_when_stdout_is_not_a_terminal(capsys, classifier_dir):
    argv = (str(classifier_dir), "--n", "1000")
    scope = _scope_lines(capsys, *argv)
    assert max(len(line) for line in scope) > 160  # rich's width off a terminal: these would wrap
    code, out, _ = run(capsys, "certify", *argv)
    printed = out.splitlines()
    assert code == 0
    for line in scope:
        assert line in printed, line


# ------------------------------------------------------------------------- the checkpoint's own head


def test_the_scope_names_the_classifier_head_the_analysis_model_does_not_use(capsys, classifier_dir):
    code, out, _ = run(capsys, "certify", str(classifier_dir), "--n", "1000", "--quiet")
    readout = next(line for line in out.splitlines() if line.startswith("  read-out:"))
    assert code == 0
    assert "none in the checkpoint" not in readout
    assert "BertForSequenceClassification" in readout and "classifier.weight 2x24" in readout
    assert "bert.pooler.dense.weight 24x24" in readout
    assert "NOT used; instead the analysis model reads out the first token (CLS, position 0) with a fixed unit vector w" in readout
    code, text, _ = run(capsys, "inspect", str(classifier_dir), "--json")
    doc = json.loads(text)
    assert doc["tensors_ignored"]["classifier.weight"]["reason"].startswith("pooler or task head")
    assert "classifier.weight 2x24" in doc["scope"]["readout"] and "classifier.weight" in doc["statement"]


def test_a_checkpoint_without_a_head_still_says_none_in_the_checkpoint(capsys, headless_dir):
    code, out, _ = run(capsys, "inspect", str(headless_dir), "--json")
    readout = json.loads(out)["scope"]["readout"]
    assert code == 0 and readout.startswith("none in the checkpoint: the analysis model reads out")


# ------------------------------------------------------------------------- what a pretrained checkpoint's number is


def test_certify_and_inspect_say_what_a_pretrained_checkpoints_number_is(capsys, classifier_dir):
    for argv in (("certify", str(classifier_dir), "--n", "1000", "--quiet"), ("inspect", str(classifier_dir))):
        code, out, _ = run(capsys, *argv)
        note = [line for line in out.splitlines() if line.startswith("what ")]
        assert code == 0 and len(note) == 1, argv
        assert "ANALYSIS MODEL" in note[0] and "NOT a bound on the checkpoint's own network" in note[0]
        assert "docs/own_models.md" in out


def test_the_projects_own_model_gets_no_pretrained_word(capsys):
    from specbound.data import default_checkpoint_path

    for argv in (("certify", "--samples", "16"), ("inspect", str(default_checkpoint_path()))):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and "ANALYSIS MODEL" not in out, argv


def test_the_pretrained_word_points_to_a_document_that_exists():
    from pathlib import Path

    from specbound.scope import OWN_MODELS_POINTER

    root = Path(__file__).resolve().parents[2]
    doc = root / OWN_MODELS_POINTER.split(":")[0]
    assert doc.is_file() and "specbound.nn" in doc.read_text(encoding="utf-8")
    assert "specbound.nn" in OWN_MODELS_POINTER


# ------------------------------------------------------------------------- the real MiniLM-L6


@pytest.mark.minilm
def test_minilm_quiet_is_short_and_the_default_fits_a_screen(capsys, minilm_path):
    code, out, _ = run(capsys, "certify", minilm_path, "--n", "1000000", "--quiet")
    lines = _lines(out)
    assert code == 0 and lines[0] == lines[-1] and "NOT a bound" in lines[0] and len(lines) <= 20
    assert any("pooler.dense.weight 384x384) is NOT used" in line for line in lines)
    code, out, _ = run(capsys, "certify", minilm_path, "--n", "1000000")
    lines = _lines(out)
    assert code == 0 and lines[0] == lines[-1] and len(lines) <= 40
    assert "156 matrices, one row per kind" in out
    assert Fraction(1, 12) == Fraction(next(r for r in _table_rows(out) if r[0] == "M_in")[4])
