"""``calib report``, ``calib merge``, and what ``calib show`` accepts besides a profile (a run
folder, a fragment). Hooked into ``calib.cli`` by :func:`add_review_parsers` and
:func:`open_for_show`."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

from .errors import CalibError


class MergeError(CalibError, ValueError):
    """Fragments that cannot be merged into one profile (unreadable, or of different devices)."""


def _is_fragment(path: Path) -> bool:
    from .calibration import FRAGMENT_SCHEMA

    if not path.is_file() or path.stat().st_size > 16 * 2**20:
        return False
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):  # nested past the parser: no fragment
        return False
    return isinstance(doc, dict) and doc.get("schema") == FRAGMENT_SCHEMA


def _fragment_profile(path: Path):
    from .calibration import read_fragment
    from .profile import Profile

    doc = read_fragment(path)
    notes = [doc["note"]] if doc.get("note") else []
    if doc.get("failures"):
        notes += [f"not fitted: {name}: {why}" for name, why in doc["failures"].items()]
    return Profile(doc.get("params") or {}, device=doc.get("device"), software=doc.get("software"),
                   created=doc.get("created"), path=path, origin="fragment", notes=notes)


def open_for_show(args, open_profile):
    """The profile ``calib show`` prints: a run folder's profile (its snapshot, ``profile.json``, or
    its fragments merged), a fragment's parameters, or else a profile by the usual lookup
    (``open_profile(args)``)."""
    from . import runfolder

    path = Path(args.profile) if args.profile else None
    if path is not None and path.is_dir():
        snap = path / runfolder.PROFILE
        if snap.is_file():
            inner = copy.copy(args)
            inner.profile = str(snap)
            profile = open_profile(inner)
            profile.origin = f"run folder {path}"
            return profile
        return runfolder.RunFolder(path).profile()
    if path is not None and _is_fragment(path):
        return _fragment_profile(path)
    return open_profile(args)


def _cmd_report(args) -> int:
    from .html_report import write_report

    from . import atomic

    path = write_report(args.run_dir, args.output)
    print(f"wrote {path}", file=atomic.report_stream(path))  # `-o /dev/stdout` carries the report alone
    return 0


def _expand(paths) -> list[Path]:
    """Fragments named, and those of a run folder named (its per-calibration folders included)."""
    from . import runfolder

    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob(f"*/{runfolder.FRAGMENT_GLOB}")) + sorted(p.glob(runfolder.FRAGMENT_GLOB))
            if not found:
                raise MergeError(f"{p} holds no fragment-*.json (in it or its calibration folders)")
            out += found
        else:
            out.append(p)
    return out


def merge_fragments(paths, profile_path=None):
    """Merge fragments (hand-run notebooks' ``fragment-<calibration>.json``, or run folders) into a
    profile: ``profile_path``, else this device's profile in the user data folder. Fragments of
    different devices are refused; a later fragment's parameter replaces an earlier one's.
    Returns (profile path, merged parameters, simulated)."""
    from . import fingerprint as fp
    from .calibration import read_fragment
    from .profile import ProfileError, merge_into, user_profiles_dir

    docs = []
    for p in _expand(paths):
        try:  # read_fragment says what is wrong: missing, a FIFO or device, too big, not a fragment
            docs.append((p, read_fragment(p)))
        except ProfileError as exc:
            raise MergeError(str(exc)) from None
    if not docs:
        raise MergeError("no fragment given")
    first_path, first = docs[0]
    for p, doc in docs[1:]:
        diffs = fp.hard_differences(doc.get("device") or {}, first.get("device") or {})
        if diffs:
            raise MergeError(f"{p} and {first_path} were measured on different devices: {'; '.join(diffs)}")
    params = {}
    for _p, doc in docs:
        params.update(doc.get("params") or {})
    device, software = first.get("device") or {}, first.get("software") or {}
    target = Path(profile_path) if profile_path else user_profiles_dir() / f"{fp.device_slug(device)}.json"
    merge_into(target, params, device=device, software=software)
    return target, params, bool(device.get("simulated"))


def _cmd_merge(args) -> int:
    from .report import format_table

    target, params, simulated = merge_fragments(args.fragments, args.profile)
    print(format_table(params, simulated=simulated))
    print(f"\nmerged {len(params)} parameters from {len(args.fragments)} argument(s) into {target}")
    if simulated:
        print("SIMULATED DEVICE: these parameters come from the simulated device.", file=sys.stderr)
    return 0


def add_review_parsers(sub):
    r = sub.add_parser("report", help="write a run folder's self-contained HTML report")
    r.add_argument("run_dir", metavar="RUN_DIR")
    r.add_argument("-o", "--output", metavar="FILE", help="write here (default: RUN_DIR/report.html)")
    r.set_defaults(func=_cmd_report)
    m = sub.add_parser("merge", help="merge fragments (e.g. of notebooks run by hand) into a profile")
    m.add_argument("fragments", nargs="+", metavar="FRAGMENT", help="fragment-<calibration>.json, or a run folder")
    m.add_argument("--profile", metavar="PATH", help="the profile to merge into (default: this device's in the "
                                                       "user data folder)")
    m.set_defaults(func=_cmd_merge)
