"""Test helpers for machine.memory.ArrayStore (the tile arrays and the HBM arrays): a store that counts the arrays
it hands out again, and what a store keeps."""

from opennki.machine.memory import ArrayStore


class Counting(ArrayStore):
    """An ArrayStore that counts the arrays taken again (`taken`); mixed in before a subclass (`HbmArrays`), it
    counts that one's."""

    taken = 0

    def take(self, dtype, size):
        arr = super().take(dtype, size)
        self.taken += arr is not None
        return arr


def kept_arrays(store: ArrayStore) -> list:
    """The arrays `store` keeps, kind by kind (the kind given least recently first), the oldest first."""
    return [arr for kept in store._kept.values() for arr in kept]
