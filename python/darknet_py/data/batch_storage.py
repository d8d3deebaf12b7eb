"""The storage type of a training batch: float32, or the half type a network in fp16 / bf16 reads.

A network training in fp16 or bf16 holds its input in that type on the device. A loader that writes
its batches in it already (2 bytes a value instead of 4) halves what its workers write, what the
training process stages and what goes over the bus, and the device uploads the batch as it is (no
conversion there). The values are those the device's own conversion of the float32 batch gives: each
float32 rounded to nearest even (src-lib/half_convert.h; the colour pass converts on the way,
loader_pixels.cpp). NumPy has no bfloat16: a bf16 batch is a uint16 array of its bits, as
_core.half_bits gives them, and _core.Net.forward_train takes it so.
"""
from __future__ import annotations

import numpy as np

# storage type (a network's precision) -> the NumPy dtype of its batches
BATCH_DTYPES = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": np.dtype(np.uint16)}


def batch_dtype(storage: str) -> np.dtype:
    """The NumPy dtype of batches in `storage` ("fp32", "fp16", "bf16"); ValueError naming the three."""
    try:
        return BATCH_DTYPES[storage]
    except KeyError:
        raise ValueError(f"batch storage {storage!r}: use one of {', '.join(BATCH_DTYPES)}") from None


def storage_of(array: np.ndarray) -> str:
    """The storage type an array of batch values holds, by its dtype (batch_dtype's inverse)."""
    for name, dtype in BATCH_DTYPES.items():
        if array.dtype == dtype:
            return name
    raise ValueError(f"a batch array is float32, float16 (fp16) or uint16 (bf16 bits), not {array.dtype}")


def into_half(values: np.ndarray, out: np.ndarray) -> np.ndarray:
    """float32 `values` rounded into the half batch array `out` (float16 or uint16: storage_of) by the
    engine's host conversion (round to nearest even, as the device converts); returns out."""
    from .. import _core

    out[...] = _core.half_bits(np.ascontiguousarray(values, np.float32), storage_of(out)).view(out.dtype)
    return out
