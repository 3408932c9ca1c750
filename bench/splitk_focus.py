"""Write split-K problems of the region where its worst cases live, as JSON lines for
``calib heuristics evaluate --problems``: training data for split-K's corrections, denser there
than the seeded generator's draws.

    python3 bench/splitk_focus.py --seed 2000 --count 1000 --out problems.jsonl [--max-rows 64]

Every problem below 0.85 of the exhaustive best on the H200 since session 7 was an fp32 GEMM whose
output has 16-48 rows (cuBLAS's split 1 against a split of K). The seeded generator draws such a
problem about one time in eight, so its 1000-problem training evaluations hold ~130 of them. This
draws from the same generator (same shapes, same size bounds) and keeps fp32 problems of at most
``--max-rows`` output rows, so the distribution within the region is the evaluation's own.
Use seeds no evaluation uses (2000 and up)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calib.heuristics import splitk as SK  # noqa: E402


def focus(count: int, seed: int, max_rows: int = 64, max_bytes: float = 1.0e9) -> list:
    """``count`` fp32 problems of at most ``max_rows`` rows, in the order the generator drew them."""
    batch = 8 * count
    drawn = SK.generate(batch, seed=seed, max_bytes=max_bytes)
    while True:
        out = [d for d in drawn if d.dtype == "float32" and d.m <= max_rows]
        if len(out) >= count or batch > 400 * count:
            return out[:count]
        batch *= 2  # the generator is a stream: a longer draw starts with the same problems
        drawn = SK.generate(batch, seed=seed, max_bytes=max_bytes)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--max-rows", type=int, default=64)
    ap.add_argument("--max-bytes", type=float, default=1.0e9, help="as device_run.sh's split-K step")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    problems = focus(a.count, a.seed, a.max_rows, a.max_bytes)
    Path(a.out).write_text("".join(json.dumps({"m": d.m, "n": d.n, "k": d.k, "dtype": d.dtype}) + "\n"
                                   for d in problems))
    print(f"{len(problems)} fp32 problems of at most {a.max_rows} rows (seed {a.seed}) -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
