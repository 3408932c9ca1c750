"""``calib cache list | show | export | import | verify | prune``: the autotune cache from the shell.

Hooked into calib's parser by ``add_cache_parser(sub)``; everything else is here. The database is
``--db``, else ``CALIB_DB_URL``, else SQLite in the user data folder. "This device" is the one
``--backend`` names (auto: the GPU NVML sees, else the simulated device)."""

from __future__ import annotations

import datetime as _dt
import json
import sys

from ..errors import CalibError


def add_cache_parser(sub):
    from ..cli_args import non_negative_float  # nan, inf or -1 days: argparse's one-line error, exit 2

    c = sub.add_parser("cache", help="the autotune cache: list, show, export, import, verify, prune")
    c.add_argument("action", choices=["list", "show", "export", "import", "verify", "prune"])
    c.add_argument("target", nargs="?", help="show: a descriptor key (or its prefix); export/import: a .jsonl file")
    c.add_argument("--db", help="database URL (default: $CALIB_DB_URL, else the user data folder's autotune.sqlite)")
    c.add_argument("--family", help="only this family")
    c.add_argument("--backend", choices=["auto", "cupy", "sim"], default="auto", help="which device is this one")
    c.add_argument("--sim-spec", metavar="FILE")
    c.add_argument("--all-devices", action="store_true",
                   help="list/export/import/prune every device's entries, not this device's alone")
    c.add_argument("--stale", action="store_true", help="prune: entries whose soft fields differ from this machine's")
    c.add_argument("--corrupt", action="store_true", help="prune: entries that cannot be read")
    c.add_argument("--older-than-days", type=non_negative_float, help="prune: entries not updated for this many days")
    c.add_argument("--dry-run", action="store_true", help="prune: say what would go, delete nothing")
    c.add_argument("--json", action="store_true", help="list/show: JSON output")
    c.set_defaults(func=run_cache)


def current_device(backend: str = "auto", sim_spec=None) -> tuple[dict, dict]:
    if backend == "sim":
        from ..backends.sim import SimBackend

        return SimBackend(sim_spec).fingerprint()
    if backend == "cupy":
        from ..backends.cupy_backend import CupyBackend

        return CupyBackend().fingerprint()
    from ..fingerprint import detect_current

    found = detect_current()
    if found is None:
        from ..backends.sim import SimBackend

        return SimBackend(sim_spec).fingerprint()
    return found


