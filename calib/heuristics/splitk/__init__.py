"""Matmul split-K: ``C = At.T @ B`` computed as ``split`` partial products over slices of K, then
a reduction of the partial tiles.

The problem: ``At`` is (K, M) and ``B`` (K, N), both row-major (the "TN" GEMM of a linear layer's
backward pass), so each K-slice of either is a contiguous block. ``split = 1`` is plain
``cupy.matmul`` (the library op). ``split = s`` is one batched ``cupy.matmul`` of s slices (cuBLAS
runs the s products in one launch, s times as many tiles to spread over the SMs), then
:data:`SOURCE`'s ``splitk_sum<T>`` adds the s partials. The knob is ``split`` (1..32, dividing K,
at least 128 of K per slice).

The model describes what CuPy and cuBLAS do, as measured on three H200 hosts on 2026-12-01 (five
recordings of every split's device time, bench/results/2026-12-01-h200-heuristics-*):

- split 1 is one cublasGemmEx (tensor cores for fp16; SIMT FP32 for fp32). cuBLAS picks a kernel
  (an output tile) and its own internal split of K; the model takes the fastest of those
  configurations (:func:`gemm_us`), each timed as output tiles in waves over the SMs, every tile's
  K loop bound by its flops at the SM's share of the profile's peak or by one CTA's latency per
  step, the operands that do not stay in L2 at DRAM speed, the epilogue's store of C, the launch,
  and for an internal split the reduction kernel; for fp32, where the kernel cuBLAS will run is
  known (cuBLASLt's own heuristic, asked live on the GPU or from an oracle:
  calib/heuristics/cublaslt.py), raised to that kernel's time above the profile's fp32 ridge
  (:func:`split1_fp32_us`);
- split s > 1 goes through CuPy's batched matmul, which (``_routines_linalg.matmul``) promotes fp16
  to fp32 and makes both operands contiguous: the transposed K-slices of At are copied (and cast),
  B is cast, one FP32 strided-batched GEMM runs on the CUDA cores (no tensor cores, even for fp16,
  and no internal split: the batch is its parallelism), the fp32 partials are cast back, then
  ``splitk_sum`` adds them. (Checked in CuPy v14.2.0's cupy/_core/_routines_linalg.pyx, tag of
  2026-08-20: matmul sets ``dtype = float32`` where the promoted dtype is fp16, line 900, and calls
  gemmStridedBatchedEx with that dtype as the compute type, line 1023; so does the main branch as of
  6b6d9563c, 2026-08-20. A later development version, cupy/cupy 0373d642, keeps fp16 operands with
  CUBLAS_COMPUTE_32F on compute capability 7.0 and up: under a CuPy with that change the fp16 split
  path would run on tensor cores, and this model would not hold.)

The conclusion on the H200: an external split almost never pays. Split 1 was the fastest in 477
of 500 recorded problems; fp16 split 2..32 took 2.3x-55x as long (6688x144x35840: 141 us unsplit,
3609-3940 us split); the exceptions are fp32 outputs of 16-64 rows with a long K (3-24% faster
split). The constants (gemm.py and the modules after it) were fitted on recordings A-D (two problem
sets on two hosts, each with its host's profile) with E (a third host, a problem set never looked at)
held out; the README has the replay numbers.

A package of one module per concept (it was one 95 KB module), each with the comments that record
why its constants have their values. Each module imports only those before it at its top (what needs
a later one imports it where it runs: two fitters the whole model, the correction-file check the
formats of forests.py), so there is no import cycle:

- problem.py: the kind, the descriptor, the candidate splits, the random problems of an evaluation;
- gemm.py: cuBLAS's GEMM time, the fastest of its configurations, and the constants it was fitted with;
- split1_tree.py: fp32 split 1's correction from traced kernels, and the checks every correction file
  shares (format, version, software, architecture);
- lt_kernel.py: fp32 split 1 as the kernel cuBLASLt names (swizzled grid, whole waves, serial chain,
  small-grid reduction, per-kernel factors);
- fp32_split1.py: which of those fp32 split 1 takes (the ridge, the rows of the output);
- batched.py: a split's strided-batched GEMM as the kernel cuBLASLt names (gemmSN or a tile), its fit;
- forests.py: the recorded-time correction forests (fp16 split 1, fp32 split 1, fp32 splits), their
  files, features and fitters;
- model.py: ``model_us`` (a split's predicted time) and the simulated device's library time;
- margins.py: ``heuristic`` and the margins a split must beat split 1 by;
- gpu.py: ``GpuCase`` and the CUDA source of ``splitk_sum`` (CuPy imported on first use).

The names other code reads are re-exported here, so ``splitk.<name>`` keeps working for reading. A test
that patches a name must patch the module that reads it (``monkeypatch.setattr(splitk.margins,
"SPLIT_MARGIN", 0.84)``): setting it here would change only this package's copy.
"""

