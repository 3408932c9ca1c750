"""Command line: ``calib run``, ``calib show``, ``calib query``."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings

from . import __version__, cli_args
from .errors import CalibError


def _cmd_run(args) -> int:
    from .report import format_table
    from .runner import RunError, run

    try:
        result = run(backend=args.backend, sim_spec=args.sim_spec, device=args.device, suite=args.suite,
                     profile_path=args.profile, run_dir=args.run_dir, notebooks=args.notebook or None,
                     progress=not args.no_progress, reason=args.reason, jobs=args.jobs)
    except RunError as exc:
        print(f"calib run: error: {exc}", file=sys.stderr)
        return 2
    print()
    print(format_table(result.params, simulated=result.simulated))
    if result.not_fitted:
        print(f"\nNOT FITTED ({len(result.not_fitted)}; the profile has no value for them, queries get their "
              "defaults):")
        for name, why in sorted(result.not_fitted.items()):
            print(f"  {name}: {why}")
    if result.phase_table:
        print(f"\nwhere the time went (s; wall from launch, kernel start included):\n{result.phase_table}")
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
            from .review_cli import open_for_show

            profile = open_for_show(args, _open)  # a profile, a run folder or a fragment
        except ProfileError as exc:
            print(f"calib show: error: {exc}", file=sys.stderr)
            return 2
    refused = _show_refusal(args, profile)
    if refused:
        print(f"calib show: error: {refused}", file=sys.stderr)
        return 2
    if args.json:  # NaN is not JSON: a record holding one shows null
        print(json.dumps(_finite_json(profile.to_document()), indent=2, allow_nan=False))
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


def _show_refusal(args, profile) -> str | None:
    """Why ``calib show FILE`` exits 2: FILE named but missing, or not a profile calib can read. A
    script that tests the exit status must not take "(no parameters)" for a shown profile."""
    if not args.profile:
        return None
    if profile.unusable:
        return profile.unusable
    if profile.origin == "empty":
        return f"no profile at {args.profile}: " + ("it does not exist" if not os.path.exists(args.profile)
                                                    else "calib cannot read it")
    return None


def _finite_json(value):
    """``value`` with every NaN or infinity as None, at any depth."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def _cmd_query(args) -> int:
    from .profile import ProfileError

    strict = args.strict or args.default is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            profile = _open(args)
            if args.record:
                p = profile.record(args.name)
                # NaN is not JSON: a hand-edited r2 or diagnostic holding one shows null, as `calib show --json` does
                out = json.dumps(_finite_json({"name": p.name, **p.to_record()}), indent=2, allow_nan=False)
            else:
                out = profile.query(args.name, args.default, strict=strict)
        except ProfileError as exc:
            error = str(exc)
        else:
            error = None
    # an unreadable --profile is said once: its load warning is repeated by the error, or by the query's
    # warning that the default was used
    later = [str(w.message) for w in caught]
    for w in caught:
        text = str(w.message)
        if not (error is not None and text in error or any(text in o and text != o for o in later)):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if error is not None:
        print(f"calib query: error: {error}", file=sys.stderr)
        return 2
    print(out)
    return 0


def _store(args, readonly: bool = False):
    from .store import ENV_DB_URL, Store, StoreError

    url = args.db or os.environ.get(ENV_DB_URL)
    if not url:  # a StoreError, not SystemExit(text), which exits 1
        raise StoreError(f"no database: give --db URL or set {ENV_DB_URL}")
    return Store(url, readonly=readonly)


def _backend_for(args):
    from .backends import get_backend

    return get_backend(args.backend, sim_spec=args.sim_spec, device=args.device)


