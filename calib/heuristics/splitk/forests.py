"""The recorded-time correction forests: fp16 split 1, fp32 split 1 and fp32 splits s > 1, each
log(recorded / model) learned from the shape (and cuBLASLt's answer) over recorded evaluations; their
files (read and checked), their fitters and the features they split on.
"""

from __future__ import annotations

import math
from pathlib import Path

from .. import predictor as P
from ..registry import HeuristicError
from .batched import batched_choice
from .fp32_split1 import split1_fp32_choice, split1_fp32_us
from .gemm import gemm_us
from .problem import SplitKDescriptor
from .split1_tree import DATA_DIR, SPLIT1_FEATURES, SPLIT1_FORMAT, _check_node, _check_split1, _features, _read_split1


# fp16 split 1 (one cublasGemmEx on the tensor cores) where cuBLAS's kernel is not the fastest
# configuration the plain model knows. Most of the memory-bound problems are fp16 GEMMs with a side of
# at most 64, 5-30 us: their split-1 times scatter around the plain model (signed median within
# +-3% on every recording, |error| median 3.1-7.2%) with cuBLAS's choice of kernel, which Lt is not
# asked for fp16. A tree of log(recorded / plain model) over the fp16 split-1 times the H200 recordings
# hold (the same features, depth and leaf size as the fp32 tree of split1_tree.py, not tuned here) predicts that
# choice's effect from the shape well enough to halve the gap to the 5% bar: fitted on the 29
# recordings A-25 (1527 fp16 problems, each with its host's profile) and judged on the six live seeds
# 26-31 that nothing was fitted on (bench/results/2026-12-03-h200-heuristics-s10*, every other row's
# recorded prediction kept), the memory-bound predictor median went 5.40 -> 4.68, 6.04 -> 3.74,
# 5.39 -> 4.63, 6.15 -> 4.69, 5.88 -> 4.23, 6.85 -> 4.44%. Unlike the fp32 tree it raises as well as
# lowers: fp16 never wins a split (CuPy's batched path runs it in FP32), so a raised split 1 costs no
# choice (tests/test_heuristics_splitk_h200.py checks none is split). The file names the recordings
# it is the fit of; it applies to their GPU only.
# Since 2026-12-04 it is a forest: FOREST_TREES trees, each of depth FOREST_DEPTH with at least
# FOREST_MIN_LEAF examples a leaf, fitted on a bootstrap sample of the recordings' fp16 problems and of
# 4300 more (bench/results/2026-12-04-h200-splitk-training/: split-K alone, 1000 problems of each of
# seeds 1000-1002, which no evaluation uses; and seeds 42-54, live with the first forest), the
# correction their mean. The one tree's error is its
# variance: the same shape runs within 0.6-1.3% on two hosts (median |log| of the fp16 split-1 times
# of recordings A/B, C/D, E/G), while one tree misses the held-out memory-bound fp16 problems by a
# median 3.4-4.0%. Chosen on the three training seeds, each held out in turn with the 29 recordings
# in the fit: one tree of depth 8 (the best single tree, depth 4-10 by leaf 5-40) 3.43/3.99/3.70%,
# 25 trees of depth 10 and leaf 5 3.00/2.99/2.80%, 50 of them 2.92/2.95/3.00% (depth 12 and leaf 3
# 2.74/2.95/2.80%, depth 8 and leaf 10 3.02/3.11/3.16%); the tree of the 29 recordings alone
# 3.79/3.64/4.04%.
FOREST_TREES, FOREST_DEPTH, FOREST_MIN_LEAF = 50, 10, 5  # both forests'
FP16_SPLIT1_FILE = DATA_DIR / "splitk_fp16_split1.json.gz"
FP16_SPLIT1_FORMAT, FP16_SPLIT1_VERSION = "calib.heuristics.splitk_fp16_split1_correction", 4
# Version 2 (2026-12-04): a forest, "trees" (bagged: each tree fitted on a bootstrap sample of the
# examples, the correction their mean) and "bootstrap_seed"; version 1 held one "tree", read as a
# forest of that one tree. Version 3 (2026-12-06): "software" (SOFTWARE_SINCE). Version 4 (2026-12-07):
# "compute_capability" (ARCH_SINCE).
FOREST_MAX_TREES = 500
_fp16_split1: dict = {}