from __future__ import annotations

from ..registry import HeuristicError
from .problem import (DTYPES, FAMILY, KIND, KNOB_VALUES, MIN_K_PER_SLICE, RATE, SPLITS, TILE, SplitKDescriptor,
                      descriptor, flops_per_byte, generate, launch_problem, space)
from .gemm import (DRAM_EFFICIENCY, EFFICIENCY, EPILOGUE_WRITES, INTERNAL_SPLITS, INTERNAL_SPLIT_US, KMIN, LAUNCH_US,
                   SIMT_32_ROWS_UP_TO, SIMT_NARROW_EFFICIENCY, SMALL_KERNEL_US, STEP_NS, TENSOR_64_EFFICIENCY, TILES,
                   TRANSPOSE_EFFICIENCY, _config_us, _setup, gemm_us)
from .split1_tree import (LAUNCH_GAP_US, SPLIT1_FEATURES, SPLIT1_FILE, SPLIT1_FORMAT, SPLIT1_MIN_LEAF,
                          SPLIT1_TREE_DEPTH, SPLIT1_VERSION, _features, _fit_tree, _read_split1, _split1, _tree_value,
                          fit_split1_tree, load_split1, split1_log_factor)
from .lt_kernel import (KERNELS_FILE, LT_FACTOR_MIN_SHAPES, LT_KERNEL_FACTOR, LT_PROBE_FILE, LT_REDUCE_REF_SPLIT,
                        LT_REDUCE_US_PER_SPLIT, LT_SWIZZLED_ALGOS, LT_WHOLE_WAVES, REDUCE_ELEMENTS_PER_CTA,
                        REDUCE_SMALL_GRID_CTAS, SERIAL_ALGO, SERIAL_CUSTOM_OPTION, SERIAL_MIN_SPLIT, SERIAL_STEP_US,
                        SERIAL_US_PER_ELEMENT, _factor_key, choice_us, fit_lt_factors, fit_reduce_slope,
                        fit_serial_chain, lt_choice, lt_ctas, lt_reduce_us, lt_resident, serial_chain_us)
from .fp32_split1 import (CHOICE_BELOW_RIDGE_ROWS_UP_TO, LOWERED_ROWS_ABOVE, fp32_ridge_flops_per_byte,
                          lowered_by_choice, raised_by_choice, split1_fp32_choice, split1_fp32_us)
from .batched import (BATCHED_FACTOR, BATCHED_GAP_US, BATCHED_KERNELS_FILES, BATCHED_PROBE_FILE, RATE_GRID, SN_ALGO,
                      SN_COLUMNS, SN_EFFICIENCY, SN_EFFICIENCY_GRID, SN_FLOOR_GRID, SN_FLOOR_US, SN_ROW_PARTS,
                      SN_STEP_GRID, SN_STEP_NS, SN_WHOLE_WAVES, STEP_GRID, _pairs, _traced_gemm_us, batched_choice,
                      batched_choice_us, batched_from_choice_us, batched_gemm_us, choice_times_batched, fit_batched,
                      load_batched_kernels, lt_batched_ctas, lt_batched_grid, sn_kernel_us)
from .forests import (ARCH_SINCE, FOREST_DEPTH, FOREST_MAX_TREES, FOREST_MIN_LEAF, FOREST_TREES, FP16_SPLIT1_FILE,
                      FP16_SPLIT1_FORMAT, FP16_SPLIT1_VERSION, FP32_RECORDED_FILE, FP32_RECORDED_FORMAT,
                      FP32_RECORDED_VERSION, FP32_SPLIT1_FEATURES, FP32_SPLITS_FEATURES, FP32_SPLITS_FILE,
                      FP32_SPLITS_FORMAT, FP32_SPLITS_VERSION, LT_FEATURES, SOFTWARE_SINCE, _fp16_split1,
                      _fp32_recorded, _fp32_splits, fit_forest, fit_fp16_split1_trees, fit_fp32_recorded_trees,
                      fit_fp32_splits_trees, fp16_split1_examples, fp16_split1_log_factor, fp32_recorded_examples,
                      fp32_recorded_log_factor, fp32_split1_features, fp32_split_features, fp32_splits_examples,
                      fp32_splits_log_factor, load_forest, load_fp16_split1, load_fp32_recorded, load_fp32_splits)
from .model import (model_us, sim_library_us, small_kernel_us, split_path_us)
from .margins import (MARGIN_FROM_CHOICE_ROWS_UP_TO, SPLIT_MARGIN, SPLIT_MARGIN_FROM_CHOICE, choose_split, heuristic,
                      margin, margin_from_choice)
from .gpu import (CTYPE, SOURCE, TOLERANCE, GpuCase, reducer)

