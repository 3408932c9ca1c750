"""The predictor and the learned model given what an outside checker would try: launches no kernel
could run, sizes from a byte to a petabyte, fewer sizes than numbers to fit, a kernel the model does
not describe, bad sizes and names, a profile file that is read-only, a tuning database that is not
one or is another device's. Each is a clear error, an honest interval or a flag, never a crash and
never a confident wrong answer."""

import json
import math
import os
import warnings

import numpy as np
import pytest

from calib import predict
from calib.backends.sim import SimBackend
from calib.heuristics import HeuristicError, HeuristicWarning
from calib.heuristics import learned as L
from calib.heuristics import predictor as P
from calib.heuristics.simdevice import sim_profile
from calib.profile import ProfileError, load_profile


@pytest.fixture(scope="module")
def prof():
    return sim_profile(SimBackend(seed=3))


PW = {"op": "add", "n": 1 << 20, "dtype": "float16"}
PW_OK = {"vec": 8, "ept": 1, "block": 256, "grid": "cover"}
NORM = {"op": "softmax", "rows": 64, "cols": 1000}
NORM_OK = {"strategy": "multipass", "threads": 256, "vec": 4, "buffer": 0}
SK = {"m": 64, "n": 64, "k": 4096, "dtype": "float32"}


@pytest.mark.parametrize("kind, d, params, why", [
    ("pointwise", PW, {}, "lack vec, ept, block, grid"),
    ("pointwise", PW, None, "must be a mapping"),
    ("pointwise", PW, dict(PW_OK, vec=0), "vec is 0"),
    ("pointwise", PW, dict(PW_OK, block=-1), "block is -1"),
    ("pointwise", PW, dict(PW_OK, grid=0), "grid is 0"),
    ("pointwise", PW, dict(PW_OK, vec=3), "vec 3 of float16 is 6 bytes"),
    ("pointwise", dict(PW, dtype="float64"), dict(PW_OK, vec=4), "32 bytes"),
    ("pointwise", PW, dict(PW_OK, block=2048), "more than the 1024 threads"),
    ("pointwise", PW, dict(PW_OK, block="x"), "block is 'x'"),
    ("pointwise", PW, dict(PW_OK, ept=3), "ept 3 is not compiled"),  # was a KeyError from the model
    ("pointwise", PW, dict(PW_OK, ept=2**62), "ept 4611686018427387904 is not compiled"),
    ("normalization", NORM, dict(NORM_OK, threads=0), "threads is 0"),
    ("normalization", NORM, dict(NORM_OK, strategy="zz"), "strategy is 'zz'"),
    ("normalization", NORM, {k: v for k, v in NORM_OK.items() if k != "threads"}, "lack threads"),
    ("matmul_splitk", SK, {}, "lack split"),
    ("matmul_splitk", SK, {"split": 0}, "split is 0"),
    ("matmul_splitk", SK, {"split": 3}, "split 3 does not divide K = 4096"),
    ("matmul_splitk", SK, {"split": 8192}, "does not divide"),
])
def test_predict_names_a_launch_no_kernel_of_the_family_could_run(kind, d, params, why, prof):
    with pytest.raises(HeuristicError, match=why):
        predict.predict(kind, d, params, prof)


def test_predict_takes_a_launch_from_a_json_file(prof):
    a = predict.predict("pointwise", PW, dict(PW_OK, block=256.0), prof)
    assert a.time_us == predict.predict("pointwise", PW, PW_OK, prof).time_us > 0


def _truth(q, b, t0=3.0, dram_gbps=2500.0, l2_gbps=5000.0):
    f = P.streamed_l2_fraction(q, b, scale_bytes=P.l2_scale_bytes(q))
    return t0 + (1 - f) * L.dram_fill_us(q) + b * (f / (l2_gbps * 1e3) + (1 - f) / (dram_gbps * 1e3))


def test_sizes_from_a_byte_to_a_petabyte_keep_intervals_that_cover_the_truth(prof):
    """The normal equations' pseudo-inverse dropped a direction at this span: the rate's interval had
    zero width and covered the truth 1% of the time. From the SVD of the scaled design it covers it
    at about the nominal rate."""
    q = P.q_of(prof)
    sizes = [1.0, 1e3, 1e6, 1e9, 1e12, 1e15]
    rng = np.random.default_rng(0)
    hits, n = {"rate_gbps": 0, "t0_us": 0}, 200
    for _ in range(n):
        samples = [_truth(q, b) * np.exp(rng.normal(0, 0.01, 10)) for b in sizes]
        m = L.fit("wide", sizes, samples, prof)
        for name, truth in (("rate_gbps", 2500.0), ("t0_us", 3.0)):
            lo, hi = m.ci95[name]
            assert hi > lo
            hits[name] += lo <= truth <= hi
    assert all(0.88 <= h / n <= 0.995 for h in hits.values()), hits


