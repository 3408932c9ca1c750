"""Command line: ``calib run``, ``calib show``, ``calib query``."""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from . import __version__


def _cmd_run(args) -> int:
    from .report import format_table
    from .runner import RunError, run

    try:
        result = run(backend=args.backend, sim_spec=args.sim_spec, device=args.device, suite=args.suite,
                     profile_path=args.profile, run_dir=args.run_dir, notebooks=args.notebook or None,
                     progress=not args.no_progress, reason=args.reason)
    except RunError as exc:
        print(f"calib run: error: {exc}", file=sys.stderr)
        return 2
    print()
    print(format_table(result.params, simulated=result.simulated))
    print(f"\nprofile: {result.profile_path}\nrun folder: {result.run_dir}\nwall time: {result.wall_s:.1f} s")
    if result.simulated:
        print("SIMULATED DEVICE: the profile above is a demo of the pipeline, not a measurement of this machine.")
    if result.failed:
        for nb, why in result.failed:
            print(f"FAILED {nb}: {why}", file=sys.stderr)
        return 1
    return 0


def _open(args):
    from .profile import load_profile

    device = None if args.no_device_check else "auto"
    return load_profile(args.profile, device=device, software=device, strict=getattr(args, "strict", False))


def _cmd_show(args) -> int:
    from .profile import ProfileError
    from .report import format_table

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            profile = _open(args)
        except ProfileError as exc:
            print(f"calib show: error: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(profile.to_document(), indent=2))
        return 0
    print(f"profile: {profile.path or '(none)'}  [{profile.origin}]")
    if profile.device:
        d = profile.device
        print(f"device: {d.get('name')}  cc {d.get('compute_capability')}  SMs {d.get('sm_count')}"
              f"{'  SIMULATED' if d.get('simulated') else ''}")
    if profile.software:
        print("software: " + ", ".join(f"{k} {v}" for k, v in profile.software.items()))
    if profile.created:
        print(f"created: {profile.created}")
    for w in caught:
        print(f"warning: {w.message}")
    for note in profile.notes:
        if not any(note in str(w.message) for w in caught):
            print(f"note: {note}")
    if profile.unusable:
        print(f"UNUSABLE: {profile.unusable}")
    print()
    print(format_table(profile, simulated=profile.simulated))
    return 0


def _cmd_query(args) -> int:
    from .profile import ProfileError

    strict = args.strict or args.default is None
    try:
        profile = _open(args)
        if args.record:
            p = profile.record(args.name)
            print(json.dumps({"name": p.name, **p.to_record()}, indent=2))
            return 0
        value = profile.query(args.name, args.default, strict=strict)
    except ProfileError as exc:
        print(f"calib query: error: {exc}", file=sys.stderr)
        return 2
    print(value)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="calib", description="Measured GPU machine parameters with confidence intervals.")
    p.add_argument("--version", action="version", version=f"calib {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run the calibration notebooks and write the machine profile")
    r.add_argument("--backend", choices=["auto", "cupy", "sim"], default="auto",
                   help="auto: the GPU where there is one, else the simulated device")
    r.add_argument("--sim-spec", metavar="FILE", help="JSON ground truth of the simulated device")
    r.add_argument("--device", type=int, default=0, help="CUDA device index")
    r.add_argument("--suite", choices=["quick", "full"], default="quick")
    r.add_argument("--profile", metavar="PATH", help="write the profile here (default: the user data folder)")
    r.add_argument("--run-dir", metavar="DIR", help="keep executed notebooks and raw data here; reuse to resume")
    r.add_argument("--notebook", action="append", metavar="NAME", help="run only this notebook (repeatable)")
    r.add_argument("--reason", help="why this calibration ran (recorded in the session)")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(func=_cmd_run)

    for name, func, text in (("show", _cmd_show, "print a profile's parameters with CIs"),
                             ("query", _cmd_query, "print one parameter's value")):
        s = sub.add_parser(name, help=text)
        if name == "query":
            s.add_argument("name")
            s.add_argument("--default", type=float, help="value to print (with a warning) if the profile lacks it")
            s.add_argument("--strict", action="store_true", help="fail instead of falling back to --default")
            s.add_argument("--record", action="store_true", help="print the whole record as JSON")
            s.add_argument("--profile", metavar="PATH")
        else:
            s.add_argument("profile", nargs="?")
            s.add_argument("--json", action="store_true")
        s.add_argument("--no-device-check", action="store_true", help="do not compare with this machine's GPU")
        s.set_defaults(func=func)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
