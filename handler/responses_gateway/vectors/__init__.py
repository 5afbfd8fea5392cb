"""Vector stores: the catalog of stores and their files (:mod:`.store`), ingestion (extract,
chunk, embed: :mod:`.ingest`), and search over a :class:`~.store.VectorIndex`. The local
engine keeps all of it in the SQLite database of ``GATEWAY_STORE`` (:mod:`.local`)."""
