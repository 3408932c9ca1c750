"""What the corrected model still misses, learned from recorded times: a forest of log(measured /
corrected model) over features of the problem and the launch (:data:`FEATURES`), its file
(RESIDUAL_FILE, checked field by field), the forest in force (:func:`residual_forest`, :func:`use_residual`)
and its fit (:func:`residual_document`).

Why a forest on top of the physical model and its per-kernel corrections: the corrections are one
factor per compiled kernel, so what depends on the problem within a kernel class stays in the error.
The worst cases left (0.72-0.85 of the best, on about one set of 100 problems in four) were each a
pair of candidates the corrected model had the wrong way round by 10-25%, in patterns no one physical
term took out (tried on the recordings and not kept: a multi-pass synchronisation term, the re-read's
L2 end at 2.0-3.2x the capacity, threads per block in the classes): multi-pass at 1024 threads priced too well
against 512 where rows cycle 16 or more per SM and their re-read sits in L2; persistent blocks at two
per SM on rows of 8-16k values; and the strategy biases (biases.py) covered some of them as groups of
problems only. The forest learns the error where the choice is made: it is fitted on the candidates
within NEAR_LOG of their problem's fastest, measured or predicted (a candidate twice too slow teaches
nothing about which of the close ones wins), and where it applies the heuristic takes the fastest
prediction, without the biases (choice.py).

Like the corrections it applies on the GPU architecture and software its recordings were measured with
(predictor.measured_on), and only on top of the corrections it was fitted over: the shipped file whose
sha256 it records (corrected.residual_in_force)."""

from __future__ import annotations

import functools
import math
from pathlib import Path

from ...errors import CalibError
from .. import predictor as P
from ..forest import check_node, forest_value
from .candidates import KIND, NormDescriptor, descriptor, space
from .occupancy import blocks_per_sm, compiled_registers, registers

RESIDUAL_FILE = Path(__file__).parent.with_name("normalization_residual.json.gz")  # beside the corrections
RESIDUAL_FORMAT, RESIDUAL_VERSION = "calib.heuristics.normalization.residual", 1
FEATURES = ("persistent", "fp16", "layernorm", "vec_bytes", "threads", "buffer", "log2_cols", "log2_rows",
            "rows_per_sm", "blocks_per_sm", "waves", "registers", "working_set_per_l2", "log_predicted_us",
            "vectors_per_thread", "in_flight_per_l2")
# Chosen held out (bench/fit_normalization_residual.py --judge, and the README): the forest's size, each tree's depth
# and leaf, the band of candidates it is fitted on (log of their time over the problem's fastest) and
# the rounds of fitting (fit_trees).
TREES, DEPTH, MIN_LEAF, NEAR_LOG, ROUNDS = 30, 10, 30, 0.15, 2
MAX_TREES = 500


class ResidualError(CalibError, ValueError):
    pass


def features(d: NormDescriptor, k, q, log_predicted_us: float) -> dict:
    """The forest's inputs for launch ``k`` on ``d`` under the profile behind ``q``, whose corrected
    model predicts exp(``log_predicted_us``): the kernel (strategy, dtype, op, access width, block,
    buffer), the problem's shape, how it fills the machine (rows and waves per SM, the blocks an SM
    holds at the kernel's registers: the driver's count where known) and where its bytes sit (working
    set and rows in flight over the L2's scale)."""
    sms = P.sm_count(q)
    threads, vec = int(k["threads"]), int(k["vec"])
    persistent = k["strategy"] == "persistent"
    regs = (compiled_registers(d, k, q) if persistent else None) or registers(d, k, q)[0]
    resident = max(1, blocks_per_sm(threads, min(255.0, regs)))
    per_sm = math.ceil(d.rows / sms)
    l2 = P.l2_scale_bytes(q)
    return {"persistent": float(persistent), "fp16": float(d.dtype == "float16"),
            "layernorm": float(d.op == "layernorm"), "vec_bytes": float(vec * d.itemsize_bytes),
            "threads": float(threads), "buffer": float(k["buffer"]), "log2_cols": math.log2(d.cols),
            "log2_rows": math.log2(d.rows), "rows_per_sm": d.rows / sms, "blocks_per_sm": float(resident),
            "waves": per_sm / min(resident, per_sm), "registers": float(regs),
            "working_set_per_l2": d.bytes_moved / 2 / l2, "log_predicted_us": log_predicted_us,
            "vectors_per_thread": d.cols / (threads * vec),
            "in_flight_per_l2": min(d.rows, sms * resident) * d.cols * d.itemsize_bytes / l2}


