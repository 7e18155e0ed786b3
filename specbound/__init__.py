"""specbound: certified spectrum-adaptive post hoc generalization bounds for trained Transformers.

Layers (installed as subpackages of this one import name):

- ``specbound.derivation`` -- SymPy: every lemma, its constant and covering term; the theorem.
- ``specbound.certified``  -- python-flint (Arb) balls that provably contain the true values.
- ``specbound.numeric``    -- fast torch path (CPU/CUDA), cross-checked against ``certified``.
"""

__version__ = "0.1.0"
