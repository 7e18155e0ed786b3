"""Deterministic renderings of the assembled theorem: text, markdown, LaTeX.

Layout: the variants and constants in force, then each lemma of the register (assumptions,
statement, named constants, covering term, proof note), then every assembled expression of
:class:`~specbound.derivation.theorem.Theorem` (the Rademacher route), of an
:class:`~specbound.derivation.routes.OccamTheorem` (the Occam route), or of both
:class:`~specbound.derivation.routes.Routes` (one section per route and the reported minimum).  The
output depends only on the assembled object (SymPy's printers order terms canonically), so it is
stable enough to be a golden file.
"""

from __future__ import annotations

import sympy as sp

from .routes import OccamTheorem, Routes
from .theorem import Theorem, assemble

FORMATS = ("text", "markdown", "latex")

_TITLE = "specbound: spectrum-adaptive post hoc generalization bound (assembled from lemma objects)"
_OCCAM_TITLE = ("specbound: Occam route, a union over the same cover's centres with a margin count and "
                "the binomial tail (assembled from lemma objects)")
_BOTH_TITLE = ("specbound: two routes on one sample, each at delta/2; the smaller bound is reported "
               "(assembled from lemma objects)")
_SUMS = ("Sums over the J covered matrices are summand + combiner: T_sum, D_sum, H_total, U_total, "
         "Lambda_sum, T4_sum stand for the sum over matrices of the corresponding per-matrix field.")
_OCCAM_SUMS = ("Sums over the J covered matrices are summand + combiner: Omega_sum, H_sum, Lambda_sum stand for "
               "the sum over matrices of weight (or weight_rank), entropy_matrix (or entropy_matrix_rank) and "
               "lambda_matrix (or lambda_matrix_rank); vartheta = share, H_theta = H_total, C = confidence_mass.")
_BOTH_SUMS = ("confidence_half and bound_half are the Rademacher route's confidence term and bound at delta/2 "
              "(its other fields as above, at delta); the Occam route above runs at delta/2 (log 2 in "
              "confidence_mass); reported is the smaller of the two bounds.")


def _text(e) -> str:
    return sp.sstr(e, order="lex") if isinstance(e, sp.Basic) else str(e)


def _tex(e) -> str:
    return sp.latex(e, order="lex") if isinstance(e, sp.Basic) else str(e)


def _head(th) -> list[tuple[str, str]]:
    variants = ", ".join(f"{k}={v}" for k, v in th.variants.items())
    consts = [(k, v, "user override" if k in th.overridden else "proved") for k, v in th.constants.items()]
    return [("variants", variants)] + [(f"constant {k}", (v, how)) for k, v, how in consts]


def _document(th) -> tuple[str, list[tuple[str, str, list]]]:
    """Title and sections ``(heading, note, [(name, expression)])`` of a Theorem, an OccamTheorem or
    both Routes; the head and the lemma list come from the object itself."""
    if isinstance(th, Routes):
        split = [("confidence_half", th.confidence), ("bound_half", th.rademacher_bound),
                 ("reported", th.reported)]
        return _BOTH_TITLE, [
            ("Assembled theorem: Rademacher route", _SUMS, list(th.rademacher.items())),
            ("Assembled theorem: Occam route", _OCCAM_SUMS, list(th.occam.items())),
            ("Reported bound", _BOTH_SUMS, split),
        ]
    if isinstance(th, OccamTheorem):
        return _OCCAM_TITLE, [("Assembled theorem", _OCCAM_SUMS, list(th.items()))]
    return _TITLE, [("Assembled theorem", _SUMS, list(th.items()))]


