"""Offline A/B work: paired comparisons on judged collections, analysis of the online logs, simulators.

Modules: ``rankers_config`` (named, versioned rankers), ``offline`` (paired tests on
judged collections), ``analysis`` (``report(name)`` over the logs ``online`` writes),
``simulator`` (cascade clicks, sizing), ``stats`` and ``plot``. What a serving process
needs (bucketing, interleaving, the logs, the runtime) is the ``online`` package.
"""
