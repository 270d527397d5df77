"""What touching a tensor costs in memory traffic: the byte range of a view, the bytes it really touches (32-byte
sectors, stride-0 dims free), unions of accesses per storage, and the bytes gathers and scatters move."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


def tensor_span(t: torch.Tensor) -> tuple[int, int]:
    """The byte range [start, end) of ``t``'s storage that its view can touch (stride-0 dims cost nothing)."""
    if t.numel() == 0:
        return (0, 0)
    itemsize = t.element_size()
    start = t.storage_offset()
    extent = 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))
    return (start * itemsize, (start + extent) * itemsize)


SECTOR = 32  # bytes: the granularity at which DRAM traffic happens


@dataclass(frozen=True)
class Footprint:
    """The bytes a view touches: its byte range, and the bytes inside that range it really touches."""

    start: int
    end: int
    nbytes: int  # <= end - start; less for a view with gaps (a column, one slot of a cache)
    geometry: tuple  # identifies the exact set of elements

    @property
    def dense(self) -> bool:
        return self.nbytes >= self.end - self.start


def footprint(t: torch.Tensor) -> Footprint:
    """What reading or writing the whole of view ``t`` costs: contiguous runs of elements rounded up to 32-byte
    sectors; stride-0 (expanded) and size-1 dims cost nothing."""
    start, end = tensor_span(t)
    if end <= start:
        return Footprint(start, start, 0, ())
    itemsize = t.element_size()
    dims = sorted(((stride, size) for size, stride in zip(t.shape, t.stride()) if size > 1 and stride != 0),
                  key=lambda d: abs(d[0]))
    elements = math.prod(size for _, size in dims)
    run = 1  # elements per contiguous run
    for stride, size in dims:
        if abs(stride) != run:
            break
        run *= size
    runs = elements // run
    nbytes = min(end - start, runs * (-(-run * itemsize // SECTOR) * SECTOR))
    return Footprint(start, end, nbytes, (t.storage_offset(), itemsize, tuple(dims)))


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


class Accesses:
    """Byte accesses to one storage. Dense views are unioned as byte ranges; a view with gaps counts its own
    bytes once (identical views once) unless a dense range already covers it; gathers and scatters add bytes."""

    def __init__(self) -> None:
        self.dense: list[tuple[int, int]] = []
        self.gappy: dict[tuple, Footprint] = {}
        self.sparse = 0

    def add(self, fp: Footprint) -> None:
        if fp.nbytes == 0:
            return
        if fp.dense:
            self.dense.append((fp.start, fp.end))
        else:
            self.gappy.setdefault(fp.geometry, fp)

    def total(self) -> int:
        merged = _merged(self.dense)
        total = sum(hi - lo for lo, hi in merged)
        for fp in self.gappy.values():
            if not any(lo <= fp.start and fp.end <= hi for lo, hi in merged):
                total += fp.nbytes
        return total + self.sparse


def storage_key(t: torch.Tensor) -> int | None:
    """Identity of a tensor's storage (the same for every view of it); None for tensors without one."""
    try:
        return t.untyped_storage()._cdata
    except Exception:
        return None


@dataclass
class StorageUse:
    nbytes: int
    reads: Accesses = field(default_factory=Accesses)
    writes: Accesses = field(default_factory=Accesses)

    def bytes_read(self) -> int:
        return min(self.nbytes, self.reads.total())

    def bytes_written(self) -> int:
        return min(self.nbytes, self.writes.total())


def accumulates(args, kwargs) -> bool:
    if "accumulate" in kwargs:
        return bool(kwargs["accumulate"])
    return len(args) > 3 and bool(args[3])


def gathered_bytes(func, args, kwargs, source: torch.Tensor) -> int:
    """Bytes of ``source`` a gather touches: at most the size of what it returns, in the source's dtype."""
    full = footprint(source).nbytes
    out_elems = _gather_output_elements(func._overloadpacket.__name__, args, source)
    if out_elems is None:
        return full
    return min(full, out_elems * source.element_size())


def _gather_output_elements(name, args, source) -> int | None:
    try:
        if name == "index_select":
            dim, index = args[1], args[2]
            return source.numel() // max(source.shape[dim], 1) * index.numel()
        if name in ("embedding",):
            weight, indices = args[0], args[1]
            return indices.numel() * weight.shape[-1]
        if name == "gather":
            return args[2].numel()
        if name == "take":
            return args[1].numel()
        if name in ("index", "_unsafe_index"):
            return _indexed_elements(source, args[1])
    except Exception:
        return None
    return None


def _indexed_elements(source: torch.Tensor, indices) -> int | None:
    """Elements selected by advanced indexing ``source[indices]`` (None where it depends on mask values on meta)."""
    shapes, consumed, masked = [], 0, 0
    for idx in indices:
        if idx is None:
            consumed += 1
            continue
        if idx.dtype == torch.bool:
            if idx.device.type == "meta":
                return None
            masked += int(idx.sum())
            consumed += idx.dim()
            shapes.append((1,))
            continue
        shapes.append(tuple(idx.shape))
        consumed += 1
    count = math.prod(torch.broadcast_shapes(*shapes)) if shapes else 1
    if masked:
        count *= masked
    rest = math.prod(source.shape[consumed:]) if consumed <= source.dim() else 1
    none_dims = math.prod(source.shape[i] for i, idx in enumerate(indices) if idx is None and i < source.dim())
    return count * rest * none_dims


def scatter_bytes(name: str, args, kwargs, dest: torch.Tensor) -> int | None:
    """Bytes a scatter-like in-place op writes into ``dest``; None for ops that write their whole view."""
    itemsize = dest.element_size()
    try:
        if name in ("index_put_", "_index_put_impl_"):
            count = _indexed_elements(dest, args[1])
            return None if count is None else count * itemsize
        if name in ("index_copy_", "index_add_"):
            return args[3].numel() * itemsize
        if name == "index_fill_":
            dim, index = args[1], args[2]
            return dest.numel() // max(dest.shape[dim], 1) * index.numel() * itemsize
        if name in ("scatter_", "scatter_add_", "scatter_reduce_"):
            return args[2].numel() * itemsize
        if name in ("masked_fill_", "masked_scatter_"):
            mask = args[1]
            if mask.device.type == "meta":
                return None
            return int(mask.expand_as(dest).sum()) * itemsize
    except Exception:
        return None
    return None


__all__ = ["Accesses", "Footprint", "StorageUse", "WorkTracker", "dtype_name", "footprint", "narrower", "storage_key",
           "tensor_span", "wider"]


__all__ = ["Accesses", "Footprint", "SECTOR", "StorageUse", "accumulates", "footprint", "gathered_bytes",
           "scatter_bytes", "storage_key", "tensor_span"]
