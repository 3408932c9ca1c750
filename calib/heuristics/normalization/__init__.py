"""Normalization over rows (softmax, layer norm without affine weights): persistent or multi-pass.

Knobs, what nvFuser's inner-normalization scheduler decides:

- ``strategy``: ``persistent`` (each thread holds ``buffer`` elements of its row in registers:
  one read, one write) or ``multipass`` (a first pass reduces, a second reads the row again and
  writes; the second read comes from L2 when the rows in flight fit there);
- ``threads``: threads per row (one block per row);
- ``vec``: elements per vector access (4, 8 or 16 bytes);
- ``buffer``: the persistent buffer per thread, a compiled size (0 for multi-pass).

Registers decide the persistent kernel: ``normalization.additional_registers`` plus the buffer,
spilling past ``normalization.max_persistent_elements_per_thread``; registers per thread bound
the blocks resident per SM, hence the bytes in flight. The CuPy kernels are
``persistent_norm<T, BUF, VEC, OP>`` and ``multipass_norm<T, VEC, OP>`` (:data:`SOURCE`); each
candidate's output is checked against a float64 CuPy reference first.

A package of one module per concept (it was one 78 KB module), each with the comments that record
why its constants have their values:

- :mod:`.candidates`: the descriptor, the knobs a launch names, the search space;
- :mod:`.model`: the physical time model (:func:`plain_model_us`), its fitted constants, the block
  pace, the overlapping blocks (in-flight share, stagger), the spills' traffic;
- :mod:`.occupancy`: the register rule, blocks per SM, the driver's register counts
  (PTXAS_REGISTERS) and the NVRTC they hold for, ptxas's spill bytes;
- :mod:`.l2_share`: the L2 shares of the streamed rows and of the multi-pass re-read;
- :mod:`.classes`: the kernel classes the corrections are kept by, and why per class;
- :mod:`.corrected`: the corrections file (CORRECTIONS_FILE, format 6), its loader, the corrections
  in force and the corrected model (:func:`model_us`);
- :mod:`.residual`: the residual forest over the corrected model (RESIDUAL_FILE), its loader, the
  forest in force and its fit;
- :mod:`.biases`: the few-rows and pair groups' strategy biases (where no residual forest is in force);
- :mod:`.fit`: the fit of the corrections and biases on recordings (:func:`corrections_document`);
- :mod:`.choice`: the heuristic (:func:`choose_ranked`, :func:`heuristic`);
- :mod:`.generator`: the problems an evaluation draws;
- :mod:`.gpu`: the CUDA source, the CuPy kernels and :class:`GpuCase` (CuPy imported on first use).

The names below are re-exported, so ``normalization.NAME`` reads as before. A module reads its own
globals, and another module's patchable names as ``module.NAME``: to change a constant or function
for a test, patch the submodule that defines it (``monkeypatch.setattr(model, "STAGGER_WAVES", 0)``),
not this package, whose copy no code reads.
"""

from __future__ import annotations

from .. import predictor as P
from .biases import (BIAS_QUANTILE, FEW_ROWS_FP32_PER_SM, FEW_ROWS_MIN_COLS, FEW_ROWS_PER_SM, MIN_GROUP_PROBLEMS,
                     PAIR_BLOCKS, PAIR_MIN_ROWS_PER_SM, few_rows, in_pair_group, persistent_bias)
from .candidates import (BUFFERS, DTYPES, EPS, FAMILY, KIND, KNOB_VALUES, MULTIPASS_THREADS, OPS, THREADS, UNROLL,
                         WIDTHS, NormDescriptor, buffer_for, descriptor, launch_problem, space, vecs, widest_vec)
from .choice import choose_ranked, heuristic
from .classes import LOOP_LOG2, MIN_CLASS_CANDIDATES, kernel_class, loop_log2, parent_class
from .corrected import (ARCH_SINCE, BIAS_BY_DTYPE_SINCE, CORRECTIONS_FILE, CORRECTIONS_FORMAT, CORRECTIONS_VERSION,
                        SOFTWARE_SINCE, Corrections, CorrectionsError, corrections, corrections_for, load_corrections,
                        model_us, use_corrections)
from .fit import (corrections_document, few_rows_errors, fit_all, fit_corrections, fit_pair_bias,
                  recorded_samples)
from .generator import generate
from .gpu import CTYPE, SOURCE, TOLERANCE, GpuCase, _names, kernel, sim_library_us
from .residual import (RESIDUAL_FILE, RESIDUAL_FORMAT, RESIDUAL_VERSION, ResidualError, load_residual,
                       residual_document, residual_forest, residual_for, use_residual)
