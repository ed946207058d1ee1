"""Reading and writing the files users name, in one place.

    inputs.py    every read bounded before it happens: regular files only (no FIFO or device), a size and a line
                 cap, the text decoded strictly, JSON with duplicate keys refused, the data root a path must stay in
    readers.py   the labelled-file reader: pairs from JSONL, JSON, CSV, Parquet or a `datasets` folder, each row's
                 fault named by row and field, never by its value (what `judge --input`, `eval` and `import` read)
    labels.py    what a label cell may say (1/2, A/B, names, a tie) and how a column is mapped
    outputs.py   judgment files a rerun resumes: written whole or not at all, checked against the run's settings
    locks.py     one writer per output (`exclusive`, a flock beside the file or inside the folder)

Formats of one domain keep their own module and read and write through these: the benchmark loaders
(`reflectrm.eval.benchmarks`), the evaluation report (`reflectrm.eval.report`), the store's import and export.
"""
