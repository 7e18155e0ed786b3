"""specbound/planning.py and ``specbound plan``: the n at which each route's float estimate reaches a
target, checked against the float bound evaluated at that n by a separate path (the margins spread over
n written out as an array, :func:`specbound.numeric.bound.evaluate`)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import specbound
from specbound.cli import main
from specbound.errors import SpecboundError
from specbound.planning import PLAN_ROUTES, smallest_n
from specbound.plan import BoundSettings
from specbound.vocabulary import ROUTE_OCCAM, ROUTE_RADEMACHER, ROUTES

TINY = {"num_layers": 1, "num_heads": 1, "width": 4, "head_dim": 1, "ff_dim": 2}


# -- the search ------------------------------------------------------------------------------------

def test_the_search_finds_the_first_n_of_a_decreasing_estimate():
    assert smallest_n(lambda n: 100.0 / n, 0.5) == 200
    assert smallest_n(lambda n: 100.0 / n, 0.5, max_n=199) is None
    assert smallest_n(lambda n: 0.1, 0.5) == 1
    assert smallest_n(lambda n: 1.0 / math.sqrt(n), 0.01, max_n=10**12) == 10**4


def test_the_search_returns_a_crossing_even_when_the_estimate_is_not_monotone():
    f = lambda n: 0.2 if n in (3, 4) else (1.0 if n < 50 else 0.1)  # noqa: E731
    n = smallest_n(f, 0.5, max_n=100)
    assert f(n) <= 0.5 < f(n - 1)


# -- the plan against an independent evaluation ----------------------------------------------------

@pytest.fixture(scope="module")
def tiny_plan():
    return specbound.plan_n(architecture=TINY, target=[0.5, 0.3, 0.2], error=0.01)


def test_the_planned_n_grows_as_the_target_falls(tiny_plan):
    for route in PLAN_ROUTES:
        ns = [tiny_plan.n(t, route) for t in (0.5, 0.3, 0.2)]
        assert all(isinstance(n, int) for n in ns) and ns[0] < ns[1] < ns[2], (route, ns)
    for t in (0.5, 0.3, 0.2):
        assert tiny_plan.n(t) == min(tiny_plan.n(t, ROUTE_OCCAM), tiny_plan.n(t, ROUTE_RADEMACHER))


def _independent(weights, margins_at, n, delta=0.05):
    """Both routes' float estimates at n from the array of margins, by numeric.bound.evaluate."""
    from specbound.numeric.bound import evaluate

    result = evaluate(weights, BoundSettings(n=n, delta=delta, routes=ROUTES), margins=margins_at(n))
    return {ROUTE_RADEMACHER: result.bound, ROUTE_OCCAM: result.plan.occam.notes["estimate"],
            "count": result.plan.occam.notes["count"]}


