"""Deterministic renderings of the assembled theorem: text, markdown, LaTeX.

Layout: the variants and constants in force, then each lemma of the register (assumptions,
statement, named constants, covering term, proof note), then every assembled expression of
:class:`~specbound.derivation.theorem.Theorem`.  The output depends only on the Theorem (SymPy's
printers order terms canonically), so it is stable enough to be a golden file.
"""

from __future__ import annotations

import sympy as sp

from .theorem import Theorem, assemble

FORMATS = ("text", "markdown", "latex")

_TITLE = "specbound: spectrum-adaptive post hoc generalization bound (assembled from lemma objects)"
_SUMS = ("Sums over the J covered matrices are summand + combiner: T_sum, D_sum, H_total, U_total, "
         "Lambda_sum, T4_sum stand for the sum over matrices of the corresponding per-matrix field.")


def _text(e) -> str:
    return sp.sstr(e, order="lex") if isinstance(e, sp.Basic) else str(e)


def _tex(e) -> str:
    return sp.latex(e, order="lex") if isinstance(e, sp.Basic) else str(e)


def _head(th: Theorem) -> list[tuple[str, str]]:
    variants = ", ".join(f"{k}={v}" for k, v in th.variants.items())
    consts = [(k, v, "user override" if k in th.overridden else "proved") for k, v in th.constants.items()]
    return [("variants", variants)] + [(f"constant {k}", (v, how)) for k, v, how in consts]


def render(theorem: Theorem | None = None, fmt: str = "text") -> str:
    """The theorem as a string in ``fmt`` (one of :data:`FORMATS`), ending with a newline."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
    th = theorem if theorem is not None else assemble()
    return {"text": _render_text, "markdown": _render_markdown, "latex": _render_latex}[fmt](th)


def _render_text(th: Theorem) -> str:
    out = [_TITLE, "=" * len(_TITLE), ""]
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
    out += ["", "Assembled theorem", "-----------------", _SUMS]
    for name, expr in th.items():
        out.append(f"{name} = {_text(expr)}")
    return "\n".join(out) + "\n"


def _render_markdown(th: Theorem) -> str:
    out = [f"# {_TITLE}", ""]
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
    out += ["## Assembled theorem", "", _SUMS, ""]
    for name, expr in th.items():
        out.append(f"- `{name}` $= {_tex(expr)}$")
    return "\n".join(out) + "\n"


_TEX_SPECIALS = {"\\": r"\textbackslash{}", "_": r"\_", "^": r"\^{}", "&": r"\&", "%": r"\%",
                 "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                 "<": r"\textless{}", ">": r"\textgreater{}"}


def _esc(text: str) -> str:
    """Plain text -> LaTeX text mode (every special character escaped)."""
    return "".join(_TEX_SPECIALS.get(ch, ch) for ch in text)


def _render_latex(th: Theorem) -> str:
    out = [r"\section*{" + _esc(_TITLE) + "}", r"\begin{itemize}"]
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
    out += [r"\subsection*{Assembled theorem}", _esc(_SUMS), r"\begin{itemize}"]
    for name, expr in th.items():
        out.append(r"\item \texttt{" + _esc(name) + "} $= " + _tex(expr) + "$")
    out.append(r"\end{itemize}")
    return "\n".join(out) + "\n"
