"""Perf-configs hold knobs only; bookkeeping gets columns; the winner view ranks what the tuner ranks.

Revision ID: 0003
Revises: 0002

1. ``config_conv`` and ``config_gemm`` are dropped: no sweep ever filled them (only descriptors
   whose experiment was "conv" or "gemm" did, and none measured such a thing). Tuning caches with
   descriptors of their own key them by ``calib.keys`` instead.

2. ``result.perf_config`` held the measurement's knobs mixed with bookkeeping (``tuned_at_bytes``,
   ``cooldown_s``, ``attempt``), so one launch shape had several texts and winners did not group.
   The bookkeeping moves to columns: ``attempt``, ``cooldown_s``, ``set_aside_because`` (copied
   from the protocol of attempts set aside) and ``tuned_on_config_id``: the config the knobs were
   tuned on. Before 0003 the DRAM search tuned at the first size of a (kind, width) it measured and
   filed its candidates under that point, so ``tuned_at_bytes`` = N becomes the config with the same
   descriptor and ``size_bytes`` N (created if absent). Old rows are rewritten here, in Python on
   either database; the ``protocol`` column keeps what was written, untouched.

3. The ``winner`` view ranks, per (session, config), by ``kernel_time_us``: the trimmed mean of
   the samples (``Measurement.center_us``), the one estimator the fits use and the tuner ranks by.
   - Where the config has ``tuning`` results, the winner is the fastest of them (ties: the lowest
     id, i.e. the first in the order the candidates were given). The config's own ``measurement``
     does not compete there: it measures the tuner's pick again, so it could only ever pick the
     same knobs, and taking the smaller of two estimates of one launch shape would report a time
     biased low (and mix the quick tuning protocol with the full one).
   - A config without tuning results (measured with knobs tuned on another config, or not tuned
     at all) has its ``measurement`` as winner, so every measured config has one.
   - ``imported`` results are winners ranked elsewhere and compete like tuning results.
   - ``set_aside`` attempts never compete.
"""

import hashlib
import json

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"

BOOKKEEPING = ("tuned_at_bytes", "cooldown_s", "attempt")

WINNER_VIEW = """
CREATE VIEW winner AS
SELECT session_id, config_id, perf_config, kernel_time_us, result_id, role FROM (
    SELECT r.session_id, r.config_id, r.perf_config, r.kernel_time_us, r.id AS result_id, r.role,
           ROW_NUMBER() OVER (PARTITION BY r.session_id, r.config_id
                              ORDER BY CASE WHEN r.role = 'measurement' THEN 1 ELSE 0 END, r.kernel_time_us, r.id)
               AS place
    FROM result r
    WHERE r.role IN ('tuning', 'imported', 'measurement')
) ranked
WHERE place = 1
"""

WINNER_VIEW_0002 = """
CREATE VIEW winner AS
SELECT session_id, config_id, perf_config, kernel_time_us, result_id FROM (
    SELECT r.session_id, r.config_id, r.perf_config, r.kernel_time_us, r.id AS result_id,
           ROW_NUMBER() OVER (PARTITION BY r.session_id, r.config_id ORDER BY r.kernel_time_us, r.id) AS place
    FROM result r
) ranked
WHERE place = 1
"""

result_t = sa.table("result", sa.column("id", sa.Integer), sa.column("config_id", sa.Integer),
                    sa.column("role", sa.String), sa.column("perf_config", sa.Text), sa.column("protocol", sa.JSON),
                    sa.column("attempt", sa.Integer), sa.column("cooldown_s", sa.Float),
                    sa.column("set_aside_because", sa.Text), sa.column("tuned_on_config_id", sa.Integer))
config_t = sa.table("config", sa.column("id", sa.Integer), sa.column("experiment", sa.String),
                    sa.column("descriptor", sa.Text), sa.column("descriptor_hash", sa.String))


def _canonical(value) -> str:
    # calib.keys.canonical_json as of this revision, for the plain JSON read back from the database;
    # spelled out here so that this migration means the same whatever calib.keys becomes.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _config_id(bind, descriptor: dict, cache: dict) -> int:
    text = _canonical(descriptor)
    if text not in cache:
        digest = hashlib.sha256(text.encode()).hexdigest()
        cid = bind.execute(sa.select(config_t.c.id).where(config_t.c.descriptor_hash == digest)).scalar()
        if cid is None:
            cid = bind.execute(sa.insert(config_t).values(experiment=str(descriptor.get("experiment", "")),
                                                          descriptor=text, descriptor_hash=digest)
                               .returning(config_t.c.id)).scalar()
        cache[text] = cid
    return cache[text]