def load_fp16_split1(path=FP16_SPLIT1_FILE) -> dict:
    """The fp16 split-1 correction at ``path``, checked field by field, its ``recordings`` too
    (pairs of an evaluation and the profile it read, paths from the repository's root); a version-1
    file (one tree) comes back as the current version's forest of one."""
    return load_forest(path, FP16_SPLIT1_FORMAT, FP16_SPLIT1_VERSION, one_tree_version=1,
                       older={2: SPLIT1_FEATURES, 3: SPLIT1_FEATURES})


def load_forest(path, fmt: str, version: int, one_tree_version: int | None = None, features=SPLIT1_FEATURES,
                older=None) -> dict:
    """A correction forest of format ``fmt`` at ``path`` ("trees", "bootstrap_seed", "recordings"),
    checked field by field, its trees splitting on ``features``; a file of ``one_tree_version`` (one
    "tree") is read as a forest of one, and one of a version in ``older`` ({version: its features})
    as it is, over its own features (every feature a version had stays a feature of the next)."""
    where = f"split-K split-1 correction {path}"
    raw = _read_split1(path, where)
    if one_tree_version is not None and isinstance(raw, dict) and raw.get("format") == fmt \
            and raw.get("version") == one_tree_version:
        doc = _check_split1(raw, where, fmt, one_tree_version)
        _check_node(doc.get("tree"), where)
        doc = dict({k: v for k, v in doc.items() if k != "tree"}, version=version, trees=[doc["tree"]],
                   bootstrap_seed=None)
    else:
        found = raw.get("version") if isinstance(raw, dict) else None
        if older and isinstance(found, int) and found in older and raw.get("format") == fmt:  # [] is unhashable
            features = older[raw["version"]]
            doc = dict(_check_split1(raw, where, fmt, raw["version"], features), version=version)
        else:
            doc = _check_split1(raw, where, fmt, version, features)
        trees = doc.get("trees")
        if not isinstance(trees, list) or not 1 <= len(trees) <= FOREST_MAX_TREES:
            raise HeuristicError(f"{where}: trees must be a list of 1 to {FOREST_MAX_TREES} trees")
        for tree in trees:
            _check_node(tree, where, features)
        seed = doc.get("bootstrap_seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise HeuristicError(f"{where}: bootstrap_seed must be an integer or null, not {seed!r}")
    recs = doc.get("recordings")
    if not isinstance(recs, list) or not recs or not all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) and x for x in r) for r in recs):
        raise HeuristicError(f"{where}: recordings must be a non-empty list of [evaluation, profile] path pairs")
    return doc


def _forest_log_factor(cache: dict, path: Path, load, q, features_of) -> float:
    """The forest at ``path`` (read once with ``load``, kept in ``cache["doc"]``) at the features
    ``features_of()`` gives (called only where the forest applies) on the GPU its recordings are of;
    0 on any other, and where the file is absent."""
    if "doc" not in cache:
        cache["doc"] = load() if path.exists() else None
    doc = cache["doc"]
    if doc is None or not P.measured_on(q, doc["device"], doc["software"], f"split-K's correction {path.name}",
                                        doc["compute_capability"]):
        return 0.0
    from ..forest import forest_value

    return forest_value(doc["trees"], features_of())


def fp16_split1_log_factor(q, m: int, n: int, k: int) -> float:
    """log of the factor the fp16 split-1 prediction takes on the GPU the recordings are of (the
    forest's mean); 0 on any other (and on the simulated device, whose truth is the plain model)."""
    return _forest_log_factor(_fp16_split1, FP16_SPLIT1_FILE, load_fp16_split1, q, lambda: _features(m, n, k))


