"""The committed H200 heuristic evaluations (every candidate's device time per problem), one table
for the replay tests: recording -> (folder under bench/results, seed, the profile the
evaluation read). A recording replays with its own profile: its predictions were made from it.
bench/results stores every recording (evaluations, probes, traces) gzip-compressed
(``heuristics-KIND.json.gz``, ``gzip -9 -n``); :func:`read_json` reads one (or a plain one)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

R = Path(__file__).resolve().parents[1] / "bench" / "results"
HOST1 = "2026-12-01-h200-heuristics-seed0/profile-call3-full.json"
HOST2 = "2026-12-01-h200-heuristics-after/profile-call5-full.json"  # B, C; D and E ran with the shipped copy
HOST4 = "2026-12-01-h200-heuristics-live5/profile-call3-full.json"  # F, G; shipped when H, I and J ran
HOST7 = "2026-12-02-h200-suites-session3/profile-full.json"  # shipped when K-P ran
S5C2 = "2026-12-02-h200-session5-call2/profile-full.json"  # shipped since session 5 (Q, R ran with it)
FOLDERS = {
    "A": ("2026-12-01-h200-heuristics-seed0", 0, HOST1),
    "B": ("2026-12-01-h200-heuristics-after", 0, HOST2),
    "C": ("2026-12-01-h200-heuristics-after/seed1", 1, HOST2),
    "D": ("2026-12-01-h200-heuristics-live3/seed1", 1, HOST2),
    "E": ("2026-12-01-h200-heuristics-live3/seed2", 2, HOST2),
    "F": ("2026-12-01-h200-heuristics-live5/seed3", 3, HOST4),
    "G": ("2026-12-01-h200-heuristics-live5/seed2", 2, HOST4),
    "H": ("2026-12-01-h200-heuristics-live6/seed4", 4, HOST4),
    "I": ("2026-12-02-h200-heuristics-s3c1/seed6", 6, HOST4),
    "J": ("2026-12-02-h200-heuristics-s3c1/seed7", 7, HOST4),
    "K": ("2026-12-02-h200-heuristics-s3c3/seed5", 5, HOST7),
    "L": ("2026-12-02-h200-heuristics-s3c3/seed8", 8, HOST7),
    # the live check of session 3's final models (seed 9, unseen when it ran); since fitted on by
    # normalization's corrections and pair bias (50fae4a) and split-K's margin (44f86bf)
    "M": ("2026-12-02-h200-heuristics-s3c6/seed9", 9, HOST7),
    # the live check of session 4's models (seed 10, unseen when it ran; the profile then shipped)
    "N": ("2026-12-02-h200-heuristics-s4c1/seed10", 10, HOST7),
    # seed 11, unseen when it ran, with split-K asking cuBLASLt live (6148d09); the shipped profile
    "O": ("2026-12-02-h200-heuristics-s4c4/seed11", 11, HOST7),
    # seed 12, unseen when it ran (the same code as O's and the same profile; a 13th host)
    "P": ("2026-12-02-h200-heuristics-s4c5/seed12", 12, HOST7),
    # seeds 13 and 14, unseen when they ran (session 5's models: L2 thresholds on the hardware L2,
    # normalization's block pace and in-flight share, split-K's whole-wave cuBLASLt kernels), on the
    # refreshed shipped profile; the machine of session 5 call 3 (a 15th host)
    "Q": ("2026-12-02-h200-heuristics-s5c4/seed13", 13, S5C2),
    "R": ("2026-12-02-h200-heuristics-s5c4/seed14", 14, S5C2),
    # seed 15, unseen when it ran (normalization's stagger term, split-K's per-partial reduction), a 16th host
    "S": ("2026-12-02-h200-heuristics-s5c5/seed15", 15, S5C2),
    # seeds 16-18, unseen when they ran (session 6's split-K: the batched choice for 16-row outputs, its
    # margin, the serial chain; the learned model on the hardware L2's scale), the shipped profile
    "T": ("2026-12-02-h200-heuristics-s6c2/seed16", 16, S5C2),
    "U": ("2026-12-02-h200-heuristics-s6c2/seed17", 17, S5C2),
    "V": ("2026-12-02-h200-heuristics-s6c2/seed18", 18, S5C2),
    # seeds 19-22, unseen when they ran (session 6's final models: split-K's batched choice for every
    # output but lone-CTA resident grids, the lowered split 1 of 33-48-row outputs), a 18th host
    "W": ("2026-12-02-h200-heuristics-s7c1/seed19", 19, S5C2),
    "X": ("2026-12-02-h200-heuristics-s7c1/seed20", 20, S5C2),
    "Y": ("2026-12-02-h200-heuristics-s7c1/seed21", 21, S5C2),
    "Z": ("2026-12-02-h200-heuristics-s7c1/seed22", 22, S5C2),
    # seeds 23-25, unseen when they ran (session 6's final models again, a 19th host); past Z the
    # recordings are named by their seed
    "23": ("2026-12-02-h200-heuristics-s7c2/seed23", 23, S5C2),
    "24": ("2026-12-02-h200-heuristics-s7c2/seed24", 24, S5C2),
    "25": ("2026-12-02-h200-heuristics-s7c2/seed25", 25, S5C2),
}
# Split-K alone on 1000 problems each of seeds no evaluation uses (2026-12-04, session 12 call 2, the
# shipped profile, frozen beside them; cuBLASLt's live answers in each file): what split-K's fp16
# split-1 correction is fitted on besides FOLDERS. Not a recording of issue 14's evaluation.
TRAIN = "2026-12-04-h200-splitk-training"
TRAINING = {str(seed): (f"{TRAIN}/splitk-seed{seed}", seed, f"{TRAIN}/profile-shipped.json")
            for seed in (1000, 1001, 1002)}
# Seeds 42-54, live with the forests of those three (session 12 call 3, 2026-12-04; 42-44 every kind,
# 45-54 split-K alone), unseen when they ran; since then fitted on by both forests. Their live results
# are in bench/results/2026-12-04-h200-heuristics-s12c3/README.md.
S12C3 = "2026-12-04-h200-heuristics-s12c3"
TRAINING.update({str(seed): (f"{S12C3}/{'heuristics' if seed < 45 else 'splitk'}-seed{seed}", seed,
                             f"{S12C3}/profile-shipped.json") for seed in range(42, 55)})
# Split-K alone on fp32 problems of at most 64 output rows (bench/splitk_focus.py, seeds 2000 and up),
# where its worst cases live (2026-12-06, session 13; the shipped profile): what split-K's fp32
# forests are fitted on besides TRAINING. Not a recording of issue 14's evaluation.
FOCUS_DIR = "2026-12-06-h200-splitk-focus"
FOCUS = {f"f{seed}": (f"{FOCUS_DIR}/splitk-focus{seed}", seed, f"{FOCUS_DIR}/profile-shipped.json")
         for seed in (2000, 2001, 2002)}
# Normalization's live H200 checks of seeds 26-44 (sessions 10-12, 2026-12-03/04), unseen when they ran:
# what the residual forest (calib/heuristics/normalization/residual.py) is fitted on besides FOLDERS. Each
# ran with the shipped profile, frozen beside seeds 42-44 (unchanged since 2026-12-02). The later live
# checks (seeds 100-111 of session 19, session 22's, every H100 one) stay out of it: they judge it, and
# the model-error band is fitted on them.
NORM_LIVE_DIRS = {**{s: f"2026-12-03-h200-heuristics-s10/seed{s}" for s in (26, 27, 28)},
                  **{s: f"2026-12-03-h200-heuristics-s10c2/seed{s}" for s in (29, 30, 31)},
                  **{s: f"2026-12-03-h200-heuristics-s11/heuristics-seed{s}" for s in (32, 33, 34)},
                  **{s: f"2026-12-03-h200-heuristics-s11c2/heuristics-seed{s}" for s in (35, 36, 37)},
                  **{s: f"2026-12-04-h200-heuristics-s12/heuristics-seed{s}" for s in (38, 39, 40, 41)},
                  **{s: f"{S12C3}/heuristics-seed{s}" for s in (42, 43, 44)}}
NORM_LIVE = {str(seed): (folder, seed, f"{S12C3}/profile-shipped.json") for seed, folder in NORM_LIVE_DIRS.items()}


def normalization_residual_recordings() -> list[tuple[str, str]]:
    """(evaluation, profile) of every recording the residual forest is fitted on, relative to ``R``:
    FOLDERS (with the profiles they ran with), then NORM_LIVE."""
    return [(f"{folder}/heuristics-normalization.json.gz", prof)
            for folder, _seed, prof in (*FOLDERS.values(), *NORM_LIVE.values())]


FITTED = "ABCDEFGHIJKL"  # what session 3's models and corrections were fitted or judged on (session 4's: + M)
SEEDS = {name: seed for name, (_, seed, _) in FOLDERS.items()}


def recordings(kind: str, names=None) -> dict:
    """name -> (recording, profile), relative to ``R``, for ``kind``'s evaluations. ``names``: None
    (all), one name, a string of one-letter names ("ABCM") or a list of names."""
    if isinstance(names, str):
        names = [names] if names in FOLDERS else list(names)
    return {n: (f"{folder}/heuristics-{kind}.json.gz", prof) for n, (folder, _, prof) in FOLDERS.items()
            if names is None or n in names}


def read_json(path):
    """The JSON of the recording at ``path`` (an evaluation, a probe's answers, a trace), decompressed
    where the name ends in .gz (as bench/results stores them), as is where it is plain JSON: read as a
    replay reads a recording (calib.heuristics.registry.read_text)."""
    from calib.heuristics.registry import read_text

    return json.loads(read_text(Path(path), "recording", ValueError))


def assert_meets_every_bar(res: dict) -> None:
    """Issue 14's bars on an evaluation's result: all 100 problems, no failed choice, geomean >= 0.97 and
    worst >= 0.85 of the exhaustive best, ahead of the static baseline, memory-bound predictor median <= 5%."""
    h, b = res["summary"]["heuristic"], res["summary"]["baseline"]
    assert res["evaluated"] == 100 and h["choice_failed"] == 0
    assert h["geomean_efficiency"] >= 0.97 and h["worst_efficiency"] >= 0.85, h
    assert h["geomean_efficiency"] > b["geomean_efficiency"]
    assert res["prediction"]["memory_bound"]["median_abs_rel_error"] <= 0.05


# normalization's model and corrections as the recordings of 2026-12-07 ran them. Before 52bab02 (the H200
# s19 and H100 s21 runs; older recordings ran older models): every persistent kernel priced as the mean over
# the rule's register count +- REGS_SPREAD, not at the driver's count (normalization.scalar_access). From
# 52bab02 to the change that timed every scalar-load (vec 1) kernel at its count (the H200 s22 runs, commit
# 95d3918): the fp16 scalar-load (2-byte access) kernels alone at their count, fp32's v1 over the spread.
# Each with the corrections file the runs read, kept whole under tests/fixtures (the shipped file at c2406f3
# and at 95d3918; the recordings it names since stored .json.gz), so a later refit of the shipped one cannot
# move them. A replay that must give a live run's numbers back runs inside one of these.
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@contextlib.contextmanager
def _scalar_kernels_as_they_ran(scalar_access, corrections_file: str, pooled_bias: bool):
    from calib.heuristics import normalization as N
    from calib.heuristics.normalization import model as N_model

    old = N.load_corrections(FIXTURES / corrections_file)
    if pooled_bias:
        old = dataclasses.replace(old, persistent_bias_by_dtype=None)
    saved = N_model.scalar_access
    N_model.scalar_access = scalar_access
    try:
        with N.use_corrections(old):
            yield old
    finally:
        N_model.scalar_access = saved


def narrow_kernels_as_they_ran(pooled_bias: bool = False):
    """The model and corrections of before the narrow (fp16 scalar-load) kernels were timed at their compiled
    register count (52bab02): no kernel at its count, every persistent one over the spread; ``pooled_bias``:
    also one few-rows bias for every dtype (the pooled one), as before version 6 of the file."""
    return _scalar_kernels_as_they_ran(lambda d, k: False, "normalization_corrections_c2406f3.json", pooled_bias)


def fp16_scalar_kernels_as_they_ran():
    """The model and corrections of 52bab02-95d3918 (session 22's H200 runs): the fp16 scalar-load (2-byte
    access) kernels timed at their compiled register count, the fp32 scalar-load ones over the spread."""
    return _scalar_kernels_as_they_ran(lambda d, k: int(k["vec"]) * d.itemsize_bytes <= 2,
                                       "normalization_corrections_95d3918.json", False)