__all__ = [
    "HeuristicError",
    # problem
    "DTYPES", "FAMILY", "KIND", "KNOB_VALUES", "MIN_K_PER_SLICE", "RATE", "SPLITS", "TILE", "SplitKDescriptor",
    "descriptor", "flops_per_byte", "generate", "launch_problem", "space",
    # gemm
    "DRAM_EFFICIENCY", "EFFICIENCY", "EPILOGUE_WRITES", "INTERNAL_SPLITS", "INTERNAL_SPLIT_US", "KMIN", "LAUNCH_US",
    "SIMT_32_ROWS_UP_TO", "SIMT_NARROW_EFFICIENCY", "SMALL_KERNEL_US", "STEP_NS", "TENSOR_64_EFFICIENCY", "TILES",
    "TRANSPOSE_EFFICIENCY", "_config_us", "_setup", "gemm_us",
    # split1_tree
    "LAUNCH_GAP_US", "SPLIT1_FEATURES", "SPLIT1_FILE", "SPLIT1_FORMAT", "SPLIT1_MIN_LEAF", "SPLIT1_TREE_DEPTH",
    "SPLIT1_VERSION", "_features", "_fit_tree", "_read_split1", "_split1", "_tree_value", "fit_split1_tree",
    "load_split1", "split1_log_factor",
    # lt_kernel
    "KERNELS_FILE", "LT_FACTOR_MIN_SHAPES", "LT_KERNEL_FACTOR", "LT_PROBE_FILE", "LT_REDUCE_REF_SPLIT",
    "LT_REDUCE_US_PER_SPLIT", "LT_SWIZZLED_ALGOS", "LT_WHOLE_WAVES", "REDUCE_ELEMENTS_PER_CTA",
    "REDUCE_SMALL_GRID_CTAS", "SERIAL_ALGO", "SERIAL_CUSTOM_OPTION", "SERIAL_MIN_SPLIT", "SERIAL_STEP_US",
    "SERIAL_US_PER_ELEMENT", "_factor_key", "choice_us", "fit_lt_factors", "fit_reduce_slope", "fit_serial_chain",
    "lt_choice", "lt_ctas", "lt_reduce_us", "lt_resident", "serial_chain_us",
    # fp32_split1
    "CHOICE_BELOW_RIDGE_ROWS_UP_TO", "LOWERED_ROWS_ABOVE", "fp32_ridge_flops_per_byte", "lowered_by_choice",
    "raised_by_choice", "split1_fp32_choice", "split1_fp32_us",
    # batched
    "BATCHED_FACTOR", "BATCHED_GAP_US", "BATCHED_KERNELS_FILES", "BATCHED_PROBE_FILE", "RATE_GRID", "SN_ALGO",
    "SN_COLUMNS", "SN_EFFICIENCY", "SN_EFFICIENCY_GRID", "SN_FLOOR_GRID", "SN_FLOOR_US", "SN_ROW_PARTS", "SN_STEP_GRID",
    "SN_STEP_NS", "SN_WHOLE_WAVES", "STEP_GRID", "_pairs", "_traced_gemm_us", "batched_choice", "batched_choice_us",
    "batched_from_choice_us", "batched_gemm_us", "choice_times_batched", "fit_batched", "load_batched_kernels",
    "lt_batched_ctas", "lt_batched_grid", "sn_kernel_us",
    # forests
    "ARCH_SINCE", "FOREST_DEPTH", "FOREST_MAX_TREES", "FOREST_MIN_LEAF", "FOREST_TREES", "FP16_SPLIT1_FILE",
    "FP16_SPLIT1_FORMAT", "FP16_SPLIT1_VERSION", "FP32_RECORDED_FILE", "FP32_RECORDED_FORMAT", "FP32_RECORDED_VERSION",
    "FP32_SPLIT1_FEATURES", "FP32_SPLITS_FEATURES", "FP32_SPLITS_FILE", "FP32_SPLITS_FORMAT", "FP32_SPLITS_VERSION",
    "LT_FEATURES", "SOFTWARE_SINCE", "_fp16_split1", "_fp32_recorded", "_fp32_splits", "fit_forest",
    "fit_fp16_split1_trees", "fit_fp32_recorded_trees", "fit_fp32_splits_trees", "fp16_split1_examples",
    "fp16_split1_log_factor", "fp32_recorded_examples", "fp32_recorded_log_factor", "fp32_split1_features",
    "fp32_split_features", "fp32_splits_examples", "fp32_splits_log_factor", "load_forest", "load_fp16_split1",
    "load_fp32_recorded", "load_fp32_splits",
    # model
    "model_us", "sim_library_us", "small_kernel_us", "split_path_us",
    # margins
    "MARGIN_FROM_CHOICE_ROWS_UP_TO", "SPLIT_MARGIN", "SPLIT_MARGIN_FROM_CHOICE", "choose_split", "heuristic", "margin",
    "margin_from_choice",
    # gpu
    "CTYPE", "SOURCE", "TOLERANCE", "GpuCase", "reducer",
]