def _move_bookkeeping_out_of_perf_configs(bind):
    descriptors = dict(bind.execute(sa.select(config_t.c.id, config_t.c.descriptor)).all())
    made: dict = {}
    likes = [result_t.c.perf_config.like(f'%"{k}"%') for k in BOOKKEEPING]
    rows = bind.execute(sa.select(result_t.c.id, result_t.c.config_id, result_t.c.role, result_t.c.perf_config,
                                  result_t.c.protocol)
                        .where(sa.or_(result_t.c.role == "set_aside", *likes)).order_by(result_t.c.id)).all()
    for rid, config_id, role, perf_text, protocol in rows:
        try:
            perf = json.loads(perf_text) if perf_text else {}
        except ValueError:
            continue  # not JSON: nothing of ours to move
        if not isinstance(perf, dict):
            continue
        values = {}
        moved = {k: perf.pop(k) for k in BOOKKEEPING if k in perf}
        if moved:
            values["perf_config"] = _canonical(perf)
        if "attempt" in moved:
            values["attempt"] = int(moved["attempt"])
        if "cooldown_s" in moved:
            values["cooldown_s"] = float(moved["cooldown_s"])
        if "tuned_at_bytes" in moved:
            descriptor = json.loads(descriptors[config_id])
            if "size_bytes" in descriptor:
                tuned_on = {**descriptor, "size_bytes": moved["tuned_at_bytes"]}
                values["tuned_on_config_id"] = _config_id(bind, tuned_on, made)
        because = (protocol or {}).get("set_aside_because") if isinstance(protocol, dict) else None
        if role == "set_aside" and because is not None:
            values["set_aside_because"] = str(because)
        if values:
            bind.execute(sa.update(result_t).where(result_t.c.id == rid).values(**values))


def upgrade():
    op.execute("DROP VIEW winner")
    op.drop_table("config_conv")
    op.drop_table("config_gemm")
    with op.batch_alter_table("result") as b:
        b.add_column(sa.Column("attempt", sa.Integer))
        b.add_column(sa.Column("cooldown_s", sa.Float))
        b.add_column(sa.Column("set_aside_because", sa.Text))
        b.add_column(sa.Column("tuned_on_config_id", sa.Integer))
        b.create_foreign_key("fk_result_tuned_on_config", "config", ["tuned_on_config_id"], ["id"])
    _move_bookkeeping_out_of_perf_configs(op.get_bind())
    op.execute(WINNER_VIEW)


def downgrade():
    bind = op.get_bind()
    op.execute("DROP VIEW winner")
    sizes = {}
    for cid, text in bind.execute(sa.select(config_t.c.id, config_t.c.descriptor)).all():
        size = json.loads(text).get("size_bytes") if text else None
        sizes[cid] = size
    rows = bind.execute(sa.select(result_t.c.id, result_t.c.perf_config, result_t.c.attempt, result_t.c.cooldown_s,
                                  result_t.c.tuned_on_config_id)
                        .where(sa.or_(result_t.c.attempt.is_not(None), result_t.c.cooldown_s.is_not(None),
                                      result_t.c.tuned_on_config_id.is_not(None)))).all()
    for rid, perf_text, attempt, cooldown_s, tuned_on in rows:
        perf = json.loads(perf_text) if perf_text else {}
        if cooldown_s is not None:
            perf["cooldown_s"] = cooldown_s
        if attempt is not None:
            perf["attempt"] = attempt
        if tuned_on is not None and sizes.get(tuned_on) is not None:
            perf["tuned_at_bytes"] = sizes[tuned_on]
        bind.execute(sa.update(result_t).where(result_t.c.id == rid).values(perf_config=_canonical(perf)))
    with op.batch_alter_table("result") as b:
        b.drop_constraint("fk_result_tuned_on_config", type_="foreignkey")
        b.drop_column("tuned_on_config_id")
        b.drop_column("set_aside_because")
        b.drop_column("cooldown_s")
        b.drop_column("attempt")
    op.create_table(
        "config_conv",
        sa.Column("config_id", sa.Integer, sa.ForeignKey("config.id"), primary_key=True),
        *[sa.Column(c, sa.String(16 if "dtype" in c else 8), nullable=False)
          for c in ("direction", "in_dtype", "fil_dtype", "out_dtype", "in_layout", "fil_layout", "out_layout")],
        *[sa.Column(c, sa.Integer, nullable=False)
          for c in ("batch", "in_channels", "out_channels", "in_h", "in_w", "fil_h", "fil_w", "pad_h", "pad_w",
                    "stride_h", "stride_w", "dilation_h", "dilation_w", "groups")],
    )
    op.create_table(
        "config_gemm",
        sa.Column("config_id", sa.Integer, sa.ForeignKey("config.id"), primary_key=True),
        *[sa.Column(c, sa.Integer, nullable=False) for c in ("m", "n", "k", "batch")],
        *[sa.Column(c, sa.String(4 if "layout" in c else 16), nullable=False)
          for c in ("a_layout", "b_layout", "a_dtype", "b_dtype", "out_dtype")],
    )
    op.execute(WINNER_VIEW_0002)
