"""A ``.npz`` archive read safely: every member's declared size is checked before any data is
read, and members are read one at a time, only when asked for.

Contract: :class:`NpzArchive` opens ``path`` and reads only the zip directory and each member's
``.npy`` header.  It refuses (one-line error of the caller's class) a member that is not a
``.npy`` array (e.g. a torch zip named ``.npz``), an object (pickled) dtype, a header whose
shape and dtype do not account for exactly the member's stored size (e.g. a header declaring
shape (10**12,) over a few bytes), a member larger than :data:`MAX_MEMBER_BYTES`, or a large
member compressed more than :data:`MAX_RATIO` : 1 (a decompression bomb).  :meth:`read` then reads
one member, never more bytes than its declared size.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npformat

from .errors import SpecboundError, one_line

#: the largest member we read (weights of a large model fit; anything beyond is refused)
MAX_MEMBER_BYTES = 16 * 2**30
#: members above this many bytes may not be compressed more than MAX_RATIO : 1
RATIO_FLOOR_BYTES = 16 * 2**20
#: float weights and token ids compress far less than this; a bomb compresses ~1000 : 1
MAX_RATIO = 200


@dataclass(frozen=True)
class Member:
    """One ``.npy`` member as its header declares it."""

    name: str  #: the array's key (the member's file name without ``.npy``)
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int


class NpzArchive:
    """The members of a ``.npz`` file (headers checked at construction; data read on demand)."""

    def __init__(self, path: str | Path, error: type[SpecboundError] = SpecboundError,
                 max_member_bytes: int = MAX_MEMBER_BYTES) -> None:
        self.path = Path(path)
        self._error = error
        self._infos: dict[str, zipfile.ZipInfo] = {}
        self.members: dict[str, Member] = {}
        try:
            with zipfile.ZipFile(self.path) as zf:
                for info in zf.infolist():
                    self._check(zf, info, max_member_bytes)
        except SpecboundError:
            raise
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, KeyError,
                NotImplementedError, RuntimeError) as exc:
            raise error(f"{self.path}: not a readable .npz archive ({type(exc).__name__}: {one_line(exc)})") from None

    def _check(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> None:
        where = f"{self.path}: member {info.filename!r}"
        if info.is_dir():
            return
        if not info.filename.endswith(".npy"):
            hint = " (this looks like a torch checkpoint named .npz)" if info.filename.endswith(".pkl") else ""
            raise self._error(f"{where} is not a .npy array: not a numpy .npz archive{hint}")
        if info.file_size > limit:
            raise self._error(f"{where} declares {info.file_size} bytes, more than the limit of {limit}")
        if info.file_size > RATIO_FLOOR_BYTES and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise self._error(f"{where} expands {info.compress_size} bytes to {info.file_size} "
                              f"(more than {MAX_RATIO}:1; refused as a decompression bomb)")
        with zf.open(info) as fh:
            version = npformat.read_magic(fh)
            if version == (1, 0):
                shape, _fortran, dtype = npformat.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, _fortran, dtype = npformat.read_array_header_2_0(fh)
            else:
                raise self._error(f"{where}: unsupported .npy format version {version}")
            header = fh.tell()
        if dtype.hasobject:
            raise self._error(f"{where}: refused to load: the array holds Python objects (pickled); "
                              "it was not executed")
        nbytes = math.prod(int(s) for s in shape) * int(dtype.itemsize)
        if header + nbytes != info.file_size:
            raise self._error(f"{where} declares shape {tuple(shape)} of {dtype} ({nbytes} bytes) but "
                              f"stores {info.file_size - header}: truncated or corrupt")
        name = info.filename[: -len(".npy")]
        self._infos[name] = info
        self.members[name] = Member(name=name, shape=tuple(int(s) for s in shape), dtype=dtype, nbytes=nbytes)

    @property
    def files(self) -> list[str]:
        return list(self.members)

    def __contains__(self, name: str) -> bool:
        return name in self.members

    def __iter__(self) -> Iterator[str]:
        return iter(self.members)

    def read(self, name: str) -> np.ndarray:
        """One member's array (reads at most its declared size)."""
        info = self._infos[name]
        try:
            with zipfile.ZipFile(self.path) as zf, zf.open(info) as fh:
                return npformat.read_array(fh, allow_pickle=False)
        except MemoryError:
            raise self._error(f"{self.path}: member {info.filename!r} ({self.members[name].nbytes} bytes) "
                              "does not fit in memory") from None
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
            raise self._error(f"{self.path}: member {info.filename!r} is corrupt "
                              f"({type(exc).__name__}: {one_line(exc)})") from None
