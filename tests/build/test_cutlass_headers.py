"""CUTLASS C++ headers for candidates that include them (core.build.cutlass): found where upstream looks
($CUTLASS_DIR, /usr/local/cutlass) or in PyPI's nvidia-cutlass, put on a real nvcc build's include path only for
sources that include them, and a one-line refusal when a source needs them and none are found."""

from __future__ import annotations

import importlib.util

import pytest

from core.build import BuildRequest, BuildService, build_sync
from core.build import cutlass
from core.build.nvcc import find_nvcc
from core.errors import SpecError
from core.solution.io import parse_solution
from core.solution.support import RunKind, run_kind

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")

# A kernel that compiles only with the folder holding cutlass/cutlass.h on the include path.
USES_CUTLASS = """#include <cutlass/cutlass.h>
extern "C" __global__ void fill(float* out) { out[threadIdx.x] = FAKE_CUTLASS_VALUE; }
"""
PLAIN = """// #include <cutlass/cutlass.h> in a comment is not an include
extern "C" __global__ void fill(float* out) { out[threadIdx.x] = 1.0f; }
"""


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No CUTLASS of this machine is seen unless a test makes one: upstream's default folder and the package moved
    out of reach, the lookup cache cleared before and after."""
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache-root"))
    monkeypatch.delenv("CUTLASS_DIR", raising=False)
    monkeypatch.setattr(cutlass, "UPSTREAM_DEFAULT_DIR", str(tmp_path / "no-usr-local-cutlass"))
    monkeypatch.setattr(cutlass, "PACKAGE", "kernelfleet_no_such_cutlass_package")
    cutlass._find.cache_clear()
    yield
    cutlass._find.cache_clear()


def fake_cutlass(root, major=4, minor=2, patch=1):
    (root / "include" / "cutlass").mkdir(parents=True)
    (root / "tools" / "util" / "include" / "cutlass" / "util").mkdir(parents=True)
    (root / "include" / "cutlass" / "cutlass.h").write_text("#pragma once\n#define FAKE_CUTLASS_VALUE 7.0f\n")
    (root / "include" / "cutlass" / "version.h").write_text(
        f"#define CUTLASS_MAJOR {major}\n#define CUTLASS_MINOR {minor}\n#define CUTLASS_PATCH {patch}\n")
    return root


def test_found_through_cutlass_dir_with_its_version(tmp_path, monkeypatch):
    root = fake_cutlass(tmp_path / "cutlass")
    monkeypatch.setenv("CUTLASS_DIR", str(root))
    headers = cutlass.find_cutlass()
    assert headers.origin == "CUTLASS_DIR" and headers.version == "4.2.1" and headers.number == 40201
    assert headers.include_dirs == (root / "include", root / "tools" / "util" / "include")
    assert cutlass.cutlass_flags({"k.cu": USES_CUTLASS}) == (
        f"-I{root}/include", f"-I{root}/tools/util/include", "-DKERNELFLEET_CUTLASS_VERSION=40201")
    assert cutlass.cutlass_flags({"k.cu": PLAIN}) == ()


def test_a_folder_without_cutlass_h_is_not_cutlass(tmp_path, monkeypatch):
    (tmp_path / "empty" / "include").mkdir(parents=True)
    monkeypatch.setenv("CUTLASS_DIR", str(tmp_path / "empty"))
    assert cutlass.find_cutlass() is None
    assert cutlass.cutlass_flags({"k.cu": "#include <cute/tensor.hpp>\n"}) is None


def test_which_sources_include_cutlass():
    assert cutlass.includes_cutlass({"a.cu": "  #  include <cute/tensor.hpp>\n"})
    assert cutlass.includes_cutlass({"a.cuh": '#include "cutlass/numeric_types.h"\n', "b.cu": ""})
    assert not cutlass.includes_cutlass({"a.cu": PLAIN, "b.h": '#include "cutlass_like.h"\n'})


@needs_nvcc
def test_nvcc_build_gets_the_headers_only_when_found(tmp_path, monkeypatch):
    service = BuildService(cache_dir=tmp_path / "builds")
    request = BuildRequest(sources={"fill.cu": USES_CUTLASS}, compile=("fill.cu",), arch="sm_90a")
    refused = build_sync(request, service)
    assert not refused.ok and refused.errors == cutlass.MISSING

    monkeypatch.setenv("CUTLASS_DIR", str(fake_cutlass(tmp_path / "cutlass")))
    built = build_sync(request, service)
    assert built.ok, built.errors
    assert built.cubins["fill.cu"].read_bytes()[:4] == b"\x7fELF"
    # Another CUTLASS version is another build: the version is part of the flags, so of the key.
    monkeypatch.setenv("CUTLASS_DIR", str(fake_cutlass(tmp_path / "cutlass-4.3", minor=3, patch=0)))
    again = build_sync(request, service)
    assert again.ok and not again.cache_hit and again.key != built.key
    # A source that includes no CUTLASS header builds without any, found or not.
    monkeypatch.delenv("CUTLASS_DIR")
    assert build_sync(BuildRequest(sources={"plain.cu": PLAIN}, compile=("plain.cu",), arch="sm_90a"), service).ok


@needs_nvcc
def test_the_candidate_folder_comes_before_cutlass(tmp_path, monkeypatch):
    """As upstream orders them: a candidate's own cutlass/cutlass.h is the one included."""
    monkeypatch.setenv("CUTLASS_DIR", str(fake_cutlass(tmp_path / "cutlass")))
    own = "#pragma once\n#define FAKE_CUTLASS_VALUE 9.0f\n#define OWN_HEADER 1\n"
    source = USES_CUTLASS + "#ifndef OWN_HEADER\n#error the CUTLASS folder came first\n#endif\n"
    result = build_sync(BuildRequest(sources={"fill.cu": source, "cutlass/cutlass.h": own}, compile=("fill.cu",),
                                     arch="sm_90a"), BuildService(cache_dir=tmp_path / "builds"))
    assert result.ok, result.errors


