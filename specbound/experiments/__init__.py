"""Reference experiments, one module per concern:

* :mod:`.config` -- what an experiment is asked for (:class:`ExperimentConfig`, sample kinds, seeds);
* :mod:`.binomial` -- exact Clopper-Pearson intervals;
* :mod:`.run` -- one experiment (:func:`run_experiment`) and its certified bound;
* :mod:`.scaling` -- the depth/width study (:func:`scaling_study`, :func:`fit_exponents`);
* :mod:`.doc_tables` -- the study as markdown, written into docs/experiments.md;
* :mod:`.plots` -- the study's figures.
"""
