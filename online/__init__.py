"""What a serving process holds for live ranking experiments; depends on ``core`` only.

Modules: ``book`` (experiment definitions from ``experiments.toml``, sticky bucketing),
``interleaving`` (team draft and click credit), ``logs`` (Parquet impression and click
logs), ``runtime`` (the per-process object the API holds), ``toml_tables`` (the TOML
table reader that the book and ``training``'s ranker catalog share).

The offline side (analysis of these logs, paired tests, simulators) is
``training.experiments``, which reads what this package writes.
"""
