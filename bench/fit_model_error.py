"""Fit the family models' error band (calib/heuristics/model_error.json) on recorded evaluations.

    python bench/fit_model_error.py [--profile profiles/nvidia-h200.json] [--write]
        [--kinds pointwise,normalization,matmul_splitk] [--shipped-recordings]

Takes every recorded evaluation under bench/results of the profile's GPU model that keeps every
candidate's time, leaves out the recordings a shipped correction was fitted on
(model_error.training_recordings) and those whose content another one already has, and replays
each candidate's prediction against its measured time. Prints per kind the bins, the coverage of
each recording by the band fitted on the others (leave-one-recording-out), and that of the
heuristics' own choices; --write stores the band as that GPU model's (the others' stay). Takes about
a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import statistics
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calib import atomic  # noqa: E402
from calib.heuristics import model_error as ME  # noqa: E402
from calib.heuristics import replay  # noqa: E402
from calib.profile import read_profile  # noqa: E402

PROFILE = "profiles/nvidia-h200.json"


def recordings(kind: str, device: str) -> list[Path]:
    """Recorded evaluations of ``kind`` on ``device``, each content once, no correction's."""
    training = ME.training_recordings()
    seen, out = set(), []
    for p in sorted(ROOT.glob(f"bench/results/**/heuristics-{kind}.json*")):
        rel = str(p.relative_to(ROOT))
        if rel in training or not p.name.endswith((".json", ".json.gz")):
            continue
        data = p.read_bytes()
        text = gzip.decompress(data) if p.name.endswith(".gz") else data
        digest = hashlib.sha256(text).hexdigest()
        if digest in seen:
            continue
        try:
            rec = replay.load(p, kind)
        except replay.ReplayError:  # written before every candidate's time was kept
            continue
        if rec["device"].get("name") != device or rec.get("simulated"):
            continue
        seen.add(digest)
        out.append(p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"store the band in {ME.FILE.relative_to(ROOT)}")
    ap.add_argument("--kinds", default="pointwise,normalization,matmul_splitk")
    ap.add_argument("--profile", default=PROFILE, help="the profile the recordings replay with; its GPU model's "
                    f"recordings are fitted (default {PROFILE})")
    ap.add_argument("--shipped-recordings", action="store_true",
                    help="refit each kind on the recordings its shipped band lists (less those a correction is now "
                         "fitted on), not on every one there is: a model change refits the band it judged without "
                         "taking in recordings that judge the band itself")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # a recording under older software warns once per correction
    profile = read_profile(ROOT / args.profile)
    device = profile.device["name"]
    bins, fitted_on = {}, {}
    print("| kind | recordings | candidates | bins (upto us: band) | LORO coverage mean / min | choices |")
    print("|---|---|---|---|---|---|")
    shipped = next((me for me in ME.load(ME.FILE) if me.device == device), None) if ME.FILE.exists() else None
    for kind in args.kinds.split(","):
        paths = recordings(kind, device)
        if args.shipped_recordings:
            listed = {f["recording"] for f in (shipped.fitted_on.get(kind, []) if shipped is not None else [])}
            paths = [p for p in paths if str(p.relative_to(ROOT)) in listed]
        per = [ME.recording_errors(kind, p, profile) for p in paths]
        pairs = [pr for prs in per for pr in prs]
        bins[kind] = ME.fit_bins(pairs)
        fitted_on[kind] = [{"recording": str(p.relative_to(ROOT)), "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                            **ME.recording_summary(prs)} for p, prs in zip(paths, per)]
        loro = ME.leave_one_out_coverage(per)
        me = ME.ModelError(device, {}, {kind: bins[kind]}, {})
        choices = choice_coverage(kind, paths, profile, me)
        shown = "; ".join(f"{'inf' if math.isinf(b.upto_us) else f'{b.upto_us:.3g}'}: "
                          f"{math.exp(b.log_lo):.3f}-{math.exp(b.log_hi):.3f} (n {b.n})" for b in bins[kind])
        print(f"| {kind} | {len(paths)} | {len(pairs)} | {shown} | {statistics.mean(loro):.3f} / {min(loro):.3f} "
              f"| {choices} |", flush=True)
    if args.write:
        from calib.heuristics.predictor import KERNEL_SOFTWARE

        software = {k: v for k, v in (profile.software or {}).items() if k in KERNEL_SOFTWARE}
        bands = list(ME.load(ME.FILE)) if ME.FILE.exists() else []
        old = next((me for me in bands if me.device == device), None)
        kept = sorted(set(old.bins) - set(bins)) if old is not None else []
        if kept and old.software != software:  # one band, one software: the kept kinds' would be mislabelled
            print(f"not written: {', '.join(kept)} would keep a band fitted under other software "
                  f"({old.software}); refit every kind (--kinds) with this profile", file=sys.stderr)
            return 2
        if old is not None:  # a kind not refitted keeps its band
            bins = {**{k: b for k, b in old.bins.items() if k not in bins}, **bins}
            fitted_on = {**{k: f for k, f in old.fitted_on.items() if k not in fitted_on}, **fitted_on}
        new = ME.ModelError(device, software, bins, fitted_on, args.profile)
        doc = ME.to_doc([new if me is old else me for me in bands] + ([new] if old is None else []))
        atomic.replace(ME.FILE, (json.dumps(doc, indent=1) + "\n").encode(), ME.ModelErrorError)
        print(f"wrote {ME.FILE.relative_to(ROOT)}")
    return 0


def choice_coverage(kind, paths, profile, me) -> str:
    """How often the band, fitted on every recording, holds the heuristic's own choice (in-sample)."""
    from calib.heuristics import evaluate

    inside = n = 0
    for p in paths:
        res = evaluate.evaluate(kind, backend=f"replay:{p}", profile=profile)
        for r in res["rows"]:
            if r.get("predicted_us") and r.get("heuristic_us"):
                b = me.bin_for(kind, r["predicted_us"])
                inside += b.log_lo <= math.log(r["heuristic_us"] / r["predicted_us"]) <= b.log_hi
                n += 1
    return f"{inside / n:.3f} of {n}" if n else "none"


if __name__ == "__main__":
    raise SystemExit(main())