def _split1_examples(rows, dtype: str, model_us_of, features_of=None) -> tuple[list, list]:
    """(``features_of(m, n, k)``, the shape's by default; log(recorded split-1 us / ``model_us_of(m, n,
    k)``)) of a recorded evaluation's problems of ``dtype``."""
    features_of = features_of or _features
    xs, ys = [], []
    for r in rows:
        d, t = r.get("descriptor") or {}, (r.get("times_us") or {}).get("split=1")
        if d.get("dtype") != dtype or not t or t <= 0:
            continue
        m, n, k = int(d["m"]), int(d["n"]), int(d["k"])
        xs.append(features_of(m, n, k))
        ys.append(math.log(t / model_us_of(m, n, k)))
    return xs, ys


def _fit_pooled(parts, what: str, n_trees: int, seed: int, features=SPLIT1_FEATURES) -> list:
    """The forest over the (features, targets) ``parts`` of several evaluations, pooled."""
    xs = [x for px, _ in parts for x in px]
    ys = [y for _, py in parts for y in py]
    if not ys:
        raise HeuristicError(f"fitting the {what} correction needs recorded {what} times")
    return fit_forest(xs, ys, n_trees, seed, features)


def fp16_split1_examples(rows, q) -> tuple[list, list]:
    """(features, log(recorded split-1 us / plain model)) of a recorded evaluation's fp16 problems."""
    return _split1_examples(rows, "float16", lambda m, n, k: gemm_us(q, m, n, k, 2, 2, "tensor"))


def fit_fp16_split1_trees(recorded, n_trees: int = FOREST_TREES, seed: int = 0) -> list:
    """The forest over ``recorded``: (rows, q) of each evaluation, q of the profile it read."""
    return _fit_pooled([fp16_split1_examples(rows, q) for rows, q in recorded], "fp16", n_trees, seed)


def fit_forest(xs: list, ys: list, n_trees: int = FOREST_TREES, seed: int = 0, features=SPLIT1_FEATURES) -> list:
    """``n_trees`` trees (depth FOREST_DEPTH, FOREST_MIN_LEAF a leaf), each fitted on a bootstrap
    sample drawn with random.Random(seed), so the fit is reproducible to the bit (forest.fit_forest)."""
    from .. import forest

    return forest.fit_forest(xs, ys, features, n_trees, FOREST_DEPTH, FOREST_MIN_LEAF, seed)


# fp32 split 1, what the model (fp32_split1.py) still misses, learned from recorded times the same way. The fp32
# prediction is the traced-kernel model raised (or lowered) to the time of the kernel cuBLASLt names;
# on the 3000 training problems (bench/results/2026-12-04-h200-splitk-training/) its memory-bound fp32
# rows still scatter by a median 4.9-6.6%, and where split 1 lost its worst cases to a split it ran
# 10-20% slower than predicted (seed 37: 16x816x6656, 28.6 us against 22.8; seed 41: 16x336x11520,
# 24.8 against 22.1). A forest of log(recorded / the whole fp32 split-1 model, with the evaluation's
# own cuBLASLt answers as oracle: evaluations record them since 2026-12-04, and the older recordings,
# which lack them, are left out) learns that scatter from the shape. Unlike fp16's it moves choices,
# so it came with the margins (SPLIT_MARGIN, SPLIT_MARGIN_FROM_CHOICE): held out one training seed at
# a time (the forest fitted on the other two), the memory-bound fp32 median went 6.58/4.92/6.54% ->
# 4.07/3.42/3.67%, and with the margins refitted the problems below 0.85 of the best 10 -> 6 of
# 3000 (below 0.9: 33 -> 26, geomean 0.9973 -> 0.9980). With the margins as they were it cost choices:
# below 0.85 10 -> 14. Live on seeds 42-54 (session 12 call 3, 1300 problems it had not seen) the
# memory-bound median was 2.7-4.1% on every seed (replayed with session 11's model: 3.3-6.2%); those
# seeds then joined the fit (tests/h200_recordings.TRAINING), as they joined fp16's.
#
# Version 2 (2026-12-06) also splits on cuBLASLt's answer (LT_FEATURES: the kernel's algo, tile, own
# split of K, waves, custom option) where the model reads it (split1_fp32_choice), and is fitted on the
# 3000 fp32 problems of at most 64 rows of bench/results/2026-12-06-h200-splitk-focus/ besides: a shape
# alone did not tell which kernel cuBLAS runs, and the kernel is most of what the model still missed.
# Without Lt's answer (a replay of a recording that lacks it, a machine without the profile's GPU) its
# features are -1, as for the shapes Lt is never asked about. A version-1 file (shape features only) is
# read as it is. With FP32_SPLITS_FILE and the margins chosen again, held out: see SPLIT_MARGIN.
FP32_RECORDED_FILE = DATA_DIR / "splitk_fp32_split1_recorded.json.gz"
FP32_RECORDED_FORMAT, FP32_RECORDED_VERSION = "calib.heuristics.splitk_fp32_split1_recorded_correction", 4
_fp32_recorded: dict = {}
# Lt's answer for a GEMM as features of a forest: -1 each where none is known (not asked, or no GPU).
LT_FEATURES = ("lt_algo", "lt_log2_tile_m", "lt_log2_tile_n", "lt_log2_split", "lt_waves", "lt_custom")
FP32_SPLIT1_FEATURES = SPLIT1_FEATURES + LT_FEATURES
FP32_SPLITS_FEATURES = SPLIT1_FEATURES + ("log2_split", "log2_k_slice") + LT_FEATURES


