"""Reader and writer for Loom golden files (reference tensors produced by PyTorch).

Format (all integers little endian):

    8 bytes   magic b"LOOMGLD1"
    uint32    version (= 1)
    uint32    count, the number of entries
    each entry:
        uint32        name_len, then name_len bytes of UTF-8 (no terminator)
        uint32        dtype: 0 = float32, 1 = int32
        uint32        ndim, then int64 dims[ndim]
        the data, row-major, prod(dims) elements of dtype

The C++ tests read the same format; keep the two in sync.
"""

import struct
from collections import OrderedDict

import numpy as np

MAGIC = b"LOOMGLD1"
VERSION = 1

# dtype code <-> little-endian numpy dtype
_DTYPE_CODES = {0: np.dtype("<f4"), 1: np.dtype("<i4")}
_CODE_OF_KIND = {"f": 0, "i": 1}


def _as_storable(name, array):
    """Converts `array` to a contiguous little-endian float32 or int32 array, with its dtype code."""
    a = np.asarray(array)
    kind = a.dtype.kind
    if kind == "u" or kind == "b":
        kind = "i"
    if kind not in _CODE_OF_KIND:
        raise TypeError(f"entry '{name}': unsupported dtype {a.dtype}")
    code = _CODE_OF_KIND[kind]
    target = _DTYPE_CODES[code]
    if code == 1 and a.dtype != target:
        # Integer narrowing must not silently wrap.
        if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
            raise ValueError(f"entry '{name}': values do not fit in int32")
    return np.ascontiguousarray(a, dtype=target), code


def write_golden(path, entries):
    """Writes `entries` to `path`.

    entries: an iterable of (name, array) pairs, or a mapping name -> array (insertion order is
    kept). Floating arrays are stored as float32, integer arrays as int32.
    """
    items = list(entries.items()) if hasattr(entries, "items") else list(entries)
    names = [n for n, _ in items]
    if len(set(names)) != len(names):
        raise ValueError("duplicate entry names")
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<II", VERSION, len(items)))
        for name, array in items:
            a, code = _as_storable(name, array)
            name_bytes = name.encode("utf-8")
            f.write(struct.pack("<I", len(name_bytes)))
            f.write(name_bytes)
            f.write(struct.pack("<II", code, a.ndim))
            if a.ndim:
                f.write(struct.pack(f"<{a.ndim}q", *a.shape))
            f.write(a.tobytes(order="C"))


def read_golden(path):
    """Reads a golden file; returns an OrderedDict name -> numpy array (float32 or int32)."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(n):
        nonlocal pos
        if pos + n > len(data):
            raise ValueError(f"{path}: truncated file")
        chunk = data[pos:pos + n]
        pos += n
        return chunk

    if take(len(MAGIC)) != MAGIC:
        raise ValueError(f"{path}: bad magic")
    version, count = struct.unpack("<II", take(8))
    if version != VERSION:
        raise ValueError(f"{path}: unsupported version {version}")
    entries = OrderedDict()
    for _ in range(count):
        (name_len,) = struct.unpack("<I", take(4))
        name = take(name_len).decode("utf-8")
        code, ndim = struct.unpack("<II", take(8))
        if code not in _DTYPE_CODES:
            raise ValueError(f"{path}: entry '{name}' has unknown dtype code {code}")
        dims = struct.unpack(f"<{ndim}q", take(8 * ndim)) if ndim else ()
        dtype = _DTYPE_CODES[code]
        n = int(np.prod(dims, dtype=np.int64)) if ndim else 1
        a = np.frombuffer(take(n * dtype.itemsize), dtype=dtype).reshape(dims)
        entries[name] = a.copy()
    if pos != len(data):
        raise ValueError(f"{path}: {len(data) - pos} trailing bytes")
    return entries