def run_cache(args) -> int:
    import sqlite3

    from ..store import StoreError
    from .storage import AutotuneDB

    try:
        db = AutotuneDB(args.db)
        device, software = current_device(args.backend, args.sim_spec)
        return ACTIONS[args.action](db, args, device, software)
    except StoreError as exc:
        print(f"calib cache: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # `calib cache list | head`: calib.cli.main ends quietly
    except OSError as exc:
        print(f"calib cache: error: {exc}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as exc:  # the reads go through sqlite3 itself, not SQLAlchemy
        where = args.db or "the autotune database"
        print(f"calib cache: error: {where} cannot be read as an SQLite database ({exc})", file=sys.stderr)
        return 2


def _dev_filter(args, device):
    from .entries import device_key

    return None if args.all_devices else device_key(device)


def _list(db, args, device, software):
    from .entries import stale_fields

    entries, bad = db.read_all(args.family, _dev_filter(args, device))
    rows = []
    for e in entries:
        stale = stale_fields(e.software, None, software, None)
        rows.append({"id": e.id, "family": e.family, "key": e.descriptor_key[:16], "device": e.device.get("name"),
                     "winner": e.winner, "time_us": e.winner_time_us, "candidates": len(e.timings),
                     "source": e.source, "stale": stale})
    if args.json:
        print(json.dumps({"entries": rows, "corrupt": [{"id": r.get("id"), "reason": why} for r, why in bad]},
                         indent=1))
        return 0
    print(f"{len(rows)} entries in {db.url}" + (f", {len(bad)} corrupt" if bad else ""))
    for r in rows:
        t = f"{r['time_us']:.4g} us" if r["time_us"] is not None else "-"
        print(f"  {r['family']:<32} {r['key']}  {str(r['winner'])[:40]:<40} {t:>12}  {r['candidates']} candidates"
              f"  {r['source']}{'  STALE: ' + '; '.join(r['stale']) if r['stale'] else ''}")
    for r, why in bad:
        print(f"  corrupt entry {r.get('id')} ({r.get('family')}, {str(r.get('descriptor_key'))[:16]}): {why}")
    return 0


def _show(db, args, device, software):
    if not args.target:
        raise CalibError("calib cache show needs a descriptor key (or a prefix of one)")
    entries, _ = db.read_all(args.family, None)
    found = [e for e in entries if e.descriptor_key.startswith(args.target)]
    if not found:
        print(f"calib cache show: no entry's key starts with {args.target!r}", file=sys.stderr)
        return 1
    for e in found:
        out = {"family": e.family, "descriptor": json.loads(e.descriptor), "descriptor_key": e.descriptor_key,
               "device": e.device, "software": e.software, "protocol": e.protocol, "winner": e.winner,
               "tied": e.tied, "offered": e.offered, "source": e.source, "provenance": e.provenance,
               "timings": [{"candidate": t.candidate, "status": t.status, "time_us": t.time_us,
                            "ci95_us": [t.ci_low_us, t.ci_high_us], "n": t.n_samples, "reason": t.reason}
                           for t in e.timings.values()]}
        print(json.dumps(out, indent=1))
    return 0


def _export(db, args, device, software):
    from .. import atomic
    from .jsonl import export

    if not args.target:
        raise CalibError("calib cache export needs a file to write")
    n = export(db, args.target, family=args.family, device_key=_dev_filter(args, device))
    print(f"wrote {n} entries to {args.target}", file=atomic.report_stream(args.target))
    return 0


def _import(db, args, device, software):
    from .jsonl import import_file

    if not args.target:
        raise CalibError("calib cache import needs a file to read")
    rep = import_file(db, args.target, device_key=_dev_filter(args, device))
    for number, message in rep.read.problems:
        print(f"{args.target}:{number}: {message}", file=sys.stderr)
    print(f"imported {args.target}: {rep.new} new, {rep.changed} merged, {rep.unchanged} unchanged; "
          f"{rep.read.corrupt} corrupt, {rep.read.future} of a newer format, "
          f"{rep.read.other_device} for another device")
    return 1 if rep.read.problems else 0


def _verify(db, args, device, software):
    """Every entry read back and checked: corrupt ones and stale ones reported (exit 1 if any)."""
    from .decide import decide
    from .entries import stale_fields

    entries, bad = db.read_all(args.family, _dev_filter(args, device))
    problems = 0
    for r, why in bad:
        problems += 1
        print(f"corrupt: entry {r.get('id')} ({r.get('family')}, {str(r.get('descriptor_key'))[:16]}): {why}")
    for e in entries:
        stale = stale_fields(e.software, None, software, None)
        if stale:
            problems += 1
            print(f"stale: {e.family} {e.descriptor_key[:16]}: {'; '.join(stale)}")
        if e.offered and e.winner is not None:
            d = decide(e.timings, e.offered)
            if d is not None and d.winner not in (e.tied or [e.winner]) and d.winner != e.winner:
                problems += 1
                print(f"inconsistent: {e.family} {e.descriptor_key[:16]}: winner {e.winner}, its timings say "
                      f"{d.winner}")
    print(f"{len(entries) + len(bad)} entries checked, {problems} problems")
    return 1 if problems else 0


def _prune(db, args, device, software):
    from .entries import stale_fields

    if not (args.stale or args.corrupt or args.older_than_days is not None or args.all_devices):
        raise CalibError("calib cache prune needs --stale, --corrupt, --older-than-days N or --all-devices")
    entries, bad = db.read_all(args.family, None)
    mine = _dev_filter(args, device)
    doomed = []
    if args.corrupt:
        doomed += [(r.get("id"), f"corrupt: {why}") for r, why in bad]
    cutoff = None if args.older_than_days is None else _cutoff(args.older_than_days)
    for e in entries:
        if mine is not None and e.device_key != mine:
            continue
        why = None
        if args.stale and stale_fields(e.software, None, software, None):
            why = "stale: " + "; ".join(stale_fields(e.software, None, software, None))
        when = (e.provenance or {}).get("when")
        if why is None and cutoff is not None and when:
            try:
                if _dt.datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.timezone.utc) < cutoff:
                    why = f"last tuned {when}"
            except (ValueError, TypeError):  # a date that is not one (an imported 5): its age is unknown, kept
                pass
        if why:
            doomed.append((e.id, why))
    for eid, why in doomed:
        print(f"{'would prune' if args.dry_run else 'pruned'} entry {eid}: {why}")
    n = 0 if args.dry_run else db.delete([eid for eid, _ in doomed if eid is not None])
    print(f"{len(doomed) if args.dry_run else n} entries {'would be ' if args.dry_run else ''}pruned")
    return 0


def _cutoff(days: float) -> _dt.datetime:
    """The moment ``days`` before now; the earliest date there is when that is before year 1
    (``--older-than-days 1e300`` had ended in an OverflowError: nothing is that old)."""
    try:
        return _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(days=days)
    except OverflowError:
        return _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)


ACTIONS = {"list": _list, "show": _show, "export": _export, "import": _import, "verify": _verify, "prune": _prune}
