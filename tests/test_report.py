"""The run folder and its report: the layout a person browses, `calib report`, `calib show RUN_DIR`,
`calib show fragment-….json`, `calib merge`, and the report rendered in a real headless browser.

The run is the session's shared one (conftest.sim_run); tests copy what they change."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from calib import cli
from calib.html_report import build_report, write_report

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # they read a whole `calib run`
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _ok(sim_run):
    assert sim_run.proc.returncode == 0, sim_run.proc.stderr[-3000:]
    return sim_run.run_dir


def _calib(*args, env=None):
    return subprocess.run([sys.executable, "-m", "calib", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)


def test_the_run_folder_has_a_report_a_profile_snapshot_an_index_and_a_folder_per_calibration(sim_run):
    run_dir = _ok(sim_run)
    assert (run_dir / "report.html").is_file() and (run_dir / "profile.json").is_file()
    index = json.loads((run_dir / "run.json").read_text())
    snapshot = json.loads((run_dir / "profile.json").read_text())
    assert snapshot["device"]["simulated"] is True and snapshot["schema"] == "calib.profile/1"
    assert set(index["parameters"]) == set(snapshot["params"]) and len(snapshot["params"]) >= 30
    rec = index["parameters"]["memory.dram.read_bandwidth_gbps"]
    assert rec["unit"] == "GB/s" and rec["ci95"][0] < rec["value"] < rec["ci95"][1] and rec["n"] > 5
    for nb in index["notebooks"]:
        folder = run_dir / nb["folder"]
        assert (run_dir / nb["notebook"]).is_file() and (run_dir / nb["fragment"]).is_file(), nb
        assert (folder / f"fragment-{nb['calibration']}.json").is_file() and nb["wall_s"] > 0 and nb["status"] == "ok"
        assert all((run_dir / f).is_file() for f in nb["figures"]) and nb["parameters"]
    # nothing but the index, the report, the snapshot, the database and the calibrations' folders at the top
    top = {p.name for p in run_dir.iterdir() if not p.name.startswith(".")}
    assert {p for p in top if not (run_dir / p).is_dir() and not p.startswith("results.sqlite")} == {
        "report.html", "profile.json", "run.json"}


def test_calib_show_reads_a_run_folder_and_a_fragment(sim_run):
    run_dir = _ok(sim_run)
    out = _calib("show", run_dir, "--no-device-check")
    assert out.returncode == 0 and "memory.dram.read_bandwidth_gbps" in out.stdout and "SIMULATED" in out.stdout
    assert "run folder" in out.stdout
    frag = run_dir / "registers" / "fragment-registers.json"
    out = _calib("show", frag, "--no-device-check")
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("normalization.max_persistent_elements_per_thread"))
    assert "bracket" in line and "±" not in line
    assert "[fragment]" in out.stdout


def test_calib_merge_merges_hand_run_fragments_into_a_profile(sim_run, tmp_path):
    run_dir = _ok(sim_run)
    target = tmp_path / "merged.json"
    frags = [run_dir / "registers" / "fragment-registers.json", run_dir / "occupancy" / "fragment-occupancy.json"]
    assert cli.main(["merge", *map(str, frags), "--profile", str(target)]) == 0
    params = json.loads(target.read_text())["params"]
    assert {"normalization.additional_registers", "memory.bytes_in_flight_per_sm"} <= set(params)
    # fragments of another device are refused, in one line, and the profile is left alone
    other = json.loads(frags[0].read_text())
    other["device"] = {**other["device"], "name": "another GPU", "sm_count": 7}
    (tmp_path / "fragment-other.json").write_text(json.dumps(other))
    before = target.read_bytes()
    out = _calib("merge", frags[1], tmp_path / "fragment-other.json", "--profile", target)
    assert out.returncode == 2 and "different devices" in out.stderr and "Traceback" not in out.stderr
    assert target.read_bytes() == before
    out = _calib("merge", tmp_path / "nope.json", "--profile", target)
    assert out.returncode == 2 and "does not exist" in out.stderr


def test_the_report_links_the_table_and_the_figures_and_escapes_what_comes_from_files(sim_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(_ok(sim_run), run_dir)
    html = (run_dir / "report.html").read_text()
    assert "SIMULATED DEVICE" in html[:3000] and 'id="simulated"' in html
    assert not re.search(r'(src|href)="(https?:|//|file:)', html)  # self-contained
    assert "<script" not in html.lower()
    index = json.loads((run_dir / "run.json").read_text())
    for name in index["parameters"]:
        slug = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        assert f'id="row-{slug}"' in html and f'href="#param-{slug}"' in html and f'id="param-{slug}"' in html
    for nb in index["notebooks"]:
        for fig in nb["figures"]:
            assert f"{Path(fig).name}</code>" in html, fig
    assert 'href="#row-memory.dram.read_bandwidth_gbps"' in html  # a figure links back to its row
    # the register spill bracket is a bracket in its own row (the page's prose says "bracket" anyway)
    name = "normalization.max_persistent_elements_per_thread"
    row = html[html.index(f'id="row-{name}"'):]
    row = row[:row.index("</tr>")]
    assert "bracket" in row and "±" not in row and "%" not in row
    assert 'id="clocks"' in html and 'id="protocol"' in html and "simulated" in html
    clocks = html[html.index('id="clocks"'):html.index('id="protocol-section"')]
    assert 'href="#cal-memory_bandwidth"' in clocks and 'href="#cal-launch_latency"' in clocks

    # clocks and throttle reasons, as a GPU's results record them, reach the report
    import sqlite3

    with sqlite3.connect(run_dir / "results.sqlite") as db:
        db.execute("UPDATE result SET throttled = 1, clocks = ? WHERE id = (SELECT MIN(id) FROM result)",
                   (json.dumps({"readings": 3, "sm_mhz_min": 1755, "sm_mhz_max": 1980, "mem_mhz_min": 3201,
                                "mem_mhz_max": 3201, "throttle_reasons": ["sw_power_cap"]}),))
    html = build_report(run_dir)
    clocks = html[html.index('id="clocks"'):html.index('id="protocol-section"')]
    assert "sw_power_cap" in clocks and "1755 to 1980" in clocks and "3201" in clocks

    # a hostile parameter name, unit, flag and failure are shown as text (every other field from a
    # file: tests/test_report_hostile.py)
    frag_path = run_dir / "registers" / "fragment-registers.json"
    frag = json.loads(frag_path.read_text())
    evil = '<img src=x onerror="alert(1)">'
    frag["params"][f"x.{evil}"] = {"value": 1.0, "unit": evil, "n": 3, "flags": [evil]}
    frag_path.write_text(json.dumps(frag))  # the same device, so the merge is allowed
    (run_dir / "profile.json").unlink()  # the report then merges the fragments itself
    doc = json.loads((run_dir / "run.json").read_text())
    doc["failed"] = [["occupancy", f"boom {evil}"]]
    (run_dir / "run.json").write_text(json.dumps(doc))
    out = write_report(run_dir, tmp_path / "evil.html").read_text()
    assert evil not in out and "<img src=x" not in out and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in out


def test_calib_report_writes_on_request_and_refuses_what_is_not_a_run_folder(sim_run, tmp_path, capsys):
    run_dir = _ok(sim_run)
    out = tmp_path / "r.html"
    assert cli.main(["report", str(run_dir), "-o", str(out)]) == 0
    assert out.read_text() == build_report(run_dir)
    assert cli.main(["report", str(tmp_path / "empty")]) == 2
    (tmp_path / "empty").mkdir()
    assert cli.main(["report", str(tmp_path / "empty")]) == 2
    assert "not a calib run folder" in capsys.readouterr().err


def _browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


CHECK = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  var figs = Array.prototype.slice.call(document.querySelectorAll('figure[data-params]'))
    .filter(function (f) { var i = f.querySelector('img'); return i && i.complete && i.naturalWidth > 0; })
    .map(function (f) { return f.getAttribute('data-params'); });
  var out = document.createElement('pre');
  out.id = 'browser-check';
  out.textContent = JSON.stringify({images: imgs.length, loaded: ok.length, figures: figs,
    rows: document.querySelectorAll('#parameters ~ table.calib-params tr[data-param]').length,
    simulated: !!document.getElementById('simulated')});
  document.body.appendChild(out);
});
</script>"""


