"""A store with a recorder in front of it, as the broker has one (group commit without
its writer thread): tests record with the recorder's methods, ``take_batch`` and
``write_batch`` explicitly, and read from the store."""

from __future__ import annotations

from typing import Any

from leveret.persistence.batch import Recorder


class Recording:
    def __init__(self, store: Any) -> None:
        self.store = store
        self.recorder = Recorder(store.state())

    def __getattr__(self, name: str) -> Any:
        recorder = self.__dict__["recorder"]
        if not name.startswith("_") and hasattr(recorder, name):
            return getattr(recorder, name)
        return getattr(self.__dict__["store"], name)


def recording(store: Any) -> Any:
    return Recording(store)
