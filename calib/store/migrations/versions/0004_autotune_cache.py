"""The autotune cache: entries per (family, descriptor key, device key), a timing per candidate.

Revision ID: 0004
Revises: 0003

- ``autotune_entry``: one row per problem of a family on one kind of device (the device key hashes
  the hard fields: name, compute capability, SM count); the soft fields (driver, CUDA, library and
  calib versions, timing protocol) are stored per entry, so a version change makes entries stale
  one at a time instead of discarding a whole cache (what PyTorch TunableOp and MIOpen's user
  database do).
- ``autotune_timing``: one row per (entry, candidate), with the samples, the CI and the status
  (ok, wrong, unsupported, skipped), so adding a candidate times only that one and removing one
  keeps the rest (Triton's cache keys the whole config list instead).
- ``autotune_conv``: the conv2d family's descriptor in columns, where ``config_conv`` (dropped by
  0003, never filled) had them.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade():
    op.create_table(
        "autotune_entry",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("family", sa.String(128), nullable=False),
        sa.Column("descriptor_key", sa.String(64), nullable=False),
        sa.Column("device_key", sa.String(64), nullable=False),
        sa.Column("descriptor", sa.Text, nullable=False),
        sa.Column("device", sa.JSON, nullable=False),
        sa.Column("software", sa.JSON, nullable=False),
        sa.Column("protocol", sa.JSON, nullable=False),
        sa.Column("winner", sa.Text),
        sa.Column("winner_time_us", sa.Float),
        sa.Column("tied", sa.JSON),
        sa.Column("offered", sa.JSON),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("provenance", sa.JSON),
        sa.Column("created", sa.DateTime, nullable=False),
        sa.Column("updated", sa.DateTime, nullable=False),
        sa.UniqueConstraint("family", "descriptor_key", "device_key", name="uq_autotune_entry_key"),
    )
    op.create_index("ix_autotune_entry_family_device", "autotune_entry", ["family", "device_key"])
    op.create_table(
        "autotune_timing",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("entry_id", sa.Integer, sa.ForeignKey("autotune_entry.id", ondelete="CASCADE"), nullable=False),
        sa.Column("candidate", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("time_us", sa.Float),
        sa.Column("se_us", sa.Float),
        sa.Column("ci_low_us", sa.Float),
        sa.Column("ci_high_us", sa.Float),
        sa.Column("n_samples", sa.Integer),
        sa.Column("samples_us", sa.JSON),
        sa.Column("software", sa.JSON),
        sa.Column("protocol", sa.JSON),
        sa.Column("created", sa.DateTime, nullable=False),
        sa.UniqueConstraint("entry_id", "candidate", name="uq_autotune_timing_candidate"),
    )
    op.create_index("ix_autotune_timing_entry_id", "autotune_timing", ["entry_id"])
    op.create_table(
        "autotune_conv",
        sa.Column("entry_id", sa.Integer, sa.ForeignKey("autotune_entry.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("direction", sa.String(8), nullable=False),
        *[sa.Column(c, sa.Integer, nullable=False)
          for c in ("batch", "in_channels", "in_h", "in_w", "out_channels", "fil_h", "fil_w", "pad_h", "pad_w",
                    "stride_h", "stride_w", "dilation_h", "dilation_w", "groups")],
        *[sa.Column(c, sa.String(16), nullable=False) for c in ("in_dtype", "fil_dtype", "out_dtype")],
        sa.Column("layout", sa.String(8), nullable=False),
        sa.Column("math_mode", sa.String(16), nullable=False),
    )


def downgrade():
    op.drop_table("autotune_conv")
    op.drop_index("ix_autotune_timing_entry_id", "autotune_timing")
    op.drop_table("autotune_timing")
    op.drop_index("ix_autotune_entry_family_device", "autotune_entry")
    op.drop_table("autotune_entry")
