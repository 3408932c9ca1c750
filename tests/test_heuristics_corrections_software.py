"""The corrections learned from H200 recordings (split-K's four files, normalization's) apply only to a
profile of that GPU measured under the CUDA runtime and CuPy the recordings ran under: cuBLAS's kernel
choices and NVRTC's register allocation are what they learned, and another CUDA changes both. Under
other software the plain model predicts, with one warning; a file from before corrections recorded
their software is read forward as applying under any."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

from calib.heuristics import cublaslt as CL
from calib.heuristics import normalization as N
from calib.heuristics import predictor as P
from calib.heuristics import splitk as SK
from calib.heuristics.registry import HeuristicError, HeuristicWarning
from calib.profile import load_profile

sys.path.insert(0, str(Path(__file__).parent))
from h200_recordings import TRAINING, R  # noqa: E402

ROOT = R.parents[1]
RECORDED = {"cuda_runtime": "13.2", "cupy": "14.2.0"}


@pytest.fixture(autouse=True)
def fresh_state(fresh_cublaslt_state, monkeypatch):
    """cuBLASLt's state and the software warnings already given, empty for each test."""
    monkeypatch.setattr(P, "_software_warned", set())
    monkeypatch.setattr(P, "_running", {})


def _profile(**software):
    """The profile a training evaluation read, its software replaced by ``software`` where given."""
    profile = load_profile(R / TRAINING["1000"][2], device=None, software=None)
    if software:
        profile.software = dict(profile.software, **software)
    return profile


def _split_k_factors(q) -> tuple:
    with warnings.catch_warnings(), CL.use_oracle({}):
        warnings.simplefilter("ignore", RuntimeWarning)  # the empty oracle's "no cuBLASLt choice"
        return (SK.split1_log_factor(q, 288, 1408, 22784), SK.fp16_split1_log_factor(q, 64, 4096, 4096),
                SK.fp32_recorded_log_factor(q, 16, 816, 6656), SK.fp32_splits_log_factor(q, 16, 816, 6656, 8))


def test_every_shipped_correction_records_the_software_of_its_recordings():
    """Each file's "software" is what its own recordings ran under (their evaluations and profiles;
    the fp32 tree's traces were taken beside the profile it names)."""
    for load in (SK.load_fp16_split1, SK.load_fp32_recorded, SK.load_fp32_splits):
        doc = load()
        assert doc["software"] == P.recorded_software((ROOT / e, ROOT / p) for e, p in doc["recordings"]) == RECORDED
    tree = SK.load_split1()
    assert tree["software"] == P.recorded_software([(ROOT / tree["kernels"], ROOT / tree["profile"])])
    fitted = json.loads(N.CORRECTIONS_FILE.read_text())["fitted_on"]
    assert N.load_corrections(N.CORRECTIONS_FILE).software == P.recorded_software(
        (ROOT / r["recording"], ROOT / r["profile"]) for r in fitted) == RECORDED


def test_split_k_corrections_apply_under_their_software_and_a_patch_release():
    assert all(f != 0.0 for f in _split_k_factors(P.q_of(_profile())))
    with warnings.catch_warnings():
        warnings.simplefilter("error", HeuristicWarning)
        patched = _split_k_factors(P.q_of(_profile(cuda_runtime="13.2.1", cupy="14.2.3")))
    assert patched == _split_k_factors(P.q_of(_profile()))


@pytest.mark.parametrize("software", [{"cuda_runtime": "12.8"}, {"cuda_runtime": "13.3"}, {"cupy": "15.0.0"}])
def test_split_k_corrections_give_way_to_the_plain_model_under_other_software(software):
    q = P.q_of(_profile(**software))
    with pytest.warns(HeuristicWarning, match="other software") as caught:
        assert _split_k_factors(q) == (0.0, 0.0, 0.0, 0.0)
    named = next(iter(software))
    assert all(named in str(w.message) for w in caught)
    d = SK.SplitKDescriptor(16, 816, 6656, "float32")
    with warnings.catch_warnings(), CL.use_oracle({}):
        warnings.simplefilter("ignore")
        plain = SK.split1_fp32_us(q, 16, 816, 6656)
        assert SK.model_us(d, {"split": 1}, q) == pytest.approx(plain)


def test_the_warning_is_given_once_per_correction_and_change():
    q = P.q_of(_profile(cuda_runtime="12.8"))
    with pytest.warns(HeuristicWarning) as first:
        _split_k_factors(q)
    assert len(first) == 4  # one per file
    with warnings.catch_warnings():
        warnings.simplefilter("error", HeuristicWarning)
        _split_k_factors(q)


