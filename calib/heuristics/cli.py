"""``calib heuristics evaluate``: the heuristics against exhaustive search, from the shell.

Hooked into calib's parser by ``add_heuristics_parser(sub)``."""

from __future__ import annotations

import json
import sys

from .registry import KINDS


def add_heuristics_parser(sub):
    h = sub.add_parser("heuristics", help="scheduling heuristics: evaluate them against exhaustive search")
    hs = h.add_subparsers(dest="action", required=True)
    e = hs.add_parser("evaluate", help="per problem: time of the heuristic's choice over the exhaustive best")
    e.add_argument("--kind", required=True, choices=KINDS)
    e.add_argument("--problems", metavar="FILE", help="JSON lines of descriptors (default: the seeded generator)")
    e.add_argument("--count", type=int, default=100, help="problems drawn by the generator (default 100)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--backend", choices=["auto", "cupy", "sim"], default="auto")
    e.add_argument("--sim-spec", metavar="FILE")
    e.add_argument("--profile", metavar="PATH", help="the profile the heuristics read (default: the lookup order; "
                   "on the simulated device, a simulated calibration of it)")
    e.add_argument("--db", help="tuning database URL for the exhaustive search (default: memory on the simulated "
                   "device, the user's autotune database on a GPU)")
    e.add_argument("--max-bytes", type=float, help="largest problem the generator draws, in bytes")
    e.add_argument("--budget-s", type=float, help="start no problem after this many seconds")
    e.add_argument("--json", action="store_true", help="the whole result as JSON on stdout")
    e.add_argument("--out", metavar="PREFIX", help="also write PREFIX.json and PREFIX.md")
    e.add_argument("--progress", action="store_true", help="progress lines on stderr")
    e.set_defaults(func=run_heuristics)


def run_heuristics(args) -> int:
    from .evaluate import evaluate, read_problems, to_markdown

    problems = None
    if args.problems:
        problems, bad = read_problems(args.kind, args.problems)
        for line in bad:
            print(f"calib heuristics: skipped {line}", file=sys.stderr)
    profile = None
    if args.profile:
        from ..profile import load_profile

        profile = load_profile(args.profile)
    res = evaluate(args.kind, problems, backend=args.backend, count=args.count, seed=args.seed, db=args.db,
                   profile=profile, sim_spec=args.sim_spec, max_bytes=args.max_bytes, budget_s=args.budget_s,
                   progress=sys.stderr if args.progress else None)
    if args.out:
        from pathlib import Path

        Path(args.out + ".json").write_text(json.dumps(res, indent=1, allow_nan=False, default=str) + "\n")
        Path(args.out + ".md").write_text(to_markdown(res))
    if args.json:
        print(json.dumps(res, indent=1, allow_nan=False, default=str))
    else:
        sys.stdout.write(to_markdown(res))
    return 0