def _field(doc, name, kinds, where):
    v = doc.get(name)
    if not isinstance(v, kinds) or isinstance(v, bool):
        raise ResidualError(f"{where}: {name!r} must be {kinds}, not {v!r}"[:300])
    return v


def load_residual(path) -> dict:
    """The residual forest at ``path``, checked field by field; a bad file is a ResidualError naming it."""
    from ... import strict_json
    from ..registry import read_text

    p = Path(path)
    where = f"normalization residual {p}"
    text = read_text(p, "normalization residual", ResidualError)
    try:
        doc = strict_json.loads(text, object_pairs_hook=strict_json.unique_keys)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, a key twice, NaN, > 4300 digits
        raise ResidualError(f"{where} is not strict JSON ({exc})"[:300]) from None
    if not isinstance(doc, dict) or doc.get("format") != RESIDUAL_FORMAT:
        raise ResidualError(f"{where} is not of format {RESIDUAL_FORMAT!r}")
    version = _field(doc, "version", int, where)
    if version != RESIDUAL_VERSION:
        raise ResidualError(f"{where} has version {version}; this calib reads {RESIDUAL_VERSION}")
    if not _field(doc, "device", str, where):
        raise ResidualError(f"{where}: device must name the GPU the recordings are of")
    if P.device_arch({"compute_capability": _field(doc, "compute_capability", str, where)}) is None:
        raise ResidualError(f"{where}: compute_capability {doc['compute_capability']!r} is not a GPU's, as \"9.0\"")
    software = _field(doc, "software", dict, where)
    for name in P.KERNEL_SOFTWARE:
        if not isinstance(software.get(name), str) or not software[name]:
            raise ResidualError(f"{where}, software: {name!r} must be a non-empty version")
    if list(_field(doc, "features", list, where)) != list(FEATURES):
        raise ResidualError(f"{where}: features must be {list(FEATURES)}, not {doc['features']!r}"[:300])
    sha = _field(doc, "corrections_sha256", str, where)
    if len(sha) != 64 or any(ch not in "0123456789abcdef" for ch in sha):
        raise ResidualError(f"{where}: corrections_sha256 must be a sha256 in hex, not {sha!r}"[:300])
    recs = _field(doc, "recordings", list, where)
    if not recs or not all(isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) and x for x in r)
                           for r in recs):
        raise ResidualError(f"{where}: recordings must be a non-empty list of [evaluation, profile] path pairs")
    near = _field(doc, "near_log", (int, float), where)
    if not 0 < near <= 3:
        raise ResidualError(f"{where}: near_log {near!r} is not a band in (0, 3]")
    rounds = doc.get("rounds", 1)
    if not isinstance(rounds, int) or isinstance(rounds, bool) or not 1 <= rounds <= 10:
        raise ResidualError(f"{where}: rounds {rounds!r} is not a count of fitting rounds (1 to 10)")
    trees = _field(doc, "trees", list, where)
    if not 1 <= len(trees) <= MAX_TREES:
        raise ResidualError(f"{where}: trees must be a list of 1 to {MAX_TREES} trees")
    for i, tree in enumerate(trees):
        check_node(tree, FEATURES, f"{where}, trees[{i}]", ResidualError)
    return doc


@functools.lru_cache(maxsize=None)
def _shipped(path: str) -> dict | None:
    return load_residual(path) if Path(path).exists() else None


_active: list = []  # use_residual() stack: a document, or None for no residual


def residual_forest() -> dict | None:
    """The forest in force: the innermost :func:`use_residual`, else the shipped file's (None without it)."""
    return _active[-1] if _active else _shipped(str(RESIDUAL_FILE))


class use_residual:
    """``with use_residual(doc):`` the corrected model applies ``doc`` (None: none), e.g. a fit that
    leaves some recordings out, or the model the forest is fitted on."""

    def __init__(self, doc: dict | None):
        self.doc = doc

    def __enter__(self):
        _active.append(self.doc)
        return self.doc

    def __exit__(self, *exc):
        _active.pop()


def residual_for(q) -> dict | None:
    """The forest in force where it applies to the profile behind ``q`` (its recordings' GPU
    architecture and software), else None."""
    doc = residual_forest()
    if doc is None or not P.measured_on(q, doc["device"], doc["software"], "normalization's residual forest",
                                        doc["compute_capability"]):
        return None
    return doc