def test_the_report_renders_in_a_headless_browser_with_every_image_loaded(sim_run, tmp_path):
    """Debian's chromium (.ci/run installs it): the page loads, every image decodes, the table has
    every parameter, every plotted parameter has a figure that rendered; the screenshot is kept
    under $CALIB_TEST_ARTIFACTS (default: this test's tmp folder) and in test-artifacts/."""
    browser = _browser()
    if browser is None:
        pytest.skip("no chromium here (apt-get install chromium; .ci/run installs it)")
    run_dir = _ok(sim_run)
    html = (run_dir / "report.html").read_text()
    probe = tmp_path / "report-probe.html"
    probe.write_text(html.replace("</body>", CHECK + "</body>"))
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000"]
    dom = subprocess.run([*flags, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="browser-check">(.*?)</pre>', dom.stdout, re.S)
    assert found, f"the check did not run: {dom.stderr[-2000:]}"
    check = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    index = json.loads((run_dir / "run.json").read_text())
    figures = sum(len(nb["figures"]) for nb in index["notebooks"])
    assert check["images"] == figures > 20 and check["loaded"] == check["images"], check
    assert check["rows"] == len(index["parameters"]) and check["simulated"]
    shown = {p for f in check["figures"] for p in f.split()}
    plotted = {name for nb in index["notebooks"] for fig in nb["figures"] for name in nb["parameters"]
               if Path(fig).stem in (f"line-{name.replace('.', '_')}", f"residuals-{name.replace('.', '_')}")}
    assert plotted and plotted <= shown, plotted - shown

    artifacts = Path(os.environ.get("CALIB_TEST_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "report.png"
    page = (run_dir / "report.html").as_uri()
    proc = subprocess.run([*flags, "--window-size=1280,2400", f"--screenshot={shot}", page],
                          capture_output=True, text=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 50_000, proc.stderr[-2000:]
    kept = ROOT / "test-artifacts"  # .ci/run points CALIB_TEST_ARTIFACTS here: then the shot is kept already
    kept.mkdir(exist_ok=True)
    if (kept / "report.png").resolve() != shot.resolve():
        shutil.copy(shot, kept / "report.png")
    shutil.copy(run_dir / "report.html", kept / "report.html")
