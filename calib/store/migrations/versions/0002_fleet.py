"""Tuning database for a fleet: workers, kind-specific configs, result roles, winners.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

WINNER_VIEW = """
CREATE VIEW winner AS
SELECT session_id, config_id, perf_config, kernel_time_us, result_id FROM (
    SELECT r.session_id, r.config_id, r.perf_config, r.kernel_time_us, r.id AS result_id,
           ROW_NUMBER() OVER (PARTITION BY r.session_id, r.config_id ORDER BY r.kernel_time_us, r.id) AS place
    FROM result r
) ranked
WHERE place = 1
"""


def upgrade():
    with op.batch_alter_table("session") as b:
        b.alter_column("label", type_=sa.String(512), existing_type=sa.String(128))
    with op.batch_alter_table("job") as b:
        b.add_column(sa.Column("worker", sa.String(128)))
        b.drop_index("ix_job_state")
        b.create_index("ix_job_session_state", ["session_id", "state"])
    with op.batch_alter_table("result") as b:
        b.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="measurement"))
        b.alter_column("job_id", existing_type=sa.Integer, nullable=True)
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
    op.drop_table("calib_meta")
    op.execute(WINNER_VIEW)


def downgrade():
    op.execute("DROP VIEW winner")
    op.drop_table("config_gemm")
    op.drop_table("config_conv")
    op.create_table("calib_meta", sa.Column("key", sa.String(64), primary_key=True),
                    sa.Column("value", sa.String(256)))
    with op.batch_alter_table("result") as b:
        b.drop_column("role")
    with op.batch_alter_table("job") as b:
        b.drop_index("ix_job_session_state")
        b.create_index("ix_job_state", ["state"])
        b.drop_column("worker")
