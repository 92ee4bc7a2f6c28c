"""Message and definition storage behind one interface (``store.Store``).

``store`` is the contract the broker core is written against; ``batch`` holds
the operations and the ``Recorder`` that builds the pending batch (a numbered,
self-contained record, the future unit of replication); ``apply`` is the one op
dispatcher every store applies batches through; ``batch_codec`` turns a batch
into bytes and back; ``records`` holds the on-disk byte layouts;
``lmdb_store.LmdbStore`` is the durable implementation and the only module
that knows LMDB's API; ``memory.MemoryStore`` keeps the same semantics in dicts
for unit tests and data-dir-less runs; ``group_commit`` is the recorder the
broker uses, plus the writer that commits batches off the event loop.
"""