def test_a_profile_that_records_no_software_still_gets_its_gpus_corrections():
    profile = _profile()
    profile.software = {}
    assert all(f != 0.0 for f in _split_k_factors(P.q_of(profile)))


def test_an_older_forest_without_software_is_read_forward_for_any_software(tmp_path, monkeypatch):
    raw = SK._read_split1(SK.FP16_SPLIT1_FILE, "fp16 forest")
    old = {k: v for k, v in raw.items() if k != "software"}
    p = tmp_path / "fp16-v2.json"
    p.write_text(json.dumps(dict(old, version=2)))
    doc = SK.load_fp16_split1(p)
    assert doc["version"] == SK.FP16_SPLIT1_VERSION and doc["software"] is None and doc["trees"] == raw["trees"]
    monkeypatch.setattr(SK.forests, "_fp16_split1", {"doc": doc})  # what the shipped file's place would load
    with warnings.catch_warnings():
        warnings.simplefilter("error", HeuristicWarning)
        assert SK.fp16_split1_log_factor(P.q_of(_profile(cuda_runtime="12.8")), 64, 4096, 4096) != 0.0
    p.write_text(json.dumps(dict(old, version=SK.FP16_SPLIT1_VERSION)))  # the current version must say
    with pytest.raises(HeuristicError, match="software"):
        SK.load_fp16_split1(p)


def test_normalization_corrections_apply_under_their_software_only():
    c = N.load_corrections(N.CORRECTIONS_FILE)
    assert c.applies_to(P.q_of(_profile()))
    with pytest.warns(HeuristicWarning, match="normalization's corrections.*cuda_runtime 13.2 -> 12.6"):
        assert not c.applies_to(P.q_of(_profile(cuda_runtime="12.6")))
    assert N.corrections_for(P.q_of(_profile(cuda_runtime="12.6"))) is None


def test_normalization_corrections_of_version_3_read_forward_and_version_4_must_say(tmp_path):
    doc = json.loads(N.CORRECTIONS_FILE.read_text())
    old = {k: v for k, v in doc.items() if k != "software"}
    p = tmp_path / "c.json"
    p.write_text(json.dumps(dict(old, version=3)))
    c = N.load_corrections(p)
    assert c.software is None and c.applies_to(P.q_of(_profile(cuda_runtime="12.6")))
    for software in (None, {"cuda_runtime": "13.2"}, {"cuda_runtime": "", "cupy": "14.2.0"}, "13.2"):
        p.write_text(json.dumps(dict(old, software=software)))
        with pytest.raises(N.CorrectionsError, match="software"):
            N.load_corrections(p)


def test_recordings_under_different_software_make_no_one_correction(tmp_path):
    a = json.loads((R / TRAINING["1000"][2]).read_text())
    ev = tmp_path / "ev.json"
    ev.write_text(json.dumps({"software": {"cuda_runtime": "13.2", "cupy": "14.2.0", "driver": "x"}}))
    paths = []
    for i, cuda in enumerate(("13.2", "12.8")):
        paths.append(tmp_path / f"p{i}.json")
        paths[-1].write_text(json.dumps(dict(a, software=dict(a["software"], cuda_runtime=cuda))))
    assert P.recorded_software([(ev, paths[0])]) == RECORDED
    with pytest.raises(HeuristicError, match=r"p1\.json.*12\.8"):
        P.recorded_software([(_no_software(tmp_path), paths[0]), (_no_software(tmp_path), paths[1])])
    with pytest.raises(HeuristicError, match=r"ev\.json ran under other software.*cuda_runtime 12\.8 -> 13\.2"):
        P.recorded_software([(ev, paths[1])])  # an evaluation that read a profile measured elsewhere
    paths[1].write_text(json.dumps(dict(a, software={"calib": "0.1.0"})))
    with pytest.raises(HeuristicError, match="cuda_runtime / cupy"):
        P.recorded_software([(ev, paths[0]), (_no_software(tmp_path), paths[1])])


def _no_software(tmp_path):
    """An evaluation from before evaluations recorded their software (2026-12-01's)."""
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"kind": "matmul_splitk"}))
    return p


