"""The scaling study as markdown, and its section in docs/experiments.md rewritten in place."""

from __future__ import annotations

from collections.abc import Sequence
import math
from pathlib import Path

from specbound.experiments.scaling import QUANTITIES, TRAINED_ACCURACY, trained
from specbound.train import RETRAIN_ADVICE
from specbound.output import write_text_atomic


BEGIN, END = "<!-- scaling-study:begin -->", "<!-- scaling-study:end -->"
"""The markers around the generated section of docs/experiments.md."""


def _g(x: float, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}g}"


def _estimate_cell(row: dict, key: str) -> str:
    value = row.get("estimates", {}).get(key)
    return "-" if value is None else _g(value, 4)


def scaling_markdown(study: dict, figures: Sequence[str] = ()) -> str:
    """The Markdown section (table, exponents, figure list) of a scaling study."""
    cfg = study["config"]
    base = cfg["base"]
    lines = [
        BEGIN,
        "## Depth/width scaling study",
        "",
        f"Task `{base['task']}` (seq_len {base['seq_len']}, k {base['k']}); H = {cfg['heads']} heads, "
        f"head_dim = {'N/H' if cfg.get('head_dim_rule') == 'full' else 'N/(2H)'}, d_ff = 2N; {base['steps']} Adam steps (lr {base['lr']}, batch {base['batch']}), "
        f"regulariser {base['reg_kind']} ({base['reg']}, p = {base['reg_p']}); n = n_train = {base['n_train']} "
        f"(the bound sample is the training sample); delta = {cfg['delta']}; test error on "
        f"{cfg['n_test']} fresh samples with the exact 95% Clopper-Pearson interval.",
        "",
        "The columns 2SS to `bound` are the **numeric** bound (float64, uncertified; same theorem, same "
        "planner as the certified path): `bound` = empirical + 2 min(SS, DD) + confidence; `2SS` is the "
        "single-scale complexity alone (often above 2, where the trivial Dudley value DD = 1 at alpha = "
        "1/4 caps the bound). `certified` is the certified bound of the same model from its training "
        "sample (upper endpoint of an Arb ball, empirical term certified on all of S; `-` where the study "
        "ran without `--bound certified`). The two proxies are the paper's formulas (docs/design.md "
        "section 6), **not bounds**. Rows marked *not trained* stayed below a training accuracy of "
        f"{TRAINED_ACCURACY} and are left out of the fits.",
        "",
        "`Occam est.` and `Rad. est.` are the two routes' float estimates at n (each at delta/2, as "
        "`certify` runs them; `specbound plan`'s estimator), not bounds.",
        "",
        "| L | N | params | train acc | test err (95% CP) | paper proxy | Edelman proxy | 2SS | 2DD | conf. | emp. | rho | bound | Occam est. | Rad. est. | certified |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in study["rows"]:
        t, nb = r["test"], r["numeric"]
        cert = r.get("certified")
        cert_cell = "-" if not cert else f"{_g(cert['value'], 4)}{' (vacuous)' if cert['vacuous'] else ''}"
        acc = f"{r['train_accuracy']:.4f}" + ("" if trained(r) else " *not trained*")
        lines.append(
            f"| {r['L']} | {r['N']} | {r['parameters']} | {acc} | "
            f"{t['errors']}/{t['n']} [{_g(t['lower'])}, {_g(t['upper'])}] | {_g(r['paper_ours'], 4)} | "
            f"{_g(r['paper_edelman'], 4)} | {_g(nb['complexity_ss'], 4)} | {_g(nb['complexity_dd'], 4)} | "
            f"{_g(nb['confidence'])} | {_g(nb['empirical'])} | {_g(nb['rho'])} | {_g(nb['bound'], 4)}{' (vacuous)' if nb['bound'] >= 1 else ''} | "
            f"{_estimate_cell(r, 'occam_estimate')} | {_estimate_cell(r, 'rademacher_estimate')} | {cert_cell} |")
    if any(not trained(r) for r in study["rows"]):
        lines += ["", f"Some models are *not trained*. {RETRAIN_ADVICE}"]
    lines += ["", "Fitted growth exponents, least squares `log v = c + a log L + b log N` over the trained "
              "models of the grid:", "",
              "| quantity | a (depth L) | b (width N) | rms residual (log) | points |", "|---|---|---|---|---|"]
    for key, label in QUANTITIES.items():
        e = study["exponents"][key]
        lines.append(f"| {label} | {_g(e['a_L'])} | {_g(e['b_N'])} | {_g(e['rms'], 2)} | {e['points']} |")
    if figures:
        lines += ["", "Figures:", ""] + [f"- `{f}`" for f in figures]
    lines += ["", END]
    return "\n".join(lines) + "\n"


def write_scaling_section(path: str | Path, section: str) -> None:
    """Put ``section`` into the Markdown file ``path`` between the scaling-study markers (replacing an
    older section, else appending; a missing file is created), atomically."""

    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Experiments\n\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    write_text_atomic(path, text)
