"""The on-disk caches, on one mechanism: a content-addressed key -> value store in SQLite.

- :mod:`~synapse_pt.cache.sqlite`: opening a cache file (WAL mode) safely when several processes
  start at once; a corrupt file named with the remedy and what deleting it loses.
- :mod:`~synapse_pt.cache.store`: :class:`~synapse_pt.cache.store.KeyValueStore`, values by key in
  one table (batched reads, one transaction per write, fork-safe), and
  :func:`~synapse_pt.cache.store.content_key`.
- :mod:`~synapse_pt.cache.vectors`: embeddings (``embeddings.sqlite``, table ``embeddings``).
- :mod:`~synapse_pt.cache.texts`: values derived from texts (``text.sqlite``, table ``derived``).
- :mod:`~synapse_pt.cache.exported`: an exported embedding cache and the encoder that serves it.

The LLM response cache is the third codec over the store; it builds the models' response type, so
it lives beside them (:mod:`synapse_pt.models.llm.cache`). This room imports nothing else of
synapse_pt: every other room may use it.
"""