def test_a_process_running_other_software_does_not_take_the_corrections(monkeypatch):
    """A live heuristic's kernels are this process's: with CuPy imported under CUDA 12.8, a profile
    recorded under 13.2 (the shipped one, on a host that was upgraded or downgraded) gets the plain model."""
    import types

    runtime = types.SimpleNamespace(runtimeGetVersion=lambda: 12080)
    fake = types.SimpleNamespace(__version__="14.2.0", cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert P.running_software() == {"cuda_runtime": "12.8", "cupy": "14.2.0"}
    with pytest.warns(HeuristicWarning, match="this process's cuda_runtime 13.2 -> 12.8"):
        assert _split_k_factors(P.q_of(_profile())) == (0.0, 0.0, 0.0, 0.0)
    runtime.runtimeGetVersion = lambda: 13020  # not asked again: a process's runtime does not change
    assert P.running_software()["cuda_runtime"] == "12.8"
    fake13 = types.SimpleNamespace(__version__="14.2.0", cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", fake13)  # another CuPy module (a test's fake, a reload): asked
    assert all(f != 0.0 for f in _split_k_factors(P.q_of(_profile())))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(__version__="14.2.0"))  # no runtime to ask
    assert P.running_software() == {}


def test_the_read_recorder_carries_the_profiles_software():
    """evaluate runs each heuristic through a ReadRecorder (its parameters_read): the guard must see
    through it."""
    from calib.heuristics.registry import ReadRecorder

    q = P.q_of(ReadRecorder(_profile(cuda_runtime="12.8")))
    assert q.software["cuda_runtime"] == "12.8"
    with pytest.warns(HeuristicWarning, match="cuda_runtime 13.2 -> 12.8"):
        assert _split_k_factors(q) == (0.0, 0.0, 0.0, 0.0)


def test_a_version_part_that_is_not_a_number_is_compared_as_text():
    q = P.q_of(_profile(cuda_runtime="13.2"))
    assert P.software_differences(q, {"cuda_runtime": "13.2", "cupy": "14.2.0"}) == []
    assert P.software_differences(q, {"cuda_runtime": "13.x"}) == ["cuda_runtime 13.x -> 13.2"]
    assert P.software_differences(q, {"cuda_runtime": 13.2}) == []  # not a version string: not compared
    assert P.software_differences(lambda n, d=None: d, RECORDED) == []  # a q that carries no software
    assert P.software_differences(P.q_of(_profile(cupy="14")), {"cupy": "14.0.2"}) == []  # "14" is 14.0


def _seed56_evaluations(change, times: int = 1) -> tuple:
    """Split-K's seed-56 recording replayed with the shipped H200 profile, then ``times`` more with
    ``change(profile)`` applied to it."""
    from calib.heuristics import evaluate as E

    path = R / "2026-12-04-h200-heuristics-s12c4" / "splitk-seed56" / "heuristics-matmul_splitk.json.gz"
    shipped = load_profile(ROOT / "profiles" / "nvidia-h200.json", device=None, software=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = [E.evaluate("matmul_splitk", backend=f"replay:{path}", profile=shipped)]
        change(shipped)
        out += [E.evaluate("matmul_splitk", backend=f"replay:{path}", profile=shipped) for _ in range(times)]
    return tuple(out)


def test_an_evaluation_records_the_corrections_it_ran_without():
    """The warning is given once a process; the evaluation's JSON and table say, every time, which
    corrections its predictions and choices went without (and the choices then are the plain model's)."""
    from calib.heuristics import evaluate as E

    def other_cuda(profile):
        profile.software = dict(profile.software, cuda_runtime="12.8")

    same, other, again = _seed56_evaluations(other_cuda, times=2)  # again: no second warning
    assert same["corrections_declined"] == []
    assert other["corrections_declined"] == again["corrections_declined"]
    assert {c.split(":")[0] for c in other["corrections_declined"]} == {
        "split-K's correction splitk_fp16_split1.json.gz", "split-K's correction splitk_fp32_split1_recorded.json.gz",
        "split-K's correction splitk_fp32_splits_recorded.json.gz", "split-K's fp32 split-1 correction",
        "the model-error band (no pi95)"}  # the band is the corrected model's error under that software
    assert all(c.endswith("cuda_runtime 13.2 -> 12.8") for c in other["corrections_declined"])
    assert "Not applied, the plain model predicted instead: split-K's fp32 split-1 correction" in E.to_markdown(other)
    assert "Not applied" not in E.to_markdown(same)
    assert [r["predicted_us"] for r in other["rows"]] != [r["predicted_us"] for r in same["rows"]]


def _h100(**device):
    """The profile a training evaluation read, as an H100's (compute capability 9.0, as the H200)."""
    profile = _profile()
    profile.device = dict(profile.device, name="NVIDIA H100 80GB HBM3", **device)
    return profile


def test_every_shipped_correction_records_its_gpus_compute_capability():
    for load in (SK.load_fp16_split1, SK.load_fp32_recorded, SK.load_fp32_splits):
        doc = load()
        assert doc["compute_capability"] == P.recorded_arch(ROOT / p for _e, p in doc["recordings"]) == "9.0"
    assert SK.load_split1()["compute_capability"] == "9.0"
    assert N.load_corrections(N.CORRECTIONS_FILE).compute_capability == "9.0"


def test_another_gpu_of_the_architecture_gets_the_corrections_and_another_architecture_does_not():
    h200 = _split_k_factors(P.q_of(_profile()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", HeuristicWarning)  # applied across GPU models without a warning
        assert _split_k_factors(P.q_of(_h100())) == h200
        assert N.load_corrections(N.CORRECTIONS_FILE).applies_to(P.q_of(_h100()))
    for device in ({"compute_capability": "8.0"}, {"compute_capability": None}, {"simulated": True}):
        q = P.q_of(_h100(**device))
        assert _split_k_factors(q) == (0.0, 0.0, 0.0, 0.0), device
        assert not N.load_corrections(N.CORRECTIONS_FILE).applies_to(q)
    with pytest.warns(HeuristicWarning, match="cuda_runtime 13.2 -> 12.8"):  # the software still decides
        assert _split_k_factors(P.q_of(_with_software(_h100(), cuda_runtime="12.8"))) == (0.0, 0.0, 0.0, 0.0)


def _with_software(profile, **software):
    profile.software = dict(profile.software, **software)
    return profile


def test_a_correction_from_before_the_architecture_was_recorded_applies_to_its_named_gpu_alone(tmp_path, monkeypatch):
    raw = SK._read_split1(SK.FP16_SPLIT1_FILE, "fp16 forest")
    p = tmp_path / "fp16-v3.json"
    p.write_text(json.dumps(dict({k: v for k, v in raw.items() if k != "compute_capability"}, version=3)))
    doc = SK.load_fp16_split1(p)
    assert doc["version"] == SK.FP16_SPLIT1_VERSION and doc["compute_capability"] is None
    monkeypatch.setattr(SK.forests, "_fp16_split1", {"doc": doc})
    assert SK.fp16_split1_log_factor(P.q_of(_profile()), 64, 4096, 4096) != 0.0
    assert SK.fp16_split1_log_factor(P.q_of(_h100()), 64, 4096, 4096) == 0.0
    c = json.loads(N.CORRECTIONS_FILE.read_text())
    p.write_text(json.dumps(dict({k: v for k, v in c.items() if k != "compute_capability"}, version=4)))
    old = N.load_corrections(p)
    assert old.compute_capability is None and old.applies_to(P.q_of(_profile()))
    assert not old.applies_to(P.q_of(_h100()))


@pytest.mark.parametrize("cc", [None, "", "sm_90", 9.0, "9", "9.0\n"])
def test_a_split_k_correction_of_the_current_version_must_name_a_compute_capability(tmp_path, cc):
    raw = SK._read_split1(SK.FP16_SPLIT1_FILE, "fp16 forest")
    p = tmp_path / "fp16.json"
    p.write_text(json.dumps(dict(raw, compute_capability=cc)))
    with pytest.raises(HeuristicError, match=r"fp16\.json.*compute_capability"):
        SK.load_fp16_split1(p)
    tree = json.loads(SK.SPLIT1_FILE.read_text())
    p.write_text(json.dumps(dict(tree, compute_capability=cc)))
    with pytest.raises(HeuristicError, match="compute_capability"):
        SK.load_split1(p)


def test_recordings_of_different_architectures_make_no_one_correction(tmp_path):
    a = json.loads((R / TRAINING["1000"][2]).read_text())
    paths = []
    for i, cc in enumerate(("9.0", "8.0")):
        paths.append(tmp_path / f"p{i}.json")
        paths[-1].write_text(json.dumps(dict(a, device=dict(a["device"], compute_capability=cc))))
    assert P.recorded_arch(paths[:1]) == "9.0"
    with pytest.raises(HeuristicError, match=r"p1\.json: 8\.0"):
        P.recorded_arch(paths)


def test_an_evaluation_records_the_corrections_it_applied_across_gpu_models():
    from calib.heuristics import evaluate as E

    def h100(profile):
        profile.device = dict(profile.device, name="NVIDIA H100 80GB HBM3")

    same, other = _seed56_evaluations(h100)
    assert same["corrections_borrowed"] == [] and "another GPU of the same architecture" not in E.to_markdown(same)
    assert len(other["corrections_borrowed"]) == 4 and other["corrections_declined"] == []
    assert all(c.endswith("fitted on NVIDIA H200, applied on NVIDIA H100 80GB HBM3 (compute capability 9.0)")
               for c in other["corrections_borrowed"])
    assert ("Applied from another GPU of the same architecture: split-K's fp32 split-1 correction"
            in E.to_markdown(other))
