"""The store: every judgment, human correction and training example in a real database.

SQLAlchemy 2 typed models (`db.models`), Alembic migrations (`db.migrations`), repository
functions that never commit (`db.repository`), and the services the CLI and the app call
(`db.services.JudgmentStore`). Depends on `reflectrm` for its value types only.
"""
