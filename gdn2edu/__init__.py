# Generated from chapters/*.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""gdn2edu: Gated DeltaNet-2 from the token recurrence to Triton kernels."""

from gdn2edu.inputs import GDN2Dims, validate_inputs, compute_dtype
from gdn2edu.recurrence import gdn2_token_update, recurrent_gdn2, recurrent_gdn2_step
from gdn2edu.family import family_gates
from gdn2edu.fused_recurrent import fused_recurrent_gdn2, fused_recurrent_gdn2_step

__all__ = [
    "GDN2Dims",
    "validate_inputs",
    "compute_dtype",
    "gdn2_token_update",
    "recurrent_gdn2",
    "recurrent_gdn2_step",
    "family_gates",
    "fused_recurrent_gdn2",
    "fused_recurrent_gdn2_step",
]