def _cmd_worker(args) -> int:
    from .store import StoreError
    from .worker import Worker, physical_gpu_id

    cli_args.check_lease(args.heartbeat_s, args.lease_timeout_s)
    try:
        store = _store(args)
        backend = _backend_for(args)
        gpu = None if backend.simulated else physical_gpu_id(args.device)
        worker = Worker(store, backend, sessions=args.session or None, gpu_id=gpu, max_retries=args.max_retries,
                        heartbeat_s=args.heartbeat_s, lease_timeout_s=args.lease_timeout_s, batch=args.batch)
        print(f"calib worker {worker.name}: {backend.describe()}, database {store.url}", flush=True)
        stats = worker.run(exit_when_empty=args.exit_when_empty)
    except StoreError as exc:
        print(f"calib worker: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted("calib worker", locals().get("store"))
    print(f"calib worker {worker.name}: {stats.completed} completed, {stats.failed_attempts} failed attempts, "
          f"{stats.reclaimed} reclaimed from dead workers, {stats.lost} results refused", flush=True)
    return 0


def _cmd_sweep(args) -> int:
    from .calibrations import memory_bandwidth as dram
    from .store import StoreError
    from .sweep import run_sweep

    try:
        store = _store(args)
        backend = _backend_for(args)
        device, software = backend.fingerprint()
        sid = store.open_session(args.label, device, software, reason=args.reason, ticket=args.ticket)
        configs = dram.plan(args.suite, l2_bytes=backend.l2_bytes, memory_bytes=backend.memory_bytes)
        print(f"calib sweep: session {sid} ({args.label!r}) on {device.get('name')}: {len(configs)} points"
              f"{', waiting for workers' if args.wait else ''}", flush=True)
        report = run_sweep(None if args.wait else backend, configs, store, sid, desc=args.label,
                           wait_for_workers=args.wait, progress=not args.no_progress)
    except StoreError as exc:
        print(f"calib sweep: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted("calib sweep", locals().get("store"))
    print(report)
    return 1 if report.failed else 0


def _interrupted(command: str, store) -> int:
    """Ctrl-C: this process's claimed jobs go back to the queue (no retry charged), one line, exit 130."""
    import os
    import socket

    released = 0
    if store is not None:
        try:
            released = store.release_process(socket.gethostname(), os.getpid())
        except Exception:  # noqa: BLE001 - the next worker reclaims them; the interrupt is the message
            pass
    print(f"{command}: interrupted; {released} claimed job(s) returned to the queue, no retry charged",
          file=sys.stderr)
    return 130


def _cmd_catalogue(args) -> int:
    """Every parameter calib measures, with its unit, its calibration and its meaning."""
    from .catalogue import parameters

    rows = list(parameters().values())
    if args.json:
        print(json.dumps({p.name: {"unit": p.unit, "calibration": p.calibration, "meaning": p.meaning}
                          for p in rows}, indent=2))
        return 0
    width = max(len(p.name) for p in rows)
    units = max(len(p.unit) for p in rows)
    cals = max(len(p.calibration) for p in rows)
    for p in rows:
        print(f"{p.name:<{width}}  {p.unit:<{units}}  {p.calibration:<{cals}}  {p.meaning}")
    return 0


def _cmd_status(args) -> int:
    from .store import JOB_STATES, StoreError

    try:
        store = _store(args, readonly=True)
    except StoreError as exc:
        print(f"calib status: error: {exc}", file=sys.stderr)
        return 2
    print(f"database {store.url}, schema revision {store.schema_revision()}")
    sessions = store.sessions_frame()
    counts = store.counts()
    if args.session:
        sessions = sessions[sessions["id"].isin(args.session)]
    head = f"{'id':>4}  {'device':<28} " + " ".join(f"{s:>9}" for s in JOB_STATES) + "  label"
    print(head)
    for row in sessions.itertuples():
        c = counts.get(row.id, {})
        device = f"{row.device_name}{' (sim)' if row.simulated else ''}"[:28]
        print(f"{row.id:>4}  {device:<28} " + " ".join(f"{c.get(s, 0):>9}" for s in JOB_STATES) + f"  {row.label}")
    return 0


def _cmd_winners(args) -> int:
    from . import atomic
    from .store import StoreError
    from .store.winners import export_tsv, import_tsv

    try:
        store = _store(args, readonly=args.action == "export")
        if args.action == "export":
            n = export_tsv(store, args.file, session_id=args.session)
            print(f"wrote {n} winners to {args.file}", file=atomic.report_stream(args.file))
        else:
            n = import_tsv(store, args.file)
            print(f"imported {n} winners from {args.file}")
    except StoreError as exc:
        print(f"calib winners: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _add_backend_args(p):
    p.add_argument("--backend", choices=["auto", "cupy", "sim"], default="auto")
    p.add_argument("--sim-spec", metavar="FILE")
    p.add_argument("--device", type=cli_args.non_negative_int, default=0,
                   help="CUDA device index (CUDA_VISIBLE_DEVICES applies)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="calib", description="Measured GPU machine parameters with confidence intervals.")
    p.add_argument("--version", action="version", version=f"calib {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run the calibration notebooks and write the machine profile")
    r.add_argument("--backend", choices=["auto", "cupy", "sim"], default="auto",
                   help="auto: the GPU where there is one, else the simulated device")
    r.add_argument("--sim-spec", metavar="FILE", help="JSON ground truth of the simulated device")
    r.add_argument("--device", type=cli_args.non_negative_int, default=0, help="CUDA device index")
    r.add_argument("--suite", choices=["quick", "full"], default="quick")
    r.add_argument("--profile", metavar="PATH", help="write the profile here (default: the user data folder)")
    r.add_argument("--run-dir", metavar="DIR", help="keep executed notebooks and raw data here; reuse to resume")
    r.add_argument("--notebook", action="append", metavar="NAME", help="run only this notebook (repeatable)")
    r.add_argument("--reason", help="why this calibration ran (recorded in the session)")
    r.add_argument("--jobs", type=cli_args.jobs, default="auto", metavar="N",
                   help="notebooks in flight at once; their measurements still take turns on the GPU "
                        "(auto: all on a GPU host with 8 or more cores, up to cores - 4; else 1; "
                        "2 on the simulated device)")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(func=_cmd_run)

    for name, func, text in (("show", _cmd_show, "print a profile's parameters with CIs"),
                             ("query", _cmd_query, "print one parameter's value")):
        s = sub.add_parser(name, help=text)
        if name == "query":
            s.add_argument("name")
            s.add_argument("--default", type=cli_args.finite_float,
                           help="value to print (with a warning) if the profile lacks it")
            s.add_argument("--strict", action="store_true", help="fail instead of falling back to --default")
            s.add_argument("--record", action="store_true", help="print the whole record as JSON")
            s.add_argument("--profile", metavar="PATH")
        else:
            s.add_argument("profile", nargs="?", help="a profile, a run folder (its profile.json) or a fragment")
            s.add_argument("--json", action="store_true")
        s.add_argument("--no-device-check", action="store_true", help="do not compare with this machine's GPU")
        s.set_defaults(func=func)

    ca = sub.add_parser("catalogue", help="every parameter calib measures: unit, calibration, meaning")
    ca.add_argument("--json", action="store_true")
    ca.set_defaults(func=_cmd_catalogue)

    db_help = "tuning database URL (default: $CALIB_DB_URL)"
    w = sub.add_parser("worker", help="claim and measure jobs from the tuning database, one process per GPU")
    _add_backend_args(w)
    w.add_argument("--db", help=db_help)
    w.add_argument("--session", type=cli_args.row_id, action="append",
                   help="only these sessions (default: all of this device)")
    w.add_argument("--max-retries", type=cli_args.retries, default=2)
    w.add_argument("--heartbeat-s", type=cli_args.heartbeat_s, default=5.0)
    w.add_argument("--lease-timeout-s", type=cli_args.lease_s, default=60.0,
                   help=f"reclaim jobs silent for this long (at least {cli_args.MIN_HEARTBEATS_PER_LEASE} heartbeats)")
    w.add_argument("--batch", type=cli_args.batch,
                   help="jobs claimed at once (default: 1 on a GPU, 32 simulated)")
    w.add_argument("--exit-when-empty", action="store_true", help="stop once no job is new or running")
    w.set_defaults(func=_cmd_worker)

    sw = sub.add_parser("sweep", help="enqueue a DRAM sweep in a session; measure it here or wait for workers")
    _add_backend_args(sw)
    sw.add_argument("--db", help=db_help)
    sw.add_argument("--label", required=True, help="session label; the same label resumes")
    sw.add_argument("--suite", choices=["quick", "full"], default="quick")
    sw.add_argument("--wait", action="store_true", help="leave the measuring to `calib worker` processes")
    sw.add_argument("--reason")
    sw.add_argument("--ticket")
    sw.add_argument("--no-progress", action="store_true")
    sw.set_defaults(func=_cmd_sweep)

    st = sub.add_parser("status", help="jobs by state per session")
    st.add_argument("--db", help=db_help)
    st.add_argument("--session", type=cli_args.row_id, action="append")
    st.set_defaults(func=_cmd_status)

    wi = sub.add_parser("winners", help="export or import the fastest perf-config per config as TSV")
    wi.add_argument("action", choices=["export", "import"])
    wi.add_argument("file")
    wi.add_argument("--db", help=db_help)
    wi.add_argument("--session", type=cli_args.row_id)
    wi.set_defaults(func=_cmd_winners)

    from .autotune.cli import add_cache_parser
    from .diff import add_diff_parser
    from .verify import add_verify_parser

    add_cache_parser(sub)
    add_diff_parser(sub)
    from .review_cli import add_review_parsers

    add_review_parsers(sub)  # calib report, calib merge
    add_verify_parser(sub)
    from .heuristics.cli import add_heuristics_parser

    add_heuristics_parser(sub)  # calib heuristics evaluate
    return p


def _one_line_warning(message, category, filename, lineno, line=None):
    return f"calib: warning: {message}\n"


def _stdout_closed() -> bool:
    """Whether stdout's reader is gone: the write end of a pipe without a reader polls as an error
    (a flush proves nothing: the failed write already dropped what was buffered)."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), stdout without a descriptor
        return False


def main(argv=None) -> int:
    # On the command line a warning is a message to the user, not a pointer into calib's source.
    warnings.formatwarning = _one_line_warning
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # another pipe (a subprocess, a socket) broke: a failure to report, not a reader gone
        # the reader went away (`calib diff A B | head`): nothing more to say to it, and no traceback.
        # stdout is pointed at /dev/null so that Python's own flush at exit does not fail again.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command its pipe closed on
    except CalibError as exc:
        # calib refused, with a reason: the reason is the message. Anything else is a bug and
        # keeps its traceback.
        print(f"calib {args.command}: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_status", 2)  # a run stopped by a signal: 128 + its number, as shells say


if __name__ == "__main__":
    sys.exit(main())
