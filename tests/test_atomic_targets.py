"""Where calib's exports land: a pipe or FIFO is written as a stream, a link is followed to its file.

``calib cache export /dev/stdout | wc -l`` failed ("cannot write /proc/N/fd/pipe:[...]": the pipe's
resolved name is no path), and ``calib winners export /dev/stdout`` renamed a file over the
``/dev/stdout`` link itself; a link to a user's file was replaced by a copy, the file left stale.
"""

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from calib import atomic
from calib.errors import CalibError
from calib.store import Store, sqlite_url
from calib.store.winners import TSV_HEADER, TSV_MAGIC, import_tsv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from autotune_helpers import run, workload  # noqa: E402

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")]

ROWS = ['sm_90\t132\tNVIDIA H200\t{"calibration":"memory_bandwidth","size_bytes":%d}\t{"tile":128}\t%d.5' % (i, 30 + i)
        for i in (1024, 2048, 4096)]


class Failed(CalibError):
    pass


def _drain(fifo) -> tuple[threading.Thread, list]:
    got = []

    def read():
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t, got


def test_a_fifo_is_written_as_a_stream_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    t, got = _drain(fifo)
    atomic.replace(fifo, b"every line\n", Failed)
    t.join(10)
    assert got == [b"every line\n"]
    assert fifo.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary left


def test_a_run_folders_own_file_refuses_a_fifo_in_its_place_rather_than_wait_on_a_reader(tmp_path):
    fifo = tmp_path / "launch_latency.parquet"
    os.mkfifo(fifo)
    with pytest.raises(Failed, match="launch_latency.parquet: it is not a regular file"):
        atomic.replace(fifo, b"PAR1", Failed, streams=False)  # written as a stream, it waited for a reader forever
    assert fifo.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["launch_latency.parquet"]


def test_a_run_id_that_is_a_fifo_is_refused_naming_it_not_waited_on(tmp_path):
    from calib.runner import RUN_ID, RunError, _run_label

    os.mkfifo(tmp_path / RUN_ID)
    with pytest.raises(RunError, match=r"run id .*\.calib-run-id is a FIFO"):
        _run_label(tmp_path)


def test_a_new_run_id_is_written_whole_and_read_back(tmp_path):
    from calib.runner import RUN_ID, _run_label

    label = _run_label(tmp_path)
    assert label == _run_label(tmp_path) and (tmp_path / RUN_ID).read_text().strip() == label[len("run:"):]
    assert sorted(p.name for p in tmp_path.iterdir()) == [RUN_ID]  # no temporary left


def test_a_link_to_a_file_is_followed_and_stays_a_link(tmp_path):
    real = tmp_path / "data" / "winners.tsv"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "latest.tsv"
    link.symlink_to(real)
    atomic.replace(link, b"new", Failed)
    assert link.is_symlink() and real.read_bytes() == b"new"


def test_a_stream_that_cannot_be_opened_is_a_clear_error(tmp_path):
    with pytest.raises(Failed, match="cannot write .*missing-folder.*No such file"):
        atomic.write_stream(tmp_path / "missing-folder" / "x", b"x", Failed)


def test_out_writes_a_fifo_in_place_and_the_file_beside_it_whole(tmp_path):
    from calib.heuristics.cli import _write_both

    fifo, md = tmp_path / "result.json", tmp_path / "result.md"
    os.mkfifo(fifo)
    t, got = _drain(fifo)
    _write_both({str(fifo): '{"ok": 1}\n', str(md): "# table\n"})
    t.join(10)
    assert got == [b'{"ok": 1}\n'] and fifo.is_fifo() and md.read_text() == "# table\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json", "result.md"]


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "calib", *args], capture_output=True, text=True, timeout=90, **kw)


def _dev_stdout(tmp_path) -> Path:
    """A link made as ``/dev/stdout`` is (to ``/proc/self/fd/1``), in the test's own folder: a
    regression must not replace the machine's ``/dev/stdout`` (a rename over it once did)."""
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    return link


@pytest.mark.skipif(not os.path.exists("/proc/self/fd/1"), reason="needs /proc")
def test_winners_export_to_dev_stdout_prints_the_table_and_leaves_dev_stdout_alone(tmp_path):
    url = sqlite_url(tmp_path / "db.sqlite")
    tsv = tmp_path / "in.tsv"
    tsv.write_text(TSV_MAGIC + "\n" + "\t".join(TSV_HEADER) + "\n" + "\n".join(ROWS) + "\n")
    assert import_tsv(Store(url), tsv) == 3
    stdout = _dev_stdout(tmp_path)
    out = _cli("winners", "export", "--db", url, str(stdout))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == TSV_MAGIC and len(out.stdout.splitlines()) == 2 + 3
    assert stdout.is_symlink() and os.readlink(stdout) == "/proc/self/fd/1"
    assert "wrote 3 winners" in out.stderr


@pytest.mark.skipif(not os.path.exists("/proc/self/fd/1"), reason="needs /proc")
def test_cache_export_to_dev_stdout_streams_every_entry(tmp_path):
    url = sqlite_url(tmp_path / "autotune.sqlite")
    run(url, workload(3))
    out = _cli("cache", "export", str(_dev_stdout(tmp_path)), "--db", url, "--backend", "sim")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1 + 3 and '"family"' in lines[1]


@pytest.mark.skipif(not os.path.exists("/proc/self/fd/1"), reason="needs /proc")
def test_dev_stdout_redirected_to_a_file_appends_and_keeps_what_the_file_held(tmp_path):
    """``calib winners export /dev/stdout >> log``: written through the descriptor, at the end of the
    log (the link had been followed to the log and a copy renamed over it, losing its lines)."""
    url = sqlite_url(tmp_path / "db.sqlite")
    tsv = tmp_path / "in.tsv"
    tsv.write_text(TSV_MAGIC + "\n" + "\t".join(TSV_HEADER) + "\n" + "\n".join(ROWS) + "\n")
    assert import_tsv(Store(url), tsv) == 3
    log = tmp_path / "log.txt"
    log.write_text("precious\n")
    with open(log, "ab") as out:
        args = ["winners", "export", "--db", url, str(_dev_stdout(tmp_path))]
        done = subprocess.run([sys.executable, "-m", "calib", *args], stdout=out, stderr=subprocess.PIPE, text=True,
                              timeout=90)
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()
    assert lines[0] == "precious" and lines[1] == TSV_MAGIC and len(lines) == 1 + 2 + 3
    assert "wrote 3 winners" in done.stderr


def test_a_link_to_a_folder_is_refused_and_stays_a_link(tmp_path):
    (tmp_path / "adir").mkdir()
    link = tmp_path / "dirlink"
    link.symlink_to(tmp_path / "adir")
    with pytest.raises(Failed, match="cannot write .*dirlink: it is a folder"):
        atomic.replace(link, b"x", Failed)
    assert link.is_symlink() and (tmp_path / "adir").is_dir()


def test_which_paths_name_this_processs_descriptors(tmp_path):
    (tmp_path / "out").symlink_to("/dev/stdout")
    (tmp_path / "chain").symlink_to(tmp_path / "out")
    assert [atomic.open_descriptor(p) for p in ("/dev/stdout", "/dev/stderr", "/dev/fd/5", "/proc/self/fd/7",
                                                f"/proc/{os.getpid()}/fd/3", tmp_path / "chain")] == [1, 2, 5, 7, 3, 1]
    assert atomic.open_descriptor("/proc/1/fd/1") is None or os.getpid() == 1  # another process's
    assert atomic.open_descriptor(tmp_path / "plain.txt") is None and atomic.open_descriptor("/dev/null") is None