def test_three_numbers_are_not_fitted_from_two_sizes(prof):
    """The L2 size and the DRAM size alone cannot pin t0, r_L2 and r_DRAM: the L2 rate is assumed
    from the profile's ratio (and says so), not given a tight interval it cannot have. Samples that
    are all unusable do not count as a size."""
    q = P.q_of(prof)
    s = L.default_sizes(prof)
    rng = np.random.default_rng(1)
    two = L.fit("two", [s[1], s[2]], [_truth(q, b) * np.exp(rng.normal(0, 0.01, 10)) for b in (s[1], s[2])], prof)
    assert two.assumed == ("l2_rate_gbps",) and "l2_rate_gbps" in two.ci95  # from the DRAM rate's, scaled
    nan = [[math.nan] * 10, *[_truth(q, b) * np.exp(rng.normal(0, 0.01, 10)) for b in (s[1], s[2])]]
    assert L.fit("nan", s, nan, prof).assumed == ("l2_rate_gbps",)
    with pytest.raises(HeuristicError, match="two sizes with a usable sample.*it has 1"):
        L.fit("one", s, [[math.nan] * 5, [math.inf] * 5, _truth(q, s[2]) * np.ones(5)], prof)


def test_a_kernel_the_model_does_not_describe_is_flagged_and_not_saved_below_zero(prof, tmp_path):
    pts = L.learning_points(L.default_sizes(prof))
    m = L.fit("square", pts, [[1 + (b / 1e6) ** 2] * 4 for b in pts], prof)
    assert m.t0_us < 0 and any("fixed cost came out" in f for f in m.flags)
    path = tmp_path / "p.json"
    with pytest.raises(HeuristicError, match="not saved: t0_us not above 0"):
        m.save(path, prof)
    assert not path.exists()


def test_a_poor_fit_is_stored_with_its_flag_and_warns_when_it_predicts(prof, tmp_path):
    q = P.q_of(prof)
    sizes = L.learning_points(L.default_sizes(prof))
    mid = sorted(sizes)[len(sizes) // 2]
    samples = [[_truth(q, b) * (1.6 if b == mid else 1.0)] * 5 for b in sizes]  # one size 60% slow
    m = L.fit("bumpy", sizes, samples, prof)
    assert m.t0_us > 0 and any("misses a learning size" in f for f in m.flags), m.flags
    path = tmp_path / "p.json"
    m.save(path, prof)
    back = load_profile(path, device=None, software=None)
    assert any("poor fit" in f for f in back.record("learned.bumpy.rate_gbps").flags)
    again = L.LearnedModel.from_profile(back, "bumpy")
    with pytest.warns(HeuristicWarning, match="bumpy is flagged: poor fit"):
        again.predict(1e8)
    good = L.fit("smooth", sizes, [[_truth(q, b)] * 5 for b in sizes], prof)
    assert good.flags == []


@pytest.mark.parametrize("name", ["a\n", "A", "", "a b", None, 5])
def test_a_name_that_is_not_lower_case_letters_digits_and_underscores_is_refused(name, prof):
    with pytest.raises(HeuristicError, match="name is lower-case"):
        L.fit(name, [1e4, 1e8], [[5.0] * 3, [50.0] * 3], prof)
    with pytest.raises(HeuristicError, match="name is lower-case"):
        L.LearnedModel.from_profile(prof, name)


@pytest.mark.parametrize("sizes, why", [
    ([1e4, math.nan, 1e8], "size 1 is nan"), ([1e4, math.inf, 1e8], "size 1 is inf"),
    ([0, 1e6, 1e8], "size 0 is 0"), ([1e4, -5, 1e8], "size 1 is -5"), ([1e4, "x", 1e8], "size 1 is 'x'"),
    ([True, 1e6, 1e8], "size 0 is True"), ([1e4, 1e6], "2 sizes but 3 sequences"),
])
def test_a_size_that_is_not_a_positive_number_of_bytes_is_named(sizes, why, prof):
    with pytest.raises(HeuristicError, match=why):
        L.fit("k", sizes, [[5.0] * 3, [6.0] * 3, [50.0] * 3], prof)


def test_a_learned_model_predicts_only_sizes(prof):
    q = P.q_of(prof)
    sizes = L.learning_points(L.default_sizes(prof))
    m = L.fit("k", sizes, [[_truth(q, b)] * 3 for b in sizes], prof)
    for bad in (-1, math.nan, math.inf, "x", None, True):
        with pytest.raises(HeuristicError, match="is no size"):
            m.predict(bad)
    assert m.predict(0).time_us == pytest.approx(m.t0_us)


def test_save_without_a_profile_writes_as_the_device_it_was_fitted_on(prof, tmp_path):
    q = P.q_of(prof)
    sizes = L.learning_points(L.default_sizes(prof))
    m = L.fit("k", sizes, [[_truth(q, b)] * 3 for b in sizes], prof)
    path = tmp_path / "p.json"
    m.save(path)  # a new file: the fitted profile's device, not {}
    assert json.loads(path.read_text())["device"] == prof.device
    m.device = {}  # a model without a device joins the file's
    m.save(path)
    assert json.loads(path.read_text())["device"] == prof.device


def test_a_read_only_profile_is_left_as_it_is(prof, tmp_path):
    q = P.q_of(prof)
    sizes = L.learning_points(L.default_sizes(prof))
    m = L.fit("k", sizes, [[_truth(q, b)] * 3 for b in sizes], prof)
    path = tmp_path / "p.json"
    m.save(path, prof)
    before = path.read_bytes()
    os.chmod(path, 0o444)
    m.kernel = "other"
    with pytest.raises(ProfileError, match=r"read-only \(mode 0444\)"):
        m.save(path, prof)
    assert path.read_bytes() == before
    assert [p for p in os.listdir(tmp_path) if p != "p.json" and not p.endswith(".lock")] == []  # no temporary


def test_the_tuning_database_route_names_a_corrupt_file_another_device_and_the_family(tmp_path, prof):
    from calib.store import StoreError

    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=f"tuning database {bad} cannot be read"):
        L.learn_from_autotune("k", "heuristics.pointwise", lambda d: 1.0, device=prof.device,
                              url=f"sqlite:///{bad}", profile=prof)
    h200 = load_profile(os.path.join(os.path.dirname(__file__), "..", "profiles", "nvidia-h200.json"),
                        device=None, software=None)
    with pytest.raises(HeuristicError, match="another device than the profile"):
        L.learn_from_autotune("k", "heuristics.pointwise", lambda d: 1.0, device=prof.device,
                              url=f"sqlite:///{tmp_path}/none.sqlite", profile=h200)
    with pytest.raises(HeuristicError, match="device: "):
        L.learn_from_autotune("k", "heuristics.pointwise", lambda d: 1.0, device={},
                              url=f"sqlite:///{tmp_path}/none.sqlite", profile=prof)
    with pytest.raises(HeuristicError, match="stores its problems as family 'heuristics.pointwise'"):
        L.learn_from_autotune("k", "pointwise", lambda d: 1.0, device=prof.device,
                              url=f"sqlite:///{tmp_path}/none.sqlite", profile=prof)


