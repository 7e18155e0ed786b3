"""Reference experiments: the certified bound against the observed error of trained models.

One experiment (:func:`run_experiment`) trains an analysis-model Transformer on a synthetic task
(:mod:`specbound.train`, deterministic, CPU), then measures

* the **test error** on ``n_test`` fresh i.i.d. samples, with an exact Clopper-Pearson interval
  (:func:`clopper_pearson`);
* the **certified empirical ramp loss** on the *bound sample* ``S`` of size ``n``
  (:func:`specbound.certified.ramp_loss.certified_ramp_loss`);
* the **certified bound** of proofs_notes/theory.md section 7 with that same ``n``
  (:func:`specbound.pipeline.certify`), and its parts.

Which sample is ``S``.  ``sample="train"`` uses the training sample (``n = n_train``).
``sample="fresh"`` draws ``n`` new i.i.d. samples from the task, independent of training and of
the test sample.  Both are valid: the main theorem holds with probability ``>= 1 - delta`` over
the draw of ``S``, *simultaneously for all weights* (proofs_notes/theory.md sections 6-7), so weights fitted on
another sample are covered too, and ``n`` may exceed the training set.  The empirical term and the
complexity term always use the same ``S`` and the same ``n``.

The depth/width study (:func:`scaling_study`) trains a grid of models, records the paper's
proxies (:mod:`specbound.numeric.proxies`, *not* bounds), our bound and the test error, and fits
growth exponents ``value ~ L^a N^b`` by least squares on the logarithms (:func:`fit_exponents`).
"""

from __future__ import annotations

# The implementation lives in the package specbound.experiments (one module per concern); this
# module keeps the single import name the command and the tests use.

from specbound.experiments.config import (  # noqa: F401
    SAMPLES, BOUND_SAMPLE_SEED, TEST_SEED, ExperimentError, ExperimentConfig,
)
from specbound.experiments.binomial import (  # noqa: F401
    binomial_tail_upper, regularized_beta, _bisect, _bracket, clopper_pearson,
)
from specbound.experiments.run import (  # noqa: F401
    weights_of, ObservedError, observed_error, heldout_bound, exact_risk, ExperimentResult, _finite_or_none, proxies_of, run_experiment, float_margins, certified_bound, float_upper, float_lower, PARTS, bound_summary,
)
from specbound.experiments.scaling import (  # noqa: F401
    fit_exponents, ScalingConfig, numeric_bound, _numeric_row, scaling_row, _contributions_vs_p, QUANTITIES, _quantity, _cached_row, scaling_study,
)
from specbound.experiments.doc_tables import (  # noqa: F401
    BEGIN, END, _g, scaling_markdown, write_scaling_section,
)
from specbound.experiments.plots import (  # noqa: F401
    _save_figure, scaling_plots,
)
