"""``calib heuristics evaluate``: the heuristics against exhaustive search, from the shell.

Hooked into calib's parser by ``add_heuristics_parser(sub)``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .. import cli_args
from .registry import KINDS

# Each problem is an exhaustive search of its candidates: a hundred thousand is days of GPU time,
# and more is a typo (10**20 would be drawn into memory before anything ran).
MAX_COUNT = 100_000
# Below this the matmul generator rejects nearly every draw (under 32 KiB, every one: it looped for
# ever); no problem so small says anything about a heuristic.
MIN_MAX_BYTES = 2**20


def add_heuristics_parser(sub):
    h = sub.add_parser("heuristics", help="scheduling heuristics: evaluate them against exhaustive search")
    hs = h.add_subparsers(dest="action", required=True)
    e = hs.add_parser("evaluate", help="per problem: time of the heuristic's choice over the exhaustive best")
    e.add_argument("--kind", required=True, choices=KINDS)
    e.add_argument("--problems", metavar="FILE", help="JSON lines of descriptors (default: the seeded generator)")
    e.add_argument("--count", type=cli_args.at_most(cli_args.positive_int, MAX_COUNT), default=100,
                   help="problems drawn by the generator (default 100)")
    e.add_argument("--seed", type=cli_args.non_negative_int, default=0)
    e.add_argument("--backend", type=_backend, default="auto",
                   help="auto, cupy, sim, or replay:FILE.json (every candidate's time from an evaluation "
                   "recorded on a GPU with --out; FILE.json.gz is read decompressed)")
    e.add_argument("--sim-spec", metavar="FILE")
    e.add_argument("--profile", metavar="PATH", help="the profile the heuristics read (default: the lookup order; "
                   "on the simulated device, a simulated calibration of it)")
    e.add_argument("--db", help="tuning database URL for the exhaustive search (default: memory on the simulated "
                   "device, the user's autotune database on a GPU)")
    e.add_argument("--max-bytes", type=cli_args.float_at_least(MIN_MAX_BYTES, what=" bytes"),
                   help="largest problem the generator draws, in bytes")
    e.add_argument("--budget-s", type=cli_args.positive_float, help="start no problem after this many seconds")
    e.add_argument("--json", action="store_true", help="the whole result as JSON on stdout")
    e.add_argument("--out", metavar="PREFIX", help="also write PREFIX.json and PREFIX.md")
    e.add_argument("--progress", action="store_true", help="progress lines on stderr")
    e.set_defaults(func=run_heuristics)


def _backend(text: str) -> str:
    if text in ("auto", "cupy", "sim"):
        return text
    if text.startswith("replay:") and len(text) > len("replay:"):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: give auto, cupy, sim or replay:FILE.json")


def run_heuristics(args) -> int:
    from .evaluate import evaluate, read_problems, to_markdown

    _check_paths_given(args)
    if args.out:
        _check_out(args.out)  # before the evaluation, not after an hour of it
    if args.db and args.backend.startswith("replay:"):
        raise cli_args.BadArgument("--db with --backend replay: a replay times nothing and records nothing")
    if args.db:
        from ..autotune.storage import AutotuneDB

        # Opened (and migrated) now: a bad URL, a file that is not SQLite, a path under a file was
        # each problem's own error later, and the evaluation exited 0 with "0 of N evaluated".
        _ = AutotuneDB(args.db).store
    problems = None
    if args.problems is not None:
        problems, bad = read_problems(args.kind, args.problems)
        for line in bad:
            print(f"calib heuristics: skipped {line}", file=sys.stderr)
    # --profile: a path, which evaluate reads strictly (named and unreadable is an error, not the defaults)
    res = evaluate(args.kind, problems, backend=args.backend, count=args.count, seed=args.seed, db=args.db,
                   profile=args.profile, sim_spec=args.sim_spec, max_bytes=args.max_bytes, budget_s=args.budget_s,
                   progress=sys.stderr if args.progress else None)
    as_json = json.dumps(res, indent=1, allow_nan=False, default=str) + "\n"
    # stdout first: a result that cannot be written to --out (a full disk) is still shown, not lost
    sys.stdout.write(as_json if args.json else to_markdown(res))
    sys.stdout.flush()
    if args.out:
        _write_both({args.out + ".json": as_json, args.out + ".md": to_markdown(res)})
    return 0


def _check_paths_given(args):
    """A path option given empty (``--out "$UNSET"``) is an error, not the option left out: an empty
    --out wrote nothing and exited 0, an empty --profile evaluated on the default profile, and an
    empty --db recorded a simulated evaluation's searches in the user's own autotune database."""
    for option, what in (("problems", "a JSON-lines file of descriptors"), ("profile", "a profile file"),
                         ("out", "a prefix for PREFIX.json and PREFIX.md"), ("db", "a tuning database URL")):
        value = getattr(args, option)
        if value is not None and not value.strip():
            raise cli_args.BadArgument(f"--{option}: the path is empty; give {what}")


def _write_both(texts: dict):
    """Each file to a temporary file beside it, and only when all are written, each renamed over its
    target: a full disk leaves neither PREFIX.json nor PREFIX.md changed (it had left a new .json
    beside an old or missing .md), and no half-written file."""
    from .. import atomic

    done, target = {}, None
    streams = {t: text for t, text in texts.items() if atomic.is_stream(t)}  # a FIFO: written in place, last
    try:
        for target, text in texts.items():
            if target not in streams:
                done[target] = atomic.temporary_beside(atomic.target(target), text.encode("utf-8"))
        for target, tmp in done.items():
            os.replace(tmp, atomic.target(target))
            done[target] = None
        for target, text in streams.items():
            atomic.write_stream(target, text.encode("utf-8"), cli_args.BadArgument)
    except OSError as exc:
        for tmp in done.values():
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
        where = target or ", ".join(texts)
        raise cli_args.BadArgument(f"--out: cannot write {where}: {exc.strerror or exc} (the result is on "
                                   "stdout above)") from None


def _check_out(prefix: str):
    """``--out PREFIX``: its folder exists and is writable, PREFIX names a file in it (not the
    folder itself: ``dir/`` wrote ``dir/.json``), and neither PREFIX.json nor PREFIX.md is a folder."""
    folder, name = os.path.split(prefix)
    folder = Path(folder or ".")
    if not name or name in (".", ".."):
        raise cli_args.BadArgument(f"--out {prefix} names a folder: give a prefix, e.g. {folder / 'result'}")
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise cli_args.BadArgument(f"--out {prefix}: the folder {folder} {what}")
    for suffix in (".json", ".md"):
        target = Path(prefix + suffix)
        if target.is_dir():
            raise cli_args.BadArgument(f"--out: {target} is a folder")
    if not os.access(folder, os.W_OK):
        raise cli_args.BadArgument(f"--out {prefix}: the folder {folder} is not writable")
