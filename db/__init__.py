"""The store: every judgment, human correction and training example in a real database.

SQLAlchemy 2 typed models (`reflectrm_db.models`), Alembic migrations (`reflectrm_db.migrations`), repository
functions that never commit (`reflectrm_db.repository`), and the services the CLI and the app call
(`reflectrm_db.services.JudgmentStore`). Depends on `reflectrm` for its value types only.
"""