def _lt_features(c) -> dict:
    if c is None:
        return dict.fromkeys(LT_FEATURES, -1.0)
    return dict(zip(LT_FEATURES, (float(c.algo_id), math.log2(max(c.tile_m, 1)), math.log2(max(c.tile_n, 1)),
                                  math.log2(max(c.split, 1)), float(c.waves), float(c.custom_option))))


def fp32_split1_features(q, m: int, n: int, k: int) -> dict:
    """The shape and Lt's answer for split 1 where the fp32 model reads it (else -1s)."""
    return {**_features(m, n, k), **_lt_features(split1_fp32_choice(q, m, n, k))}


def fp32_split_features(q, m: int, n: int, k: int, split: int) -> dict:
    """The shape, the split, its K slice and Lt's answer for the split's batched GEMM."""
    k_slice = k // split
    return {**_features(m, n, k), "log2_split": math.log2(split), "log2_k_slice": math.log2(k_slice),
            **_lt_features(batched_choice(q, m, n, k_slice, split))}


def load_fp32_recorded(path=FP32_RECORDED_FILE) -> dict:
    """The fp32 recorded-time forest at ``path``, checked field by field (as fp16's); version 1
    (shape features only) is read forward as it is."""
    return load_forest(path, FP32_RECORDED_FORMAT, FP32_RECORDED_VERSION, features=FP32_SPLIT1_FEATURES,
                       older={1: SPLIT1_FEATURES, 2: FP32_SPLIT1_FEATURES, 3: FP32_SPLIT1_FEATURES})


def fp32_recorded_log_factor(q, m: int, n: int, k: int) -> float:
    """log of the factor the whole fp32 split-1 prediction takes on the GPU the recordings are of; 0
    on any other (and on the simulated device)."""
    return _forest_log_factor(_fp32_recorded, FP32_RECORDED_FILE, load_fp32_recorded, q,
                              lambda: fp32_split1_features(q, m, n, k))


def fp32_recorded_examples(rows, q, oracle) -> tuple[list, list]:
    """(features, log(recorded split-1 us / the fp32 split-1 model)) of a recorded evaluation's fp32
    problems, the model asking ``oracle`` (the evaluation's own cuBLASLt answers) for Lt's kernels."""
    from .. import cublaslt

    with cublaslt.use_oracle(oracle):
        return _split1_examples(rows, "float32", lambda m, n, k: split1_fp32_us(q, m, n, k),
                                lambda m, n, k: fp32_split1_features(q, m, n, k))


