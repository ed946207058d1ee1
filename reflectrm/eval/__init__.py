"""Evaluation: benchmark loaders, metrics with intervals, the report and the runner (files are read by `reflectrm.files`).

Pure library code: no database or UI imports; pandas, pyarrow and `datasets` load lazily where a
reader needs them.
"""
