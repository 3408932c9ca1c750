"""The conv2d family: its descriptor, its algorithms' arithmetic (run through NumPy here, CuPy on
a GPU), the reference check, the simulated model, and its entries in the database's conv columns."""

import json

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from calib.autotune import Autotuner, descriptor_json, descriptor_key
from calib.backends.sim import SimBackend
from calib.ops import conv2d as C
from calib.store import sqlite_url

SHAPES = [C.conv(2, 4, 9, 9, 6, 3, pad=1), C.conv(2, 4, 9, 8, 6, 3, stride=2, pad=1),
          C.conv(1, 6, 10, 10, 4, 3, dilation=2, pad=2, groups=2), C.conv(3, 8, 5, 5, 8, 1),
          C.conv(2, 8, 6, 6, 4, 1, stride=2, groups=4), C.Conv2dDescriptor(1, 3, 7, 11, 5, 2, 4, 1, 0)]


@pytest.fixture
def numpy_as_cupy(monkeypatch):
    """The algorithms written for CuPy, run on NumPy: the same array API, so the arithmetic
    (unfolding, group reshapes, FFT correlation) is checked without a GPU."""
    monkeypatch.setattr(C, "_cp", lambda: np)


def _inputs(d, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (d.n, d.c, d.h, d.w)).astype(d.in_dtype),
            rng.uniform(-1, 1, (d.k, d.c // d.groups, d.r, d.s)).astype(d.filter_dtype))


def _naive(d, x, w):
    out = np.zeros((d.n, d.k, d.p, d.q))
    cg, kg = d.c // d.groups, d.k // d.groups
    for n in range(d.n):
        for k in range(d.k):
            g = k // kg
            for p in range(d.p):
                for q in range(d.q):
                    acc = 0.0
                    for c in range(cg):
                        for r in range(d.r):
                            for s in range(d.s):
                                h = p * d.stride_h - d.pad_h + r * d.dilation_h
                                v = q * d.stride_w - d.pad_w + s * d.dilation_w
                                if 0 <= h < d.h and 0 <= v < d.w:
                                    acc += float(x[n, g * cg + c, h, v]) * float(w[k, c, r, s])
                    out[n, k, p, q] = acc
    return out


@pytest.mark.parametrize("d", SHAPES, ids=str)
def test_every_algorithm_matches_the_reference_where_it_applies(numpy_as_cupy, d):
    x, w = _inputs(d)
    ref = C.reference(d, x, w)
    np.testing.assert_allclose(ref, _naive(d, x, w), rtol=1e-12, atol=1e-12)  # the reference itself
    ran = []
    for alg in ("gemm_1x1", "im2col_gemm", "fft"):
        if C.supports(d, alg) is None:
            assert C.check_output(d, C.RUN[alg](d, x, w), ref)
            ran.append(alg)
    assert "im2col_gemm" in ran


def test_a_wrong_output_fails_the_check(numpy_as_cupy):
    d = SHAPES[0]
    x, w = _inputs(d)
    ref = C.reference(d, x, w)
    bad = C.run_im2col_gemm(d, x, w)
    bad[0, 0, 0, 0] += 0.5
    with pytest.raises(AssertionError, match="tolerance"):
        C.check_output(d, bad, ref)


def test_descriptor_fields_and_keys():
    a = C.Conv2dDescriptor(32, 64, 56, 56, 64, 3, 3, 1, 1, in_dtype=np.float32, filter_dtype="fp32",
                           out_dtype="float")
    b = C.conv(32, 64, 56, 56, 64, 3, pad=1)
    assert a == b and hash(a) == hash(b) and descriptor_key(a) == descriptor_key(b)
    assert descriptor_key(b.with_batch(1)) != descriptor_key(b)  # batch is part of the key
    assert (b.p, b.q) == (56, 56) and C.conv(1, 3, 224, 224, 64, 7, pad=3, stride=2).p == 112
    columns = C.conv_columns(json.loads(descriptor_json(b)))
    assert columns["batch"] == 32 and columns["fil_h"] == 3 and columns["math_mode"] == "default"
    with pytest.raises(ValueError, match="groups"):
        C.conv(1, 6, 8, 8, 4, 3, groups=4)
    assert C.supports(C.conv(1, 4, 8, 8, 4, 3, stride=2), "fft") == "stride 1 and dilation 1 only"


def test_the_simulated_family_tunes_resnet50_and_records_conv_columns(tmp_path):
    url = sqlite_url(tmp_path / "conv.sqlite")
    sim = SimBackend()
    layers = C.resnet50_layers(32) + C.resnet50_layers(1)
    tuner = Autotuner(*sim.fingerprint(), url=url, persist=True, shipped_dir=tmp_path)
    fam = C.sim_family(sim, broken={"fft"})
    wins = []
    for d in layers:
        tm, ck = fam.bind(d)
        wins.append(tuner.select(C.FAMILY, d, C.ALGORITHMS, time=tm, check=ck).candidate)
    assert "fft" not in wins and {"gemm_1x1", "im2col_gemm"} <= set(wins)
    engine = create_engine(url)
    with engine.connect() as c:
        rows = c.execute(text("SELECT batch, in_channels, fil_h, stride_h, in_dtype, layout FROM autotune_conv "
                              "ORDER BY entry_id")).all()
    engine.dispose()
    assert len(rows) == len(layers) and tuple(rows[0]) == (32, 3, 7, 2, "float32", "NCHW")
    again = Autotuner(*sim.fingerprint(), url=url, persist=True, shipped_dir=tmp_path)
    assert [again.select(C.FAMILY, d, C.ALGORITHMS).candidate for d in layers] == wins
    assert again.counters.benchmarks == 0


def test_two_independent_tunes_of_resnet50_agree_on_the_simulated_device(tmp_path):
    layers = C.resnet50_layers(32) + C.resnet50_layers(1)
    picks = []
    for seed in (1, 2):
        sim = SimBackend(seed=seed)
        t = Autotuner(*sim.fingerprint(), persist=False, shipped_dir=tmp_path)
        fam = C.sim_family(sim)
        picks.append([t.select(C.FAMILY, d, C.ALGORITHMS, time=fam.bind(d)[0], check=fam.bind(d)[1]).candidate
                      for d in layers])
    agree = np.mean([a == b for a, b in zip(*picks)])
    assert agree >= 0.95


@pytest.mark.gpu
def test_every_algorithm_on_the_gpu_matches_the_reference(tmp_path):
    cp = pytest.importorskip("cupy")
    for d in SHAPES + [C.conv(2, 16, 12, 12, 8, 3, pad=1, dtype="float16")]:
        x, w = C.random_inputs(d)
        ref = C.reference(d, x, w)
        for alg in C.ALGORITHMS:
            if C.supports(d, alg) is None:
                assert C.check_output(d, C.RUN[alg](d, x, w), ref), alg
    d = SHAPES[0]
    t = Autotuner(*C.cupy_fingerprint(), url=sqlite_url(tmp_path / "gpu.sqlite"), shipped_dir=tmp_path)
    sel = C.select_algorithm(d, t)
    again = Autotuner(*C.cupy_fingerprint(), url=sqlite_url(tmp_path / "gpu.sqlite"), shipped_dir=tmp_path)
    assert C.select_algorithm(d, again).candidate == sel.candidate and again.counters.benchmarks == 0
    x, w = C.random_inputs(d)
    assert C.check_output(d, C.conv2d(x, w, padding=1, autotuner=t), C.reference(d, x, w))
    assert cp is not None


def test_select_algorithm_serves_a_repeated_problem_from_memory(numpy_as_cupy, monkeypatch, tmp_path):
    """The GPU path of select_algorithm with NumPy for CuPy and a fake timer: the second call for the
    same problem is a memo hit (it had read the memo's raw tuple and failed on ``.offered``)."""
    import types

    from calib.timing import Measurement

    timed = []
    cupy_like = types.SimpleNamespace(**{n: getattr(np, n) for n in dir(np) if not n.startswith("_")})
    cupy_like.random = types.SimpleNamespace(RandomState=_NumpyRandomState)
    cupy_like.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    monkeypatch.setattr(C, "_cp", lambda: cupy_like)
    monkeypatch.setattr(C, "cuda_timer", lambda fn, **kw: timed.append(fn) or Measurement([10.0 + len(timed)] * 5))
    monkeypatch.setattr(C.timer, "release", lambda: None)
    tuner = Autotuner({"name": "toy GPU", "compute_capability": "9.0", "sm_count": 132},
                      url=sqlite_url(tmp_path / "a.sqlite"), shipped_dir=tmp_path)
    d = SHAPES[0]
    first = C.select_algorithm(d, tuner)
    n_timed = len(timed)
    again = C.select_algorithm(d, tuner)
    assert n_timed > 0 and len(timed) == n_timed and tuner.counters.hits == 1
    assert again.choice == first.choice and again.benchmarks == 0 and first.benchmarks > 0


class _NumpyRandomState:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def random_sample(self, shape, dtype=np.float32):
        return self.rng.random(shape, dtype=dtype)