def fit_fp32_recorded_trees(recorded, n_trees: int = FOREST_TREES, seed: int = 0) -> list:
    """The forest over ``recorded``: (rows, q, cuBLASLt oracle) of each evaluation."""
    return _fit_pooled([fp32_recorded_examples(*r) for r in recorded], "fp32 split-1", n_trees, seed,
                       FP32_SPLIT1_FEATURES)


# fp32 splits s > 1, learned the same way: a forest of log(recorded / model_us) over every recorded
# split of the same evaluations' fp32 problems (the model without this forest: split_path_us), on the
# shape, the split, its K slice and Lt's answer for the batched GEMM. The worst cases left by the
# split-1 forest alone were as often a split's own misprediction as split 1's (32x6544x7680 split 32
# predicted 284 us, ran 116), and a margin cannot tell the two apart.
FP32_SPLITS_FILE = DATA_DIR / "splitk_fp32_splits_recorded.json.gz"
FP32_SPLITS_FORMAT, FP32_SPLITS_VERSION = "calib.heuristics.splitk_fp32_splits_recorded_correction", 3
_fp32_splits: dict = {}
# The first version of each correction format that records its "software" (see SPLIT1_FORMAT).
SOFTWARE_SINCE = {SPLIT1_FORMAT: 2, FP16_SPLIT1_FORMAT: 3, FP32_RECORDED_FORMAT: 3, FP32_SPLITS_FORMAT: 2}
# The first version that records its GPU's "compute_capability" (see SPLIT1_FORMAT).
ARCH_SINCE = {SPLIT1_FORMAT: 3, FP16_SPLIT1_FORMAT: 4, FP32_RECORDED_FORMAT: 4, FP32_SPLITS_FORMAT: 3}


def load_fp32_splits(path=FP32_SPLITS_FILE) -> dict:
    """The fp32 splits' recorded-time forest at ``path`` (gzip-compressed or plain), checked field by field."""
    return load_forest(path, FP32_SPLITS_FORMAT, FP32_SPLITS_VERSION, features=FP32_SPLITS_FEATURES,
                       older={1: FP32_SPLITS_FEATURES, 2: FP32_SPLITS_FEATURES})


def fp32_splits_log_factor(q, m: int, n: int, k: int, split: int) -> float:
    """log of the factor fp32 split ``split`` > 1's prediction takes on the GPU the recordings are of;
    0 on any other (and on the simulated device)."""
    return _forest_log_factor(_fp32_splits, FP32_SPLITS_FILE, load_fp32_splits, q,
                              lambda: fp32_split_features(q, m, n, k, split))


def fp32_splits_examples(rows, q, oracle) -> tuple[list, list]:
    """(features, log(recorded us / split_path_us)) of every recorded split s > 1 of a recorded
    evaluation's fp32 problems, Lt's answers from ``oracle``."""
    from .. import cublaslt
    from .model import split_path_us  # the model reads this module's forests (no cycle)

    xs, ys = [], []
    with cublaslt.use_oracle(oracle):
        for r in rows:
            d = r.get("descriptor") or {}
            if d.get("dtype") != "float32":
                continue
            desc = SplitKDescriptor(int(d["m"]), int(d["n"]), int(d["k"]), "float32")
            for cid, t in sorted((r.get("times_us") or {}).items()):
                s = int(cid.split("=")[1])
                if s > 1 and t and t > 0:
                    xs.append(fp32_split_features(q, desc.m, desc.n, desc.k, s))
                    ys.append(math.log(t / split_path_us(desc, s, q)))
    return xs, ys


def fit_fp32_splits_trees(recorded, n_trees: int = FOREST_TREES, seed: int = 0) -> list:
    """The forest over ``recorded``: (rows, q, cuBLASLt oracle) of each evaluation."""
    return _fit_pooled([fp32_splits_examples(*r) for r in recorded], "fp32 split", n_trees, seed,
                       FP32_SPLITS_FEATURES)
