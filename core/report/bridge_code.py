"""The fixed code of an exported fast-path solution (see ``core.report.cuda_bridge``): the C++ entry upstream builds,
the Python that starts the hosted launcher, and the launch API that stands in for ``core.solution.runtime``.

This is text written into exported solutions, never imported by kernelfleet. It may use only what upstream's
environment has: torch (with its bundled pybind11), numpy, the CUDA runtime and the standard libraries.
"""

from __future__ import annotations

BRIDGE_FILE = "kf_bridge.cpp"
EMBEDDED_HEADER = "kf_embedded.h"

# The C++ entry. The launcher (Python) is hosted by this extension; the .cu sources are compiled into the same
# library, so each kernel the launcher names is found by its symbol (dlsym on this library) and launched with
# cudaLaunchKernel on the stream the launcher passes (torch's current stream).
BRIDGE_CPP = r'''// Exported by kernelfleet: the entry of a solution written for kernelfleet's fast path (a Python launcher that
// computes grids and launches the kernels of its .cu sources). Upstream's build compiles those .cu sources into
// this extension; this file hosts the launcher (kf_embedded.h) and gives it the kernels: each is found by its
// symbol name in this library and launched with cudaLaunchKernel. The entry function is the launcher's own.
#include <pybind11/pybind11.h>
#include <pybind11/eval.h>
#include <pybind11/stl.h>

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kf_embedded.h"

namespace py = pybind11;

namespace {

void check(cudaError_t status, const char* action, const std::string& kernel) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(action) + " kernel '" + kernel + "' failed: " + cudaGetErrorString(status));
  }
}

// The address of the kernel's host stub, which is what cudaLaunchKernel takes.
std::uintptr_t find_kernel(const std::string& symbol) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&find_kernel), &info) == 0 || info.dli_fname == nullptr) {
    throw std::runtime_error("cannot locate the library file of this extension");
  }
  void* self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (self == nullptr) {
    throw std::runtime_error(std::string("cannot reopen ") + info.dli_fname);
  }
  void* stub = dlsym(self, symbol.c_str());
  dlclose(self);
  if (stub == nullptr) {
    throw py::key_error("no kernel '" + symbol + "' in this extension (a kernel the launcher names must be an "
                        "extern \"C\" __global__ function of one of the .cu sources)");
  }
  return reinterpret_cast<std::uintptr_t>(stub);
}

struct alignas(16) Slot {
  unsigned char bytes[16];
};

// args: each kernel parameter's bytes (a device pointer or a numpy scalar), in order.
void launch(std::uintptr_t kernel, const std::string& name, const std::vector<unsigned>& grid,
            const std::vector<unsigned>& block, std::size_t shared_mem, std::uintptr_t stream,
            const std::vector<std::string>& args) {
  if (grid.size() != 3 || block.size() != 3) {
    throw std::invalid_argument("grid and block take three dimensions");
  }
  std::vector<std::vector<Slot>> storage(args.size());
  std::vector<void*> params(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    storage[i].resize(args[i].size() / sizeof(Slot) + 1);
    std::memcpy(storage[i].data(), args[i].data(), args[i].size());
    params[i] = storage[i].data();
  }
  check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(grid[0], grid[1], grid[2]),
                         dim3(block[0], block[1], block[2]), params.data(), shared_mem,
                         reinterpret_cast<cudaStream_t>(stream)),
        "launching", name);
}

void set_max_dynamic_shared(std::uintptr_t kernel, const std::string& name, int bytes) {
  check(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             bytes),
        "setting the dynamic shared memory of", name);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("_find_kernel", &find_kernel);
  m.def("_launch", &launch);
  m.def("_set_max_dynamic_shared", &set_max_dynamic_shared);
  py::list files;
  for (const auto& file : kf_embedded::kPythonFiles) {
    files.append(py::make_tuple(file.path, file.text));
  }
  py::dict scope;
  py::exec(kf_embedded::kStart, scope);
  py::object entry = scope["start"](m, files, kf_embedded::kEntryModule, kf_embedded::kEntrySymbol,
                                    kf_embedded::kLaunchModule, kf_embedded::kLaunchSource, kf_embedded::kUnits);
  m.attr(kf_embedded::kEntrySymbol) = entry;
}
'''

