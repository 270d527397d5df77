"""Per-kernel resource usage from the ``ptxas -v`` report that nvcc prints while it builds."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class KernelResources:
    """What ptxas allocated for one function on one architecture. Sizes are in bytes.

    ``entry`` is False for a device function that was not inlined: ptxas reports its own stack frame and spills,
    but its registers count towards the kernels that call it, so ``registers`` is 0 there.
    """

    name: str
    registers: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int
    stack_bytes: int
    cumulative_stack_bytes: int = 0
    constant_bytes: int = 0
    barriers: int = 0
    mangled_name: str = ""
    arch: str = ""
    entry: bool = True
    source: str = ""


_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'")
_PROPERTIES = re.compile(r"ptxas info\s*: Function properties for (?P<name>\S+)")
_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_USAGE = re.compile(r"ptxas info\s*: Used (?P<registers>\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SHARED = re.compile(r"(\d+) bytes smem")
_CUMULATIVE_STACK = re.compile(r"(\d+) bytes cumulative stack size")
_CONSTANT = re.compile(r"(\d+) bytes cmem\[\d+\]")


def parse_ptxas_report(text: str, source: str = "") -> tuple[KernelResources, ...]:
    """Every function ptxas described in ``text`` (other lines are ignored), in the order it described them.

    ``source`` is recorded on each result: the .cu file whose compilation printed the report.
    """
    functions: dict[tuple[str, str], dict] = {}
    arch = ""
    current_entry: tuple[str, str] | None = None
    # The stack/spill line has no name of its own: it belongs to the "Function properties for" line above it.
    awaiting_frame: tuple[str, str] | None = None

    for line in text.splitlines():
        if match := _ENTRY.search(line):
            arch = match["arch"]
            current_entry = (arch, match["name"])
            functions.setdefault(current_entry, _blank(match["name"], arch, entry=True))
        elif match := _PROPERTIES.search(line):
            awaiting_frame = (arch, match["name"])
            functions.setdefault(awaiting_frame, _blank(match["name"], arch, entry=awaiting_frame == current_entry))
        elif awaiting_frame is not None and (match := _FRAME.search(line)):
            functions[awaiting_frame].update(
                stack_bytes=int(match["stack"]),
                spill_stores=int(match["stores"]),
                spill_loads=int(match["loads"]),
            )
            awaiting_frame = None
        elif current_entry is not None and (match := _USAGE.search(line)):
            functions[current_entry].update(
                registers=int(match["registers"]),
                barriers=_first_int(_BARRIERS, line),
                shared_bytes=_first_int(_SHARED, line),
                cumulative_stack_bytes=_first_int(_CUMULATIVE_STACK, line),
                constant_bytes=sum(int(size) for size in _CONSTANT.findall(line)),
            )

    return tuple(KernelResources(**fields, source=source) for fields in functions.values())


def _blank(mangled_name: str, arch: str, *, entry: bool) -> dict:
    return {
        "name": demangle(mangled_name),
        "mangled_name": mangled_name,
        "arch": arch,
        "entry": entry,
        "registers": 0,
        "spill_stores": 0,
        "spill_loads": 0,
        "shared_bytes": 0,
        "stack_bytes": 0,
    }


def _first_int(pattern: re.Pattern[str], line: str) -> int:
    match = pattern.search(line)
    return int(match[1]) if match else 0


@functools.cache
def demangle(symbol: str) -> str:
    """``_Z5spillILi64EEvPfPKf`` -> ``void spill<64>(float*, float const*)``; other names come back unchanged."""
    demangler = _load_demangler()
    if demangler is None or not symbol.startswith("_Z"):
        return symbol
    return demangler(symbol) or symbol


@functools.cache
def _load_demangler() -> Callable[[str], str | None] | None:
    """libstdc++'s ``__cxa_demangle`` through ctypes: in-process, so parsing a report never spawns c++filt."""
    try:
        libstdcxx = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
    except OSError:
        return None
    cxa_demangle = libstdcxx.__cxa_demangle
    cxa_demangle.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    cxa_demangle.restype = ctypes.c_void_p
    free = libc.free
    free.argtypes = [ctypes.c_void_p]

    def run(symbol: str) -> str | None:
        status = ctypes.c_int()
        buffer = cxa_demangle(symbol.encode(), None, None, ctypes.byref(status))
        if status.value != 0 or not buffer:
            return None
        try:
            return ctypes.string_at(buffer).decode(errors="replace")
        finally:
            free(buffer)

    return run