from .l2_share import REREAD_END_PER_CAPACITY, reread_l2_fraction, reread_scale_bytes, streamed_l2_fraction
from .model import (A_VEC, BLOCK_PACE_NORM, CHAIN_US, DISPATCH_US, DRAIN_BLOCKS, FIXED_US, INFLIGHT_MIN_ROWS_PER_SM,
                    INFLIGHT_SHARE, L2_FOOTPRINT, L2_NORM, LATENCY_SCALE, MACHINE_NORM, MUFU, PACE_NORM,
                    REDUCE_US, SCALAR_ACCESS_VEC, SPILL_BYTES, STAGGER_MAX_L2, STAGGER_WAVES, TAIL_EXP, THREAD_US,
                    UNROLL_EFF, block_pace_us, norm_gbps, overlapping_blocks, plain_model_us, scalar_access,
                    spill_traffic_bytes)
from .occupancy import (LOCAL_BYTES_PER_SPILLED_BYTE, PTXAS_REGISTERS, PTXAS_REGISTERS_ARCH, PTXAS_REGISTERS_DEVICE,
                        PTXAS_REGISTERS_NVRTC, PTXAS_SPILL_BYTES, REGS_MIN_PER_LOAD, REGS_PER_LOAD, REGS_PER_LOAD2,
                        REGS_SPREAD, blocks_per_sm, compiled_registers, nvrtc_version, registers)

__all__ = [
    "P",
    # candidates
    "KIND", "FAMILY", "OPS", "DTYPES", "THREADS", "MULTIPASS_THREADS", "BUFFERS", "KNOB_VALUES", "launch_problem",
    "WIDTHS", "UNROLL", "EPS", "NormDescriptor", "descriptor", "vecs", "widest_vec", "buffer_for", "space",
    # model
    "norm_gbps", "FIXED_US", "LATENCY_SCALE", "UNROLL_EFF", "A_VEC", "MUFU", "CHAIN_US", "REDUCE_US", "L2_FOOTPRINT",
    "DRAIN_BLOCKS", "TAIL_EXP", "L2_NORM", "MACHINE_NORM", "PACE_NORM", "INFLIGHT_SHARE", "INFLIGHT_MIN_ROWS_PER_SM",
    "STAGGER_WAVES", "STAGGER_MAX_L2", "SPILL_BYTES", "DISPATCH_US", "THREAD_US", "BLOCK_PACE_NORM", "block_pace_us",
    "spill_traffic_bytes", "overlapping_blocks", "plain_model_us", "SCALAR_ACCESS_VEC", "scalar_access",
    # occupancy
    "REGS_PER_LOAD", "REGS_PER_LOAD2", "REGS_MIN_PER_LOAD", "REGS_SPREAD", "PTXAS_REGISTERS_DEVICE",
    "PTXAS_REGISTERS_ARCH", "PTXAS_REGISTERS_NVRTC", "PTXAS_REGISTERS", "PTXAS_SPILL_BYTES",
    "LOCAL_BYTES_PER_SPILLED_BYTE", "registers", "blocks_per_sm", "compiled_registers", "nvrtc_version",
    # l2_share
    "REREAD_END_PER_CAPACITY", "reread_scale_bytes", "streamed_l2_fraction", "reread_l2_fraction",
    # classes
    "MIN_CLASS_CANDIDATES", "LOOP_LOG2", "loop_log2", "kernel_class", "parent_class",
    # corrected
    "CORRECTIONS_FILE", "CORRECTIONS_FORMAT", "CORRECTIONS_VERSION", "SOFTWARE_SINCE", "ARCH_SINCE",
    "BIAS_BY_DTYPE_SINCE", "CorrectionsError", "Corrections", "load_corrections", "corrections", "use_corrections",
    "model_us", "corrections_for",
    # residual
    "RESIDUAL_FILE", "RESIDUAL_FORMAT", "RESIDUAL_VERSION", "ResidualError", "load_residual", "residual_forest",
    "residual_document", "residual_for", "use_residual",
    # biases
    "FEW_ROWS_PER_SM", "FEW_ROWS_MIN_COLS", "FEW_ROWS_FP32_PER_SM", "BIAS_QUANTILE", "PAIR_BLOCKS",
    "PAIR_MIN_ROWS_PER_SM", "MIN_GROUP_PROBLEMS", "few_rows", "persistent_bias", "in_pair_group",
    # fit
    "recorded_samples", "fit_corrections", "few_rows_errors", "fit_pair_bias", "fit_all", "corrections_document",
    # choice, generator, gpu
    "choose_ranked", "heuristic", "generate", "sim_library_us", "SOURCE", "CTYPE", "TOLERANCE", "_names", "kernel",
    "GpuCase",
]
