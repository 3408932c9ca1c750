"""Operator families tuned through the autotune cache (:mod:`calib.autotune`): ``conv2d``."""
