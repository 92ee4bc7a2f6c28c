"""Message and definition storage behind one interface (memory now, LMDB next)."""