@pytest.mark.parametrize("argv, why", [
    (["--points", "0"], "must be at least 1"), (["--points", "1"], "at least 2 sizes"),
    (["--max-bytes", "0"], "must be at least"), (["--max-bytes", "nan"], "not a finite number"),
    (["--out", "/nonexistent/dir/x"], "does not exist"),
    (["--out", ""], "--out: the path is empty"),  # --out "$UNSET" measured everything and wrote nothing
])
def test_the_library_op_evaluation_refuses_bad_arguments_in_one_line(argv, why, capsys):
    from calib.heuristics import learned_eval

    try:
        code = learned_eval.main(["--backend", "sim", *argv])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and why in err and "Traceback" not in err


def test_the_library_op_evaluation_without_cupy_says_what_to_install(capsys):
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is installed here")
    from calib.heuristics import learned_eval

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert learned_eval.main(["--backend", "cupy"]) == 2
    assert "pip install" in capsys.readouterr().err


def test_a_numpy_size_is_a_size_and_a_huge_one_is_named(prof):
    q = P.q_of(prof)
    sizes = L.learning_points(L.default_sizes(prof))
    m = L.fit("k", sizes, [[_truth(q, b)] * 3 for b in sizes], prof)
    assert m.predict(np.int64(10**6)).time_us == pytest.approx(m.predict(10**6).time_us)
    with pytest.raises(HeuristicError, match="is no size"):
        m.predict(10**400)


def test_a_model_without_a_dram_fill_saves_no_zero_time_and_never_pairs_with_an_older_fill(tmp_path):
    """A model built by hand, or read from a profile of before the fill, has a fill of 0: saved, it
    wrote a record of 0 us, which every later read refused with a warning. Saved where an earlier
    model of the kernel left its fill, a merge would keep that fill beside the new numbers."""

    from calib.profile import read_profile

    device = {"name": "X", "simulated": True}
    path = tmp_path / "p.json"
    L.LearnedModel("k", 2.0, 1000.0, 2000.0, device=device).save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prof = read_profile(path)
        assert "learned.k.dram_fill_us" not in prof.params and prof.query("learned.k.t0_us", None) == 2.0
    L.LearnedModel("j", 2.0, 1000.0, 2000.0, dram_fill_us=0.8, device=device).save(path)
    before = path.read_bytes()
    with pytest.raises(HeuristicError, match=r"no DRAM fill, and .*learned\.j\.dram_fill_us"):
        L.LearnedModel("j", 3.0, 900.0, 1800.0, device=device).save(path)
    assert path.read_bytes() == before
    L.LearnedModel("j", 3.0, 900.0, 1800.0, dram_fill_us=0.5, device=device).save(path)
    assert read_profile(path).query("learned.j.dram_fill_us", None) == 0.5
