"""Alembic environment: calib runs migrations itself, on the connection it passes in."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, render_as_batch=True,
                  transaction_per_migration=False)
with context.begin_transaction():
    context.run_migrations()
