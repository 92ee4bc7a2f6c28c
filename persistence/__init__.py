"""Message and definition storage behind one interface (``store.Store``).

``store`` is the contract the broker core is written against; ``batch`` records
operations into the pending batch (shared by both stores, so they fold and order
a batch identically); ``records`` holds the on-disk byte layouts;
``lmdb_store.LmdbStore`` is the durable implementation and the only module
that knows LMDB's API; ``memory.MemoryStore`` keeps the same semantics in dicts
for unit tests and data-dir-less runs; ``group_commit`` drives batches from the
event loop.
"""
