"""The file a candidate's outputs reach the judge through: a JSON header, then each tensor's raw bytes.

No pickle: the judge parses a header it checks field by field and copies bytes, so a hostile file can fail the
attempt but cannot run code or allocate more than the file holds. Layout: 8 bytes little-endian header length,
the header (``{"outputs": {name: entry}}``), then the data. A tensor's entry is ``{"dtype", "shape", "offset",
"nbytes"}`` (offset from the start of the data); a Python number's is ``{"value": ...}``; anything else is
``{"other": type name}``, which the comparison rejects like any wrong output.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path
from typing import Any

HEADER_LENGTH = struct.Struct("<Q")
MAX_HEADER_BYTES = 1 << 20


class ExchangeError(Exception):
    """The file is not a well-formed outputs file."""


# GPU outputs go to the file through one page-locked staging buffer per process, a chunk at a time: on the H200 box
# five rounds of a 235 MB output took 0.64 s so, against 1.52 s copied straight into a mapping of the file (each page
# of it faulted in by the copy). Made at the first GPU write; stays for the process.
STAGING_BYTES = 64 << 20
_staging: dict[str, Any] = {}


def write_outputs(produced: dict[str, Any], path: Path) -> int:
    """Write the outputs to ``path``; returns the bytes written. CPU tensors are copied straight into the mapped
    file, GPU tensors through the staging buffer."""
    import torch

    from core.problem.dtypes import TORCH_DTYPES

    entries: dict[str, dict[str, Any]] = {}
    sources: list[tuple[int, Any]] = []  # (offset in the data, the tensor's bytes on its device)
    offset = 0
    for name, value in produced.items():
        if isinstance(value, torch.Tensor) and str(value.dtype).removeprefix("torch.") not in TORCH_DTYPES:
            entries[name] = {"other": f"tensor of {value.dtype}"}
        elif isinstance(value, torch.Tensor):
            data = value.detach().reshape(-1).contiguous().view(torch.uint8)
            entries[name] = {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                             "offset": offset, "nbytes": data.numel()}
            if data.numel():
                sources.append((offset, data))
            offset += data.numel()
        elif isinstance(value, (bool, int, float)):
            entries[name] = {"value": value}
        else:
            entries[name] = {"other": type(value).__name__}
    header = json.dumps({"outputs": entries}).encode()
    data_start = HEADER_LENGTH.size + len(header)
    with open(path, "w+b") as handle:
        handle.write(HEADER_LENGTH.pack(len(header)))
        handle.write(header)
        handle.truncate(data_start + offset)
        on_gpu = [(start, data) for start, data in sources if data.is_cuda]
        if on_gpu:
            if "view" not in _staging:
                buffer = mmap.mmap(-1, STAGING_BYTES)
                view = torch.frombuffer(buffer, dtype=torch.uint8)
                torch.cuda.cudart().cudaHostRegister(view.data_ptr(), STAGING_BYTES, 0)  # else pageable: slower
                _staging.update(buffer=buffer, view=view)
            buffer, view = _staging["buffer"], _staging["view"]
            for start, data in on_gpu:
                handle.seek(data_start + start)
                for chunk in range(0, data.numel(), STAGING_BYTES):
                    count = min(STAGING_BYTES, data.numel() - chunk)
                    view[:count].copy_(data[chunk:chunk + count])
                    handle.write(memoryview(buffer)[:count])
        on_cpu = [(start, data) for start, data in sources if not data.is_cuda]
        if on_cpu:
            handle.flush()
            with mmap.mmap(handle.fileno(), data_start + offset) as mapped:
                for start, data in on_cpu:
                    torch.frombuffer(mapped, dtype=torch.uint8, count=data.numel(),
                                     offset=data_start + start).copy_(data)
    return data_start + offset


def read_outputs(path: str | os.PathLike, device) -> dict[str, Any]:
    """The outputs in ``path``, tensors on ``device``; ExchangeError when the file is malformed."""
    import torch

    from core.problem.dtypes import TORCH_DTYPES

    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        raw_length = handle.read(HEADER_LENGTH.size)
        if len(raw_length) != HEADER_LENGTH.size:
            raise ExchangeError("truncated header")
        (length,) = HEADER_LENGTH.unpack(raw_length)
        if length > min(MAX_HEADER_BYTES, size - HEADER_LENGTH.size):
            raise ExchangeError(f"header length {length} is out of range")
        try:
            header = json.loads(handle.read(length))
        except ValueError as exc:
            raise ExchangeError(f"header is not JSON: {exc}") from None
        data_start = HEADER_LENGTH.size + length
        entries = header.get("outputs") if isinstance(header, dict) else None
        if not isinstance(entries, dict):
            raise ExchangeError("header has no outputs mapping")
        # A private (copy-on-write) mapping: tensors are read from the file's pages without a copy in between.
        mapped = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY) if size > data_start else None
        try:
            return _entries(entries, mapped, data_start, size, TORCH_DTYPES, torch.device(device), torch)
        finally:
            if mapped is not None:
                mapped.close()


def _entries(entries: dict[str, Any], mapped, data_start: int, size: int, dtypes, device, torch) -> dict[str, Any]:
    produced: dict[str, Any] = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise ExchangeError(f"output {name}: entry is not a mapping")
        if "value" in entry:
            value = entry["value"]
            if not isinstance(value, (bool, int, float)):
                raise ExchangeError(f"output {name}: value is not a number")
            produced[name] = value
        elif "other" in entry:
            produced[name] = f"<{entry['other']}>"
        else:
            produced[name] = _read_tensor(mapped, name, entry, data_start, size, dtypes, device, torch)
    return produced


def _read_tensor(mapped, name: str, entry: dict[str, Any], data_start: int, size: int, dtypes, device, torch):
    dtype = dtypes.get(entry.get("dtype"))
    shape, offset, nbytes = entry.get("shape"), entry.get("offset"), entry.get("nbytes")
    if dtype is None:
        raise ExchangeError(f"output {name}: unknown dtype {entry.get('dtype')!r}")
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise ExchangeError(f"output {name}: bad shape {shape!r}")
    if type(offset) is not int or type(nbytes) is not int or offset < 0 or data_start + offset + nbytes > size:
        raise ExchangeError(f"output {name}: data range is outside the file")
    elements = 1
    for d in shape:
        elements *= d
    if elements * torch.empty(0, dtype=dtype).element_size() != nbytes:
        raise ExchangeError(f"output {name}: {nbytes} bytes do not hold shape {shape} of {entry['dtype']}")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    view = torch.frombuffer(mapped, dtype=torch.uint8, count=nbytes, offset=data_start + offset)
    tensor = view.view(dtype).reshape(shape)
    return tensor.clone() if device.type == "cpu" else tensor.to(device)
