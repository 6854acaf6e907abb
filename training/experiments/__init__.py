"""A/B ranking experiments: offline paired comparisons, online bucketing, interleaving, logs, analysis.

Modules: ``rankers_config`` (named, versioned rankers), ``offline`` (paired tests on
judged collections), ``online`` (experiment definitions, bucketing), ``interleaving``
(team draft), ``logs`` (Parquet impression and click logs), ``runtime`` (what the API
holds), ``analysis`` (``report(name)``), ``simulator`` (cascade clicks, sizing).
"""