def cutlass_solution(entry: str = "kernel.cu::run") -> dict:
    return {"name": "c", "definition": "d", "author": "tests",
            "spec": {"languages": ["cutlass"], "target_hardware": ["LOCAL"], "entry_point": entry,
                     "binding": "torch"},
            "sources": [{"path": "kernel.cu", "content": USES_CUTLASS}]}


def test_the_cutlass_language_runs_as_a_torch_extension_or_is_refused_in_one_line(tmp_path, monkeypatch):
    solution = parse_solution(cutlass_solution(), "solution.json")
    with pytest.raises(SpecError) as refused:
        run_kind(solution, "solution.json")
    assert str(refused.value) == f"solution.json: spec.languages[0]: {cutlass.MISSING}"
    monkeypatch.setenv("CUTLASS_DIR", str(fake_cutlass(tmp_path / "cutlass")))
    assert run_kind(solution, "solution.json") is RunKind.TORCH_EXT


@needs_nvcc
@pytest.mark.skipif(importlib.util.find_spec("cutlass_library") is None, reason="nvidia-cutlass not installed")
def test_real_cutlass_headers_from_pypi_build_a_cute_kernel(tmp_path, monkeypatch):
    monkeypatch.setattr(cutlass, "PACKAGE", "cutlass_library")
    cutlass._find.cache_clear()
    headers = cutlass.find_cutlass()
    assert headers.origin == "nvidia-cutlass" and headers.number >= 30000
    kernel = """#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>
extern "C" __global__ void scale(cutlass::half_t* data, int n) {
  using namespace cute;
  auto layout = make_layout(make_shape(n));
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < size(layout)) data[layout(i)] = data[layout(i)] * cutlass::half_t(2.0f);
}
"""
    result = build_sync(BuildRequest(sources={"scale.cu": kernel}, compile=("scale.cu",), arch="sm_90a"),
                        BuildService(cache_dir=tmp_path / "builds", timeout_s=300))
    assert result.ok, result.errors
    assert any(k.name == "scale" for k in result.resources)
