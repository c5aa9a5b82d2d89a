# Generated from chapters/*.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""gdn2edu: Gated DeltaNet-2 from the token recurrence to Triton kernels."""

from gdn2edu.notebook import glue
from gdn2edu.inputs import GDN2Dims, validate_inputs, one_token_as_sequence, compute_dtype, check_positive_ints, random_inputs
from gdn2edu.recurrence import gdn2_token_update, recurrent_gdn2, recurrent_gdn2_step
from gdn2edu.family import family_gates
from gdn2edu.chunk_system import ChunkFactors, chunk_factors, solve_chunk
from gdn2edu.chunk import decay_ratios, WYFactors, wy_factors, split_chunks, merge_chunks, state_scan, chunk_gdn2_torch
from gdn2edu.inverse import forward_substitution, block_inverse
from gdn2edu.wy_backward import strict_lower, wy_chunk_adjoints, wy_chunk_backward, wy_backward_products, flops_wy_backward
from gdn2edu.rewy import rewy_chunk_adjoints, rewy_chunk_backward, rewy_backward_products, flops_rewy_backward
from gdn2edu.chunk_backward import reverse_state_scan, pairwise_pullback, chunk_gdn2_backward, ChunkGDN2Function, chunk_gdn2_explicit
from gdn2edu.matrix_intra import centered_pullback, subchunk_pullback, gram_free_scalar_gate, tied_gate_grads
from gdn2edu.fused_recurrent import l2_norm_fwd_kernel, l2_norm_bwd_kernel, L2NormFunction, l2_normalize_triton, l2_normalize, gate_activation, apply_kernel_options, fused_recurrent_gdn2, fused_recurrent_gdn2_step
from gdn2edu.chunk_kernels import chunk_gdn2_fwd_intra_kernel, chunk_gdn2_fwd_wy_kernel, chunk_gdn2_fwd_scan_kernel, chunk_gdn2_fwd_output_kernel, kernel_settings, tile_table, tensor_descriptors_at, chunk_gdn2_fwd, baseline_inputs
from gdn2edu.pipeline_figure import pipeline_mismatches, draw_pipeline
from gdn2edu.kernel_history import kernel_sources, module_kernels, same_kernels, changed_kernels, changed_in_files
from gdn2edu.chunk_backward_kernels import chunk_gdn2_bwd_scan_kernel, chunk_gdn2_bwd_local_kernel, chunk_gdn2_bwd_inputs_kernel, chunk_gdn2_backward_triton, ChunkGDN2TritonFunction, chunk_gdn2
from gdn2edu.layers import ShortConvolution, RMSNormGated, GDN2Cache, GatedDeltaNet2
from gdn2edu.short_conv import short_conv_fwd_kernel, short_conv_bwd_kernel, ShortConvFunction, short_conv_triton
from gdn2edu.gated_norm import gated_norm_fwd_kernel, gated_norm_bwd_kernel, GatedNormFunction, rms_norm_gated_triton
from gdn2edu.lm import GDN2Block, GDN2LM
from gdn2edu.mqar import mqar_batch, mqar_accuracy, lr_factor, train_mqar
from gdn2edu.layer_bench import fla_layer_class, time_layer, plan_layer_benchmark

__all__ = [
    "glue",
    "GDN2Dims",
    "validate_inputs",
    "one_token_as_sequence",
    "compute_dtype",
    "check_positive_ints",
    "random_inputs",
    "gdn2_token_update",
    "recurrent_gdn2",
    "recurrent_gdn2_step",
    "family_gates",
    "ChunkFactors",
    "chunk_factors",
    "solve_chunk",
    "decay_ratios",
    "WYFactors",
    "wy_factors",
    "split_chunks",
    "merge_chunks",
    "state_scan",
    "chunk_gdn2_torch",
    "forward_substitution",
    "block_inverse",
    "strict_lower",
    "wy_chunk_adjoints",
    "wy_chunk_backward",
    "wy_backward_products",
    "flops_wy_backward",
    "rewy_chunk_adjoints",
    "rewy_chunk_backward",
    "rewy_backward_products",
    "flops_rewy_backward",
    "reverse_state_scan",
    "pairwise_pullback",
    "chunk_gdn2_backward",
    "ChunkGDN2Function",
    "chunk_gdn2_explicit",
    "centered_pullback",
    "subchunk_pullback",
    "gram_free_scalar_gate",
    "tied_gate_grads",
    "l2_norm_fwd_kernel",
    "l2_norm_bwd_kernel",
    "L2NormFunction",
    "l2_normalize_triton",
    "l2_normalize",
    "gate_activation",
    "apply_kernel_options",
    "fused_recurrent_gdn2",
    "fused_recurrent_gdn2_step",
    "chunk_gdn2_fwd_intra_kernel",
    "chunk_gdn2_fwd_wy_kernel",
    "chunk_gdn2_fwd_scan_kernel",
    "chunk_gdn2_fwd_output_kernel",
    "kernel_settings",
    "tile_table",
    "tensor_descriptors_at",
    "chunk_gdn2_fwd",
    "baseline_inputs",
    "pipeline_mismatches",
    "draw_pipeline",
    "kernel_sources",
    "module_kernels",
    "same_kernels",
    "changed_kernels",
    "changed_in_files",
    "chunk_gdn2_bwd_scan_kernel",
    "chunk_gdn2_bwd_local_kernel",
    "chunk_gdn2_bwd_inputs_kernel",
    "chunk_gdn2_backward_triton",
    "ChunkGDN2TritonFunction",
    "chunk_gdn2",
    "ShortConvolution",
    "RMSNormGated",
    "GDN2Cache",
    "GatedDeltaNet2",
    "short_conv_fwd_kernel",
    "short_conv_bwd_kernel",
    "ShortConvFunction",
    "short_conv_triton",
    "gated_norm_fwd_kernel",
    "gated_norm_bwd_kernel",
    "GatedNormFunction",
    "rms_norm_gated_triton",
    "GDN2Block",
    "GDN2LM",
    "mqar_batch",
    "mqar_accuracy",
    "lr_factor",
    "train_mqar",
    "fla_layer_class",
    "time_layer",
    "plan_layer_benchmark",
]
