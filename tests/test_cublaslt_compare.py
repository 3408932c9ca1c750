"""bench/cublaslt_compare.py and the offline parts of bench/cublaslt_probe.py (issue 14): no GPU needed."""

import pathlib
import sys

import pytest
from h200_recordings import read_json

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import cublaslt_compare  # noqa: E402
import cublaslt_probe  # noqa: E402

KERNELS = BENCH / "results/2026-12-02-h200-splitk-kernels/kernels.json.gz"


def test_selftest_counts_planted_agreements():
    cublaslt_compare.selftest()


def test_every_traced_h200_kernel_parses_and_a_matching_probe_scores_all():
    kernels = read_json(KERNELS)
    cfg = {k: cublaslt_compare.traced_config(v) for k, v in kernels.items()}
    assert len(cfg) == 455 and all(c["tile"] for c in cfg.values())
    # a separate reduce kernel comes only with a grid-z split, which is what reading z as the split assumes
    assert all(c["split"] > 1 for c in cfg.values() if c["reduction"] == "splitKreduce kernel")
    probe = {"shapes": {k: {"results": [{"algo_id": 0, "tile": c["tile"], "splitk": c["split"],
                                         "reduction_name": "NONE", "stages": "x", "waves": 1.0}]}
                        for k, c in cfg.items()}}
    assert cublaslt_compare.compare(probe, kernels)["counts"]["both"] == 455
    first = next(iter(probe["shapes"].values()))["results"][0]
    first["splitk"] += 1
    assert cublaslt_compare.compare(probe, kernels)["counts"]["both"] == 454


def test_log_line_fields():
    line = ("[cublasLtSSSMatmul] Adesc=[type=R_32F rows=720 cols=3584 ld=720] algo=[algoId=6 tile=MATMUL_TILE_128x32 "
            "reductionScheme=OUTPUT_TYPE numSplitsK=4] workSpaceSizeInBytes=1024")
    assert cublaslt_probe.parse_log_line(line) == {"algo_id": 6, "tile": "128x32", "splitk": 4,
                                                   "reduction": "OUTPUT_TYPE", "workspace_bytes": 1024}
    assert cublaslt_probe.parse_log_line("[cublasLtMatmulDescCreate] computeType=COMPUTE_32F") is None


def test_header_check_stops_on_a_wrong_tile_value(tmp_path, monkeypatch):
    monkeypatch.setattr(cublaslt_probe, "TILE_NAMES", dict(cublaslt_probe.TILE_NAMES))
    ok = tmp_path / "ok.h"
    ok.write_text("typedef enum {\n  CUBLASLT_MATMUL_TILE_128x32 = 16,\n  CUBLASLT_MATMUL_TILE_8x1 = 636,\n"
                  "  CUBLASLT_MATMUL_TILE_END\n} cublasLtMatmulTile_t;\n")
    assert cublaslt_probe.check_header(str(ok))["tile"] == 2
    assert cublaslt_probe.TILE_NAMES[636] == "8x1"
    bad = tmp_path / "bad.h"
    bad.write_text("typedef enum {\n  CUBLASLT_MATMUL_TILE_32x128 = 16,\n} cublasLtMatmulTile_t;\n")
    with pytest.raises(cublaslt_probe.LtError):
        cublaslt_probe.check_header(str(bad))
