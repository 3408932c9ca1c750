"""The three families' CUDA sources and the timer's hold kernel compile (NVRTC, no GPU needed),
and on a GPU every candidate of a few problems passes its check and the evaluation runs end to end."""

import ctypes
import os

import pytest

from calib.heuristics import normalization as NM
from calib.heuristics import pointwise as PW
from calib.heuristics import splitk as SK
from calib.ops import timer as T


def _programs():
    for dt in PW.DTYPES:
        yield f"pointwise_{dt}", PW.SOURCE, [f"pointwise<{PW.CTYPE[dt]},{v},{e}>" for v in (1, 2, 4, 8)
                                             if v * PW.ITEMSIZE[dt] <= 16 for e in PW.EPTS]
    for dt in NM.DTYPES:
        yield f"normalization_{dt}", NM.SOURCE, NM._names(dt)
    yield "splitk", SK.SOURCE, [f"splitk_sum<{c}>" for c in SK.CTYPE.values()]
    yield "timer_hold", T.HOLD_SOURCE, ["calib_hold"]


@pytest.mark.skipif(not os.environ.get("CALIB_TEST_NVRTC_LIB"), reason="CALIB_TEST_NVRTC_LIB (a libnvrtc.so) not set")
@pytest.mark.parametrize("name,source,names", list(_programs()), ids=[p[0] for p in _programs()])
def test_sources_compile_with_nvrtc(name, source, names):
    """CALIB_TEST_NVRTC_LIB=.../libnvrtc.so.12 CALIB_TEST_CUDA_INCLUDE=.../cuda_runtime/include (pip's
    nvidia-cuda-nvrtc-cu12 and nvidia-cuda-runtime-cu12 have both)."""
    lib = ctypes.CDLL(os.environ["CALIB_TEST_NVRTC_LIB"])
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None) == 0
    for n in names:
        assert lib.nvrtcAddNameExpression(prog, n.encode()) == 0
    opts = [b"-std=c++17", b"-arch=compute_90"]
    if os.environ.get("CALIB_TEST_CUDA_INCLUDE"):
        opts.append(b"-I" + os.environ["CALIB_TEST_CUDA_INCLUDE"].encode())
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    assert rc == 0, log.value.decode()[-2000:]
    lib.nvrtcDestroyProgram(ctypes.byref(prog))


GPU_PROBLEMS = {
    "pointwise": [{"op": "add", "n": 1_000_003, "dtype": "float16"}, {"op": "sigmoid", "n": 4096, "dtype": "float64"},
                  {"op": "maximum", "n": 3 << 20, "dtype": "float32"}],
    "normalization": [{"op": "softmax", "rows": 300, "cols": 1000, "dtype": "float32"},
                      {"op": "layernorm", "rows": 17, "cols": 8192, "dtype": "float16"}],
    "matmul_splitk": [{"m": 64, "n": 128, "k": 8192, "dtype": "float16"},
                      {"m": 512, "n": 256, "k": 1024, "dtype": "float32"}],
}


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(GPU_PROBLEMS))
def test_every_candidate_checks_and_the_evaluation_runs_on_the_gpu(kind, tmp_path):
    from calib.heuristics import evaluate as E
    from calib.heuristics.families import family

    fam = family(kind)
    probs = [fam.descriptor(p) for p in GPU_PROBLEMS[kind]]
    res = E.evaluate(kind, probs, backend="cupy", db=f"sqlite:///{tmp_path}/t.sqlite")
    assert res["evaluated"] == len(probs), [r.get("error") for r in res["rows"]]
    for r in res["rows"]:
        # launch shapes ran and matched the reference (a register-heavy persistent shape may not launch)
        assert r["usable"] >= 0.8 * r["candidates"], r
        assert r["heuristic_us"] and r["library_us"] > 0