def log_factor(doc: dict, d: NormDescriptor, k, q, corrected_us: float) -> float:
    """The forest's log correction of launch ``k`` on ``d``, whose corrected model says ``corrected_us``."""
    return forest_value(doc["trees"], features(d, k, q, math.log(corrected_us)))


def recorded_candidates(recordings) -> list:
    """Per recorded problem of ``recordings`` ((evaluation, profile) path pairs, read as given), its
    candidates as (features, log measured us, log corrected us), each predicted with the profile its
    evaluation read and no residual in force."""
    from ...profile import load_profile
    from ..replay import load
    from .corrected import model_us

    out = []
    with use_residual(None):
        for rec, prof in recordings:
            q = P.q_of(load_profile(prof, device=None, software=None))
            for row in load(rec, KIND)["rows"]:
                times = row.get("times_us")
                if not isinstance(times, dict) or not times:
                    continue
                d = descriptor(row["descriptor"])
                cands = []
                for k in space(d):
                    t, p = times.get(k.autotune_name), model_us(d, k, q)
                    if t and math.isfinite(p):
                        cands.append((features(d, k, q, math.log(p)), math.log(t), math.log(p)))
                if cands:
                    out.append(cands)
    return out


def examples(problems, near_log: float = NEAR_LOG, trees: list | None = None) -> tuple[list, list]:
    """(features, log(measured / corrected model)) of every candidate of ``problems``
    (:func:`recorded_candidates`) within ``near_log`` of its problem's fastest, measured or predicted,
    or, given the ``trees`` of an earlier round, predicted with them."""
    xs, ys = [], []
    for cands in problems:
        best_t, best_p = min(c[1] for c in cands), min(c[2] for c in cands)
        pulled = [lp + forest_value(trees, x) for x, _, lp in cands] if trees else None
        best_f = min(pulled) if pulled else 0.0
        for i, (x, lt, lp) in enumerate(cands):
            if lt <= best_t + near_log or lp <= best_p + near_log or (pulled and pulled[i] <= best_f + near_log):
                xs.append(x)
                ys.append(lt - lp)
    return xs, ys


def fit_trees(problems, n_trees: int = TREES, seed: int = 0, rounds: int = ROUNDS) -> tuple[list, int]:
    """(the forest, the examples its last round was fitted on): ``rounds`` fits, each on the candidates
    near their problem's fastest by the measured time, the corrected model, or the previous round's
    forest. The second round takes in what the first pulled near without an example near it: on an
    H100 (seed 180, live), fp16 persistent v2 x 128 blocks on layer-norm rows of 25k values, which the
    corrected model had priced slow on every H200 recording (rightly: they never came near the best
    there), were pulled to the front by a one-round forest and ran 1.36x the best."""
    from ..forest import fit_forest

    if not problems:
        raise ResidualError("fitting the normalization residual needs recorded candidate times")
    trees, n = None, 0
    for _ in range(rounds):
        xs, ys = examples(problems, NEAR_LOG, trees)
        trees, n = fit_forest(xs, ys, FEATURES, n_trees, DEPTH, MIN_LEAF, seed), len(ys)
    return trees, n


def residual_document(recordings, note: str = "", device: str = "NVIDIA H200", seed: int = 0,
                      root: Path = Path(".")) -> dict:
    """The JSON of RESIDUAL_FILE fitted on ``recordings`` ((evaluation, profile) path pairs as the
    file names them, read under ``root``: the repository's) of ``device``'s evaluations."""
    from .corrected import shipped_sha256

    read = [(Path(root) / r, Path(root) / p) for r, p in recordings]
    trees, n = fit_trees(recorded_candidates(read), TREES, seed)
    return {"format": RESIDUAL_FORMAT, "version": RESIDUAL_VERSION, "note": note, "device": device,
            "software": P.recorded_software(read),
            "compute_capability": P.recorded_arch(p for _r, p in read),
            "corrections_sha256": shipped_sha256(),
            "recordings": [[str(r), str(p)] for r, p in recordings],
            "statistic": "log(measured / corrected model_us), candidates within near_log of their problem's "
                         "fastest (measured, predicted, or predicted with the previous round's forest)",
            "near_log": NEAR_LOG, "rounds": ROUNDS, "examples": n, "depth": DEPTH, "min_leaf": MIN_LEAF,
            "bootstrap_seed": seed, "features": list(FEATURES), "trees": trees}

