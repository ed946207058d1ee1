"""Evaluation: benchmark loaders, a generic labelled-data reader, metrics with intervals, and the runner.

Pure library code: no database or UI imports; pandas, pyarrow and `datasets` load lazily where a
reader needs them.
"""
