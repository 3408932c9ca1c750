"""The first results store (calib 0.1): session, config, job, result.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade():
    op.create_table("calib_meta", sa.Column("key", sa.String(64), primary_key=True),
                    sa.Column("value", sa.String(256)))
    op.create_table(
        "session",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("label", sa.String(128), index=True),
        sa.Column("created", sa.DateTime),
        sa.Column("device_name", sa.String(128)),
        sa.Column("arch", sa.String(32)),
        sa.Column("sm_count", sa.Integer),
        sa.Column("simulated", sa.Boolean),
        sa.Column("driver", sa.String(64)),
        sa.Column("cuda_runtime", sa.String(64)),
        sa.Column("cupy_version", sa.String(64)),
        sa.Column("calib_version", sa.String(64)),
        sa.Column("device", sa.JSON),
        sa.Column("software", sa.JSON),
        sa.Column("reason", sa.String(128)),
        sa.Column("ticket", sa.String(128)),
        sa.Column("container", sa.String(256)),
        sa.Column("machine_name", sa.String(128)),
        sa.Column("profile_path", sa.Text),
    )
    op.create_table(
        "config",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("experiment", sa.String(64), index=True),
        sa.Column("descriptor", sa.Text),
        sa.Column("descriptor_hash", sa.String(64), unique=True),
    )
    op.create_table(
        "job",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("session_id", sa.Integer, sa.ForeignKey("session.id"), index=True),
        sa.Column("config_id", sa.Integer, sa.ForeignKey("config.id")),
        sa.Column("state", sa.String(16), index=True),
        sa.Column("retries", sa.Integer),
        sa.Column("error", sa.Text),
        sa.Column("claimed_at", sa.DateTime),
        sa.Column("started_at", sa.DateTime),
        sa.Column("finished_at", sa.DateTime),
        sa.Column("heartbeat_at", sa.DateTime),
        sa.Column("gpu_id", sa.Integer),
        sa.Column("machine_name", sa.String(128)),
        sa.UniqueConstraint("session_id", "config_id"),
    )
    op.create_table(
        "result",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("session_id", sa.Integer, sa.ForeignKey("session.id"), index=True),
        sa.Column("config_id", sa.Integer, sa.ForeignKey("config.id"), index=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("job.id"), nullable=False),
        sa.Column("perf_config", sa.Text),
        sa.Column("kernel_time_us", sa.Float),
        sa.Column("median_us", sa.Float),
        sa.Column("se_us", sa.Float),
        sa.Column("n_samples", sa.Integer),
        sa.Column("stop_reason", sa.String(32)),
        sa.Column("throttled", sa.Boolean),
        sa.Column("simulated", sa.Boolean),
        sa.Column("samples_us", sa.JSON),
        sa.Column("protocol", sa.JSON),
        sa.Column("clocks", sa.JSON),
        sa.Column("warnings", sa.JSON),
        sa.Column("created", sa.DateTime),
    )


def downgrade():
    for table in ("result", "job", "config", "session", "calib_meta"):
        op.drop_table(table)
