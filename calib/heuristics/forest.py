"""Regression forests of the corrections learned from recorded times: bagged least-squares trees
(CART), stored as JSON and evaluated in plain Python.

A tree is ``{"log_ratio": v}`` (a leaf) or ``{"feature": name, "threshold": t, "le": node, "gt":
node}``; a forest is a list of trees and its value their mean. Evaluating needs no numpy, so a
heuristic that reads a forest keeps ``import calib`` light; fitting uses numpy (imported when
called) since split-K's forests are fitted on 10^4-10^5 examples of 12-16 features, minutes of pure
Python a tree."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from .. import atomic, strict_json
from ..errors import CalibError
from .._lazy import lazy

np = lazy("numpy")

MAX_DEPTH = 32  # a file's trees are checked to this depth (a fitted one is 10)


def tree_value(node: dict, x: dict) -> float:
    while "log_ratio" not in node:
        node = node["le"] if x[node["feature"]] <= node["threshold"] else node["gt"]
    return float(node["log_ratio"])


def forest_value(trees: list, x: dict) -> float:
    return sum(tree_value(t, x) for t in trees) / len(trees)


def check_node(node, features, where: str, error=ValueError, depth: int = 0) -> None:
    """Raise ``error`` naming ``where`` unless ``node`` is a tree over ``features`` whose leaves are
    finite log ratios within +-3 (a factor of 20: no correction is near that)."""
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        raise error(f"{where}: a tree node must be an object (at most {MAX_DEPTH} deep), not {node!r}"[:300])
    if set(node) == {"log_ratio"}:
        v = node["log_ratio"]
        if not _finite_number(v) or abs(v) > 3:
            raise error(f"{where}: log_ratio must be a finite number within +-3, not {v!r}")
        return
    if set(node) != {"feature", "threshold", "le", "gt"} or node["feature"] not in features:
        raise error(f"{where}: a split node has feature (one of {tuple(features)}), threshold, le, gt: {node!r}"[:300])
    t = node["threshold"]
    if not _finite_number(t):
        raise error(f"{where}: threshold must be a finite number, not {t!r}")
    check_node(node["le"], features, where, error, depth + 1)
    check_node(node["gt"], features, where, error, depth + 1)


def _finite_number(v) -> bool:
    """A finite int or float (not a bool); an integer of 400 digits is none (strict_json.finite)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and strict_json.finite(v)


def fit_forest(xs: list, ys: list, features, n_trees: int, depth: int, min_leaf: int, seed: int = 0) -> list:
    """``n_trees`` trees, each fitted on a bootstrap sample of (``xs``: dicts of ``features``, ``ys``)
    drawn with random.Random(seed), so the fit is reproducible to the bit."""
    features = tuple(features)
    x = np.array([[float(row[f]) for f in features] for row in xs], dtype=float).reshape(len(xs), len(features))
    y = np.asarray(ys, dtype=float)
    rng = random.Random(seed)
    trees = []
    for _ in range(n_trees):
        idx = np.array([rng.randrange(len(ys)) for _ in ys], dtype=np.int64)
        trees.append(fit_tree(x[idx], y[idx], features, depth, min_leaf))
    return trees


def fit_tree(x, y, features, depth: int, min_leaf: int) -> dict:
    """A least-squares regression tree over the rows of ``x`` (columns named by ``features``): at
    each node the threshold of one feature that most lowers the summed squared error, each side at
    least ``min_leaf`` rows; among equal splits the first feature, then the lowest threshold."""
    n = len(y)
    best = None
    if depth > 0 and n >= 2 * min_leaf:
        for f in range(x.shape[1]):
            order = np.argsort(x[:, f], kind="stable")
            xv, yv = x[order, f], y[order]
            pre = np.concatenate(([0.0], np.cumsum(yv)))
            pre2 = np.concatenate(([0.0], np.cumsum(yv * yv)))
            j = np.arange(min_leaf, n - min_leaf + 1)
            ok = xv[j - 1] != xv[np.minimum(j, n - 1)]
            if not ok.any():
                continue
            j = j[ok]
            sse = pre2[j] - pre[j] ** 2 / j + (pre2[n] - pre2[j]) - (pre[n] - pre[j]) ** 2 / (n - j)
            i = int(np.argmin(sse))
            if best is None or sse[i] < best[0] - 1e-12:
                a, b = float(xv[j[i] - 1]), float(xv[j[i]])
                t = (a + b) / 2
                best = (float(sse[i]), f, t if a <= t < b else a)  # adjacent floats: the midpoint rounds to b
    if best is None:
        return {"log_ratio": round(float(y.mean()), 6)}
    _, f, t = best
    le = x[:, f] <= t
    return {"feature": features[f], "threshold": t,
            "le": fit_tree(x[le], y[le], features, depth - 1, min_leaf),
            "gt": fit_tree(x[~le], y[~le], features, depth - 1, min_leaf)}


def write_document(path, doc: dict) -> None:
    """A forest's file (a fitter's, in bench/): the document with one line per tree, 1 MB rather than 2
    with every node indented; gzip-compressed (-9, no name or time, so the same fit writes the same
    bytes) where the path ends in .gz."""
    path = Path(path)
    body = json.dumps({k: v for k, v in doc.items() if k != "trees"}, indent=1)[:-2]
    trees = ",\n".join(json.dumps(t, separators=(",", ":")) for t in doc["trees"])
    text = body + ',\n "trees": [\n' + trees + "\n ]\n}\n"
    data = gzip.compress(text.encode(), compresslevel=9, mtime=0) if path.suffix == ".gz" else text.encode()
    atomic.replace(path, data, CalibError, streams=False)
