"""Serving past one machine: the index's shards as Ray Serve deployments (``trawl serve --engine ray``).

:mod:`.config` reads and checks the one config file, :mod:`.deploy` starts and scales the
shard applications, :mod:`.replica` is what each replica runs, :mod:`.shipping` carries a
generation's shard to each node's disk, and :mod:`.backend` is the broker's client. The
API, its broker, deadlines, hedging and partial answers are the same as in one process.
"""