def test_the_planned_n_is_where_the_float_bound_crosses_the_target(tiny_plan):
    from specbound.planning import architecture_of, initialised_weights

    weights = initialised_weights(architecture_of(TINY))
    level = 0.5 * float(np.linalg.norm(weights.readout))

    def margins_at(n):  # 1% of the examples at -level, the rest at +level, spread over n (ceil rounding)
        wrong = math.ceil(n / 100)
        return np.concatenate([np.full(wrong, -level), np.full(n - wrong, level)])

    for route in (ROUTE_OCCAM, ROUTE_RADEMACHER):
        n = tiny_plan.n(0.3, route)
        at, before = _independent(weights, margins_at, n), _independent(weights, margins_at, n - 1)
        assert at[route] <= 0.3 < before[route], (route, n, at[route], before[route])
        row = next(r for r in tiny_plan.rows if r["target"] == 0.3 and r["route"] == route)
        assert row["estimate"] == pytest.approx(at[route], rel=1e-9)
    occ = next(r for r in tiny_plan.rows if r["target"] == 0.3 and r["route"] == ROUTE_OCCAM)
    assert occ["occam_count"] == math.ceil(occ["n"] / 100)  # the assumed 1% error at that n


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    """A briefly trained pilot model, saved, and a pilot sample of its task."""
    import torch

    from specbound.model import AnalysisTransformer, Architecture
    from specbound.tasks import get_task

    task = get_task("sparse_majority", seq_len=6, k=3)
    tokens, labels = task.sample(300, np.random.default_rng(4))
    model = AnalysisTransformer(Architecture(1, 2, 6, 2, 4, task.vocab_size, task.seq_len), init_seed=1)
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    X, y = torch.from_numpy(tokens), torch.from_numpy(labels.astype(np.float64))
    for _ in range(30):
        loss = torch.nn.functional.softplus(-y * model(X)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    path = tmp_path_factory.mktemp("pilot") / "pilot.safetensors"
    model.save(path)
    return model, str(path), {"tokens": tokens, "labels": labels}


def test_a_pilot_model_plans_from_its_own_margins_and_norms(pilot):
    from specbound.checkpoint import load_weights
    from specbound.estimate import float_margins_of
    from specbound.data_source import as_dataset

    model, path, data = pilot
    plan = specbound.plan_n(path, target=0.5, data=data)
    weights = load_weights(path)
    q = np.sort(float_margins_of(weights, as_dataset(data)))
    margins_at = lambda n: q[(np.arange(n) * q.size) // n]  # noqa: E731  (the definition, written out)
    assert plan.pilot["kind"] == "pilot" and plan.pilot["m"] == 300
    assert 0.0 < plan.pilot["error"] < 0.5
    n = plan.n(0.5, ROUTE_OCCAM)
    at, before = _independent(weights, margins_at, n), _independent(weights, margins_at, n - 1)
    assert at[ROUTE_OCCAM] <= 0.5 < before[ROUTE_OCCAM]
    row = next(r for r in plan.rows if r["route"] == ROUTE_OCCAM)
    assert row["occam_count"] == at["count"]
    assert any("pilot" in a for a in plan.assumptions)
    # the module itself is read through the same loaders: the same plan
    assert specbound.plan_n(model, target=0.5, data=data).rows == plan.rows


def test_a_model_without_a_pilot_sample_assumes_its_margins_and_says_so(pilot):
    _, path, _ = pilot
    plan = specbound.plan_n(path, target=0.5)
    assert plan.pilot["kind"] == "assumed" and "no pilot sample" in plan.pilot["why"]
    assert any("assumed" in a and "0.5 ||w||" in a for a in plan.assumptions)


def test_an_architecture_plan_states_its_assumptions(tiny_plan):
    text = " ".join(tiny_plan.assumptions)
    assert "initialisation" in text and "assumed" in text and "delta/2" in text
    doc = tiny_plan.to_dict()
    assert doc["kind"] == "estimate" and "not bounds" in doc["note"]
    assert tiny_plan.parameters == 1 * (2 * 4 + 2 * 4 + 2 * 4 * 2) + 4
    assert {r["route"] for r in doc["plans"]} == set(PLAN_ROUTES)


def test_the_plan_is_a_data_frame(tiny_plan):
    pytest.importorskip("pandas")
    frame = tiny_plan.to_dataframe()
    assert len(frame) == 9 and {"target", "route", "n", "n_per_parameter", "estimate"} <= set(frame.columns)


def test_a_target_out_of_reach_is_not_reached():
    plan = specbound.plan_n(architecture=TINY, target=0.05, error=0.1, max_n=10**6)
    assert plan.n(0.05, ROUTE_OCCAM) is None and plan.n(0.05) is None


# -- k read-out rows: the k-class theorem -----------------------------------------------------------

@pytest.fixture(scope="module")
def kclass_pilot():
    """A briefly trained k = 3 pilot (cross-entropy on f) and its pilot sample: the class is the most
    frequent of the symbols 0, 1, 2 (ties to the smallest)."""
    import torch

    from specbound.nn import AnalysisTransformer

    rng = np.random.default_rng(7)
    tokens = rng.integers(0, 3, size=(240, 5))
    labels = np.argmax(np.stack([(tokens == c).sum(axis=1) for c in range(3)], axis=1), axis=1)
    model = AnalysisTransformer(num_layers=1, num_heads=2, width=6, head_dim=2, ff_dim=4, vocab_size=3, seq_len=5,
                                num_outputs=3, variant="residual", init_seed=2)
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    X, y = torch.from_numpy(tokens), torch.from_numpy(labels)
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(X), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, {"tokens": tokens, "labels": labels}


def test_a_k_class_pilot_plans_with_the_k_class_theorem(kclass_pilot):
    """The estimate at the planned n is the k-class theorem's float evaluation there (numeric.bound
    selects the kclass_ twins from the weights' k rows, as certify does), and the margins are
    f_y - max_{c != y} f_c written out by hand from the torch outputs."""
    import torch

    from specbound.checkpoint import load_weights
    from specbound.module_source import readable

    model, data = kclass_pilot
    plan = specbound.plan_n(model, target=0.5, data=data)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        weights = load_weights(readable(model, folder))
    assert weights.num_outputs == 3
    with torch.no_grad():
        f = model(torch.from_numpy(data["tokens"])).double().numpy()
    y = data["labels"]
    others = np.where(np.arange(3)[None, :] == y[:, None], -np.inf, f)
    q = np.sort(f[np.arange(y.size), y] - others.max(axis=1))
    assert plan.pilot["error"] == pytest.approx(float(np.mean(q <= 0)))
    margins_at = lambda n: q[(np.arange(n) * q.size) // n]  # noqa: E731
    for route in (ROUTE_OCCAM, ROUTE_RADEMACHER):
        n = plan.n(0.5, route)
        assert n is not None, route
        at, before = _independent(weights, margins_at, n), _independent(weights, margins_at, n - 1)
        assert at[route] <= 0.5 < before[route], (route, n, at[route], before[route])
        row = next(r for r in plan.rows if r["route"] == route)
        assert row["estimate"] == pytest.approx(at[route], rel=1e-6)
    # the binary theorem at the same n would give a different (smaller) estimate: the k rows are used
    from specbound.numeric.evaluation import evaluate_facts
    from specbound.numeric.margin_sample import MarginSample
    from specbound.numeric.planner import plan_for
    from specbound.numeric.terms import compiled_theorem, network_facts

    n = plan.n(0.5, ROUTE_RADEMACHER)
    settings = BoundSettings(n=n, delta=0.05, routes=ROUTES)
    binary = compiled_theorem(settings, weights.activation, weights.variant, 1)
    facts, sample = network_facts(weights), MarginSample.expanded(q, n)
    wrong = evaluate_facts(binary, facts, settings, plan_for(binary, facts, settings, sample), margins=sample)
    assert wrong.bound < next(r for r in plan.rows if r["route"] == ROUTE_RADEMACHER)["estimate"]


def test_a_k_class_architecture_is_planned_at_its_largest_row_norm():
    from specbound.planning import architecture_of, initialised_weights

    weights = initialised_weights(architecture_of({**TINY, "num_outputs": 4}))
    assert np.shape(weights.readout) == (4, TINY["width"])
    largest = max(math.sqrt(sum(float(v) ** 2 for v in row)) for row in np.asarray(weights.readout))
    plan = specbound.plan_n(architecture={**TINY, "num_outputs": 4}, target=0.5, error=0.01)
    assert f"{largest:.4g}" in " ".join(plan.assumptions) and "largest row norm" in " ".join(plan.assumptions)
    assert plan.parameters == specbound.plan_n(architecture=TINY, target=0.5).parameters + 3 * TINY["width"]
    assert plan.n(0.5) > specbound.plan_n(architecture=TINY, target=0.5, error=0.01).n(0.5)


# -- bad input -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    ({"architecture": TINY, "target": 1.5}, "(0, 1)"),
    ({"architecture": TINY, "target": []}, "at least one target"),
    ({"architecture": TINY, "target": "x"}, "target"),
    ({"architecture": {**TINY, "depth": 3}}, "unknown key 'depth'"),
    ({"architecture": {"num_layers": 2}}, "give num_heads"),
    ({"architecture": {**TINY, "num_outputs": 0}}, "num_outputs"),
    ({"architecture": {**TINY, "width": 0}}, "width"),
    ({"architecture": TINY, "margin": 0.0}, "margin"),
    ({"architecture": TINY, "margin": 1.5}, "margin"),
    ({"architecture": TINY, "error": 1.0}, "error"),
    ({"architecture": TINY, "delta": 2.0}, "delta"),
    ({"architecture": TINY, "data": {"labels": [1], "tokens": [[0]]}}, "pilot sample needs a pilot model"),
    ({"model": "x.safetensors", "architecture": TINY}, "not both"),
    ({"architecture": TINY, "max_n": 0}, "max_n"),
])
def test_bad_planner_input_is_one_clear_error(kwargs, words):
    with pytest.raises(SpecboundError) as ei:
        specbound.plan_n(**kwargs)
    assert words in str(ei.value) and "\n" not in str(ei.value)


# -- the command -----------------------------------------------------------------------------------

ARCH_FLAGS = ["--layers", "1", "--heads", "1", "--width", "4", "--head-dim", "1", "--ff-dim", "2"]


def test_plan_json_gives_n_per_route_and_target(capsys):
    assert main(["plan", *ARCH_FLAGS, "--target", "0.5", "0.3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "estimate" and len(doc["plans"]) == 6
    ns = {(p["target"], p["route"]): p["n"] for p in doc["plans"]}
    assert ns[(0.3, "smaller")] > ns[(0.5, "smaller")] >= 1


def test_plan_prints_a_table_of_estimates_under_its_assumptions(capsys):
    assert main(["plan", *ARCH_FLAGS, "--target", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "ESTIMATES, NOT BOUNDS" in out and "Occam route" in out and "Rademacher route" in out
    assert "initialisation" in out and "/param" in out


@pytest.mark.parametrize("argv, words", [
    (["plan", *ARCH_FLAGS, "--target", "2"], "(0, 1)"),
    (["plan", *ARCH_FLAGS, "--target", "abc"], "--target must be a number"),
    (["plan", "--layers", "2"], "give --heads --width --head-dim --ff-dim"),
    (["plan", "model.safetensors", *ARCH_FLAGS], "not both"),
    (["plan", *ARCH_FLAGS, "--margin", "0"], "margin"),
    (["plan", *ARCH_FLAGS, "--outputs", "0"], "--outputs must be >= 1"),
    (["plan", *ARCH_FLAGS, "--data", "d.npz"], "pilot sample needs a pilot model"),
    (["plan", *ARCH_FLAGS, "--variant", "bogus"], "variant"),
])
def test_bad_plan_input_is_one_line_and_exit_status_2(capsys, argv, words):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and err.count("\n") == 0 and words in err and "Traceback" not in err
