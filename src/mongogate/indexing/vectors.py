"""A memory's vector as stored: a BSON binary vector (subtype 9, float32), 4 bytes a dimension,
where a list of doubles would take 9 (and be read back as Python floats). Written by every writer
of memories (`recall/store.py`, `bulk.py`, `reembedding.py`) and by message search's embedding
(`memory/message_embedding.py`), read by the indexes and recall's search-index ranker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bson.binary import Binary, BinaryVectorDtype

from mongogate.errors import InvalidInput
from mongogate.lazy import lazy

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    np = lazy("numpy")

__all__ = ["FIELD", "FLOAT32_HEADER", "pack", "unpack"]

#: the field of a memory (and of a message) that holds its vector
FIELD = "embedding"
#: the subtype 9 header of a float32 vector: dtype byte, then padding (0 for float32)
FLOAT32_HEADER = BinaryVectorDtype.FLOAT32.value + b"\x00"
#: float(np.finfo(np.float32).max), written out: numpy is imported at the first pack, not with this module
_FLOAT32_MAX = 3.4028234663852886e38


def pack(vec: Sequence[float] | npt.NDArray[np.floating[Any]]) -> Binary:
    """A vector as a BSON float32 binary vector; NaN, infinity or an empty vector is refused."""
    try:
        arr = np.asarray(vec, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InvalidInput(f"an embedding is a non-empty list of numbers ({e})") from e
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidInput(f"an embedding is a non-empty list of numbers; got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise InvalidInput("an embedding holds NaN or infinity; the embedder's answer is unusable")
    if float(np.abs(arr).max()) > _FLOAT32_MAX:
        raise InvalidInput("an embedding value is too large for float32")
    return Binary(FLOAT32_HEADER + arr.astype("<f4").tobytes(), 9)


def unpack(b: Binary | bytes) -> npt.NDArray[np.float32]:
    """The float32 array inside a BSON binary vector (a read-only view; no copy)."""
    raw = bytes(b)
    if isinstance(b, Binary) and b.subtype != 9:
        raise ValueError(f"not a BSON binary vector (subtype {b.subtype}, expected 9)")
    if raw[:2] != FLOAT32_HEADER or (len(raw) - 2) % 4:
        raise ValueError("not a float32 binary vector (dtype byte, padding or length is wrong)")
    return np.frombuffer(raw, dtype="<f4", offset=2)
