"""IDX files (MNIST, Fashion-MNIST: http://yann.lecun.com/exdb/mnist/), read and judged without torch.

An IDX file is untrusted: its header, its size (truncated or padded) and its gzip stream are checked, and
every problem is one sentence naming the file (DataFileError). `idx_layout` is the one place those rules
live: `read_idx` applies them to the whole file, and `idx_file_layout` to the header and the size alone, so
the command line's first pass (fedclust/precheck/) refuses a truncated file in milliseconds with the very
sentence the run would print after loading it. numpy only, no torch.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from fedclust.errors import DataFileError

# IDX type codes; the data are big-endian
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
HEAD_BYTES = 4 + 4 * 4  # the magic number and up to four dimensions


def idx_layout(path: str | os.PathLike, head: bytes, size: int) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype an IDX file's header declares, checked against the file's (uncompressed) size;
    `head` holds at least its first HEAD_BYTES bytes (or the whole file when it is shorter)."""
    if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in IDX_DTYPES or not 1 <= head[3] <= 4:
        raise DataFileError(f"{path} is not an IDX file (its first four bytes are not an IDX header)")
    ndim, dtype = head[3], np.dtype(IDX_DTYPES[head[2]])
    if min(len(head), size) < 4 + 4 * ndim:
        raise DataFileError(f"{path} is truncated inside its IDX header; download it again")
    shape = struct.unpack(f">{ndim}i", head[4:4 + 4 * ndim])
    expected = 4 + 4 * ndim + int(np.prod(shape)) * dtype.itemsize
    if min(shape) < 0 or size != expected:
        raise DataFileError(f"{path} holds {size} bytes where its IDX header {shape} needs {expected} "
                            "(truncated or damaged); download it again")
    return shape, dtype


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array stored in an IDX file, gzipped (by its magic bytes, not its name) or raw."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as error:
            raise DataFileError(f"{path} is a damaged gzip file ({error}); download it again") from None
    shape, dtype = idx_layout(path, data[:HEAD_BYTES], len(data))
    array = np.frombuffer(data, dtype, count=int(np.prod(shape)), offset=4 + 4 * len(shape))
    return array.reshape(shape).astype(array.dtype.newbyteorder("="))


def idx_file_layout(path: Path) -> tuple[int, ...]:
    """The shape an IDX file holds, judged from its header and its size without reading it all: a raw file
    by its size on disk (read_idx's very rule on the very numbers), a gzipped one by the size its gzip
    trailer records. Whenever a gzipped file's header and trailer do not agree (a damaged or truncated
    stream, several gzip members) the whole file is read with read_idx, so anything refused here is refused
    with read_idx's own sentence."""
    with open(path, "rb") as f:
        head = f.read(HEAD_BYTES)
        if head[:2] != b"\x1f\x8b":
            return idx_layout(path, head, os.fstat(f.fileno()).st_size)[0]
        f.seek(0)
        try:
            unzipped = zlib.decompressobj(wbits=31).decompress(f.read(1 << 16), HEAD_BYTES)
            f.seek(-4, os.SEEK_END)
            recorded = struct.unpack("<I", f.read(4))[0]  # ISIZE: the uncompressed size modulo 2**32 (RFC 1952)
        except (zlib.error, OSError, struct.error):
            return read_idx(path).shape
    declared = _declared_size(unzipped)
    if declared is None or recorded != declared[1] % 2**32:
        return read_idx(path).shape
    return declared[0]


def _declared_size(head: bytes) -> tuple[tuple[int, ...], int] | None:
    """(shape, size in bytes) a well-formed IDX header declares; None for anything else."""
    if len(head) < 4 or head[:2] != b"\0\0" or head[2] not in IDX_DTYPES or not 1 <= head[3] <= 4:
        return None
    ndim = head[3]
    if len(head) < 4 + 4 * ndim:
        return None
    shape = struct.unpack(f">{ndim}i", head[4:4 + 4 * ndim])
    if min(shape) < 0:
        return None
    return shape, 4 + 4 * ndim + int(np.prod(shape)) * np.dtype(IDX_DTYPES[head[2]]).itemsize