# Runs once when upstream imports the extension: writes the hosted Python files to a private folder (the launcher
# may resolve files against its own __file__, a composite imports its members from their folders), installs the
# launch API under its generated name, and imports the entry as kernelfleet's loader does.
START_PY = r'''"""Starts the Python launcher hosted by this extension (written by kernelfleet export)."""


def start(bridge, files, entry_module, entry_symbol, launch_module, launch_source, units):
    import atexit
    import importlib
    import json
    import shutil
    import sys
    import tempfile
    import types
    from pathlib import Path

    root = Path(tempfile.mkdtemp(prefix="kf_solution_")).resolve()
    atexit.register(shutil.rmtree, str(root), True)
    for rel, text in files:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    api = types.ModuleType(launch_module)
    api.__dict__.update(_BRIDGE=bridge, _ROOT=root, _UNITS=json.loads(units))
    exec(compile(launch_source, "<" + launch_module + ">", "exec"), api.__dict__)
    sys.modules[launch_module] = api

    # The entry imports its sibling files by absolute name: its folder is on sys.path while it is imported, and
    # modules of those names imported before are set aside and put back afterwards.
    parts = entry_module.split(".")
    search = [str(root.joinpath(*parts[:-1])), str(root)] if len(parts) > 1 else [str(root)]
    names = {p.stem if p.suffix == ".py" else p.name for d in search for p in Path(d).iterdir()
             if not p.name.startswith(".")}
    saved = {n: sys.modules.pop(n) for n in list(sys.modules) if n.partition(".")[0] in names}
    package = "_kf_solution_" + launch_module.rpartition("_")[2]
    pkg = types.ModuleType(package)
    pkg.__path__ = [str(root)]
    sys.modules[package] = pkg
    sys.path[:0] = search
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(package + "." + entry_module)
    finally:
        for path in search:
            if path in sys.path:
                sys.path.remove(path)
        for name in [n for n in sys.modules if n.partition(".")[0] in names]:
            del sys.modules[name]
        sys.modules.update(saved)
    return getattr(module, entry_symbol)
'''

# What the launcher imported from core.solution.runtime, over the kernels of this extension. _BRIDGE (the
# extension), _ROOT (the folder of the hosted files) and _UNITS (each .cu source -> how its kernels are named in
# the library) are set before this runs.
LAUNCH_PY = r'''"""kernelfleet's fast-path launch API (load_module, launch, current_stream) over this extension's kernels."""

import struct
import sys
from pathlib import Path, PurePosixPath

import torch

_POINTER = struct.Struct("<Q")
_modules = {}


class Kernel:
    def __init__(self, name, symbol):
        self.name = name
        self.handle = _BRIDGE._find_kernel(symbol)
        self._max_dynamic_shared = 0

    @property
    def max_dynamic_shared_size_bytes(self):
        return self._max_dynamic_shared

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value):
        _BRIDGE._set_max_dynamic_shared(self.handle, self.name, int(value))
        self._max_dynamic_shared = int(value)

    def __call__(self, grid, block, args, *, shared_mem=0, stream=None):
        launch(self, grid, block, args, shared_mem=shared_mem, stream=stream)


class Module:
    def __init__(self, unit):
        self._unit = unit
        self._kernels = {}

    def get_function(self, name):
        kernel = self._kernels.get(name)
        if kernel is None:
            kernel = self._kernels[name] = Kernel(name, _symbol(self._unit, name))
        return kernel


def _symbol(unit, name):
    prefix = unit["prefix"]
    if prefix and (name in unit["names"] or any(name.startswith(p) for p in unit["pasted"])):
        return prefix + name
    return name


def load_module(path, *, base_dir=None):
    if base_dir is None:
        caller = sys._getframe(1).f_globals.get("__file__")
        base_dir = Path(caller).parent if caller else _ROOT
    rel = PurePosixPath(str(path))
    if rel.suffix == ".cubin":
        rel = rel.with_suffix(".cu")
    for base in (Path(base_dir), _ROOT):
        try:
            key = (base / rel).resolve().relative_to(_ROOT).as_posix()
        except ValueError:
            continue
        if key in _UNITS:
            if key not in _modules:
                _modules[key] = Module(_UNITS[key])
            return _modules[key]
    raise FileNotFoundError(f"'{path}' is not a .cu source of this solution (sources: {', '.join(sorted(_UNITS))})")


def current_stream():
    return torch.cuda.current_stream()


def _stream_handle(stream):
    if stream is None:
        c = torch._C
        if hasattr(c, "_cuda_getCurrentRawStream") and hasattr(c, "_cuda_getDevice"):
            return int(c._cuda_getCurrentRawStream(c._cuda_getDevice()))
        return int(torch.cuda.current_stream().cuda_stream)
    for attribute in ("cuda_stream", "ptr"):
        handle = getattr(stream, attribute, None)
        if handle is not None:
            return int(handle)
    raise TypeError(f"stream: expected a torch.cuda.Stream, got {type(stream).__name__}")


def _dims(dims):
    dims = tuple(int(d) for d in dims)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"expected one to three dimensions, got {dims}")
    return dims + (1,) * (3 - len(dims))


def launch(kernel, grid, block, args, *, shared_mem=0, stream=None):
    packed = []
    for i, arg in enumerate(args):
        if hasattr(arg, "data_ptr") and hasattr(arg, "is_cuda"):
            if not arg.is_cuda:
                raise ValueError(f"argument {i}: a CPU tensor cannot be passed to a CUDA kernel")
            packed.append(_POINTER.pack(arg.data_ptr()))
        elif isinstance(arg, (bool, int, float)):
            raise TypeError(f"argument {i}: {type(arg).__name__} {arg!r} has no C type; pass numpy.int32(...), "
                            "numpy.int64(...), numpy.float32(...) or similar")
        elif hasattr(arg, "tobytes") and hasattr(arg, "dtype"):
            packed.append(arg.tobytes())
        else:
            raise TypeError(f"argument {i}: cannot pass a {type(arg).__name__} to a kernel")
    _BRIDGE._launch(kernel.handle, kernel.name, _dims(grid), _dims(block), int(shared_mem),
                    _stream_handle(stream), packed)
'''