def render(theorem: Theorem | OccamTheorem | Routes | None = None, fmt: str = "text") -> str:
    """The theorem as a string in ``fmt`` (one of :data:`FORMATS`), ending with a newline.

    ``theorem``: a :class:`Theorem` (the Rademacher route, default :func:`assemble`), an
    :class:`~specbound.derivation.routes.OccamTheorem` or :class:`~specbound.derivation.routes.Routes`."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
    th = theorem if theorem is not None else assemble()
    return {"text": _render_text, "markdown": _render_markdown, "latex": _render_latex}[fmt](th)


def to_dict(theorem: Theorem | OccamTheorem | Routes | None = None) -> dict:
    """The theorem as a JSON-able dict (``specbound theorem --json``): the same content as
    :func:`render`, every expression both as SymPy text and as LaTeX."""
    th = theorem if theorem is not None else assemble()
    title, sections = _document(th)

    def expr(e) -> dict:
        return {"text": _text(e), "latex": _tex(e)}

    head = _head(th)
    return {
        "title": title,
        "variants": dict(th.variants),
        "constants": {key[len("constant "):]: {**expr(val[0]), "source": val[1]}
                      for key, val in head if key != "variants"},
        "lemmas": [{"name": lem.name, "proof_note": lem.proof_note, "source": lem.source,
                    "assumptions": list(lem.assumptions),
                    "statement": None if lem.statement is None else expr(lem.statement),
                    "constants": {name: expr(val) for name, val in lem.constants.items()},
                    "covering": None if lem.covering is None else expr(lem.covering)}
                   for lem in th.lemmas.values()],
        "sections": [{"heading": heading, "note": note, "expressions": {name: expr(e) for name, e in items}}
                     for heading, note, items in sections],
    }


def _render_text(th) -> str:
    title, sections = _document(th)
    out = [title, "=" * len(title), ""]
    for key, val in _head(th):
        if key == "variants":
            out.append(f"{key}: {val}")
        else:
            out.append(f"{key} = {_text(val[0])}  [{val[1]}]")
    out += ["", "Lemmas", "------"]
    for lem in th.lemmas.values():
        out.append(f"* {lem.name}  (proof: {lem.proof_note}; source: {lem.source})")
        for a in lem.assumptions:
            out.append(f"    assumes: {a}")
        if lem.statement is not None:
            out.append(f"    statement: {_text(lem.statement)}")
        for name, val in lem.constants.items():
            out.append(f"    {name} = {_text(val)}")
        if lem.covering is not None:
            out.append(f"    covering (log N <=): {_text(lem.covering)}")
    for heading, note, items in sections:
        out += ["", heading, "-" * len(heading), note]
        for name, expr in items:
            out.append(f"{name} = {_text(expr)}")
    return "\n".join(out) + "\n"


def _render_markdown(th) -> str:
    title, sections = _document(th)
    out = [f"# {title}", ""]
    for key, val in _head(th):
        if key == "variants":
            out.append(f"- {key}: {val}")
        else:
            out.append(f"- {key}: ${_tex(val[0])}$ ({val[1]})")
    out += ["", "## Lemmas", ""]
    for lem in th.lemmas.values():
        out.append(f"### `{lem.name}`")
        out.append("")
        out.append(f"Proof note: [{lem.proof_note}]({lem.proof_note}). Source: {lem.source}.")
        out.append("")
        for a in lem.assumptions:
            out.append(f"- assumes: {a}")
        if lem.statement is not None:
            out.append(f"- statement: ${_tex(lem.statement)}$")
        for name, val in lem.constants.items():
            out.append(f"- `{name}` $= {_tex(val)}$")
        if lem.covering is not None:
            out.append(f"- covering: $\\log N \\le {_tex(lem.covering)}$")
        out.append("")
    for i, (heading, note, items) in enumerate(sections):
        out += ([""] if i else []) + [f"## {heading}", "", note, ""]
        for name, expr in items:
            out.append(f"- `{name}` $= {_tex(expr)}$")
    return "\n".join(out) + "\n"


_TEX_SPECIALS = {"\\": r"\textbackslash{}", "_": r"\_", "^": r"\^{}", "&": r"\&", "%": r"\%",
                 "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                 "<": r"\textless{}", ">": r"\textgreater{}"}


def _esc(text: str) -> str:
    """Plain text -> LaTeX text mode (every special character escaped)."""
    return "".join(_TEX_SPECIALS.get(ch, ch) for ch in text)


def _render_latex(th) -> str:
    title, sections = _document(th)
    out = [r"\section*{" + _esc(title) + "}", r"\begin{itemize}"]
    for key, val in _head(th):
        if key == "variants":
            out.append(r"\item " + _esc(f"{key}: {val}"))
        else:
            out.append(r"\item " + _esc(key) + f": ${_tex(val[0])}$ ({val[1]})")
    out += [r"\end{itemize}", r"\subsection*{Lemmas}"]
    for lem in th.lemmas.values():
        out.append(r"\paragraph{\texttt{" + _esc(lem.name) + "}} Proof note: \\texttt{"
                   + _esc(lem.proof_note) + "}. Source: " + _esc(lem.source) + ".")
        out.append(r"\begin{itemize}")
        for a in lem.assumptions:
            out.append(r"\item assumes: " + _esc(a))
        if lem.statement is not None:
            out.append(f"\\item statement: ${_tex(lem.statement)}$")
        for name, val in lem.constants.items():
            out.append(r"\item \texttt{" + _esc(name) + "} $= " + _tex(val) + "$")
        if lem.covering is not None:
            out.append(f"\\item covering: $\\log N \\le {_tex(lem.covering)}$")
        out.append(r"\end{itemize}")
    for heading, note, items in sections:
        out += [r"\subsection*{" + _esc(heading) + "}", _esc(note), r"\begin{itemize}"]
        for name, expr in items:
            out.append(r"\item \texttt{" + _esc(name) + "} $= " + _tex(expr) + "$")
        out.append(r"\end{itemize}")
    return "\n".join(out) + "\n"
