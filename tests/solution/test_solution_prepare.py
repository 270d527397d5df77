import dataclasses
import time

import pytest
from solution_helpers import FAST_EXAMPLE, PYTORCH_EXAMPLE, make_solution, needs_cpp_toolchain, needs_nvcc, run_async

from core.errors import SpecError
from core.solution import CUTE_DSL_MISSING, RunKind, SourceFile, load_solution, prepare, run_kind, with_values
from core.solution.support import CUTE_DSL_NO_GPU, cuda_gpu_present, cute_dsl_available
from core.solution.torch_ext import CACHE_SUBDIR


def replace_source(solution, path, content):
    return dataclasses.replace(
        solution, sources=tuple(SourceFile(s.path, content) if s.path == path else s for s in solution.sources)
    )


# ---------------------------------------------------------------- kinds and unsupported languages


def test_run_kinds():
    assert run_kind(load_solution(PYTORCH_EXAMPLE)) is RunKind.PYTHON
    assert run_kind(load_solution(FAST_EXAMPLE)) is RunKind.CUDA_FAST
    ext = make_solution({"k.cu": "x"}, languages=["cuda_cpp"], entry="k.cu::run", binding="torch")
    assert run_kind(ext) is RunKind.TORCH_EXT
    no_binding = make_solution({"k.cu": "x"}, languages=["cuda_cpp"], entry="k.cu::run")
    assert run_kind(no_binding) is RunKind.TORCH_EXT  # upstream: a null binding means torch for C++


@pytest.mark.parametrize("language", ["tlx", "cudnn_frontend"])
def test_unsupported_python_languages(language):
    sol = make_solution({"main.py": "def run(): pass\n"}, languages=[language])
    with pytest.raises(SpecError) as info:
        run_async(prepare, sol)
    assert info.value.field == "spec.languages[0]"
    assert f"language '{language}' is not supported by kernelfleet yet" in info.value.message


def test_cutile_here_is_one_clear_line():
    from core.solution.support import cutile_refusal

    sol = make_solution({"main.py": "def run(): pass\n"}, languages=["cutile"])
    refusal = cutile_refusal()
    if refusal is None:
        pytest.skip("cuTile can run here")
    with pytest.raises(SpecError) as info:
        run_async(prepare, sol)
    assert info.value.field == "spec.languages[0]" and info.value.message == refusal
    assert "\n" not in refusal and refusal.startswith("cuTile ")


@pytest.mark.parametrize("language", ["cublas", "cudnn"])
def test_unsupported_cpp_languages(language):
    sol = make_solution({"k.cu": "x"}, languages=[language], entry="k.cu::run")
    with pytest.raises(SpecError, match=f"'{language}' is not supported by kernelfleet yet"):
        run_async(prepare, sol)


@pytest.mark.skipif(cute_dsl_available(), reason="CuTe DSL is installed here")
def test_cute_dsl_without_the_package_is_a_clear_error():
    sol = make_solution({"main.py": "def run(): pass\n"}, languages=["cute_dsl"])
    with pytest.raises(SpecError) as info:
        run_async(prepare, sol)
    if cuda_gpu_present():
        assert info.value.message == CUTE_DSL_MISSING
    else:  # the device first: installing the package would not help
        assert info.value.message == CUTE_DSL_NO_GPU + " (and nvidia-cutlass-dsl is not installed)"
    assert CUTE_DSL_MISSING == "CuTe DSL (nvidia-cutlass-dsl) is not installed in this environment"
    assert CUTE_DSL_NO_GPU == "CuTe DSL needs a CUDA GPU; this machine has none"
    assert info.value.field == "spec.languages[0]"


def test_fast_path_refuses_a_torch_binding_and_needs_a_cu_source():
    with pytest.raises(SpecError) as info:
        run_kind(make_solution({"main.py": "x", "k.cu": "x"}, languages=["cuda_cpp"], binding="torch"))
    assert info.value.field == "spec.binding"
    with pytest.raises(SpecError, match="at least one .cu source"):
        run_kind(make_solution({"main.py": "x"}, languages=["cuda_cpp"]))


def test_fast_path_needs_a_build_service():
    with pytest.raises(ValueError, match="BuildService"):
        run_async(prepare, load_solution(FAST_EXAMPLE))


# ---------------------------------------------------------------- Python languages


def test_python_solution_has_nothing_to_compile():
    sol = make_solution({"main.py": "def run(): pass\n", "tunables.json": '{"space": {"N": [3, 4]}}'})
    prepared = run_async(prepare, sol)
    assert prepared.ok and prepared.kind is RunKind.PYTHON and prepared.build is None
    assert "N = 3" in prepared.generated["kernelfleet_tunables.py"]
    assert run_async(prepare, load_solution(PYTORCH_EXAMPLE)).generated == {}


# ---------------------------------------------------------------- the fast path (real nvcc, no GPU needed)


@needs_nvcc
def test_fast_path_builds_a_real_cubin(build_service):
    sol = load_solution(FAST_EXAMPLE)
    prepared = run_async(prepare, sol, build_service)
    assert prepared.ok, prepared.errors
    assert prepared.kind is RunKind.CUDA_FAST and not prepared.cache_hit
    cubin = prepared.cubins["rmsnorm.cu"]
    assert cubin.is_file() and cubin.read_bytes()[:4] == b"\x7fELF"
    assert [r.name for r in prepared.build.resources] == ["rmsnorm_kernel"]
    assert prepared.defines == {"BLOCK": 256}
    assert "BLOCK = 256" in prepared.generated["kernelfleet_tunables.py"]

    again = run_async(prepare, sol, build_service)
    assert again.cache_hit and again.build.key == prepared.build.key
    # Only the launcher changed: the cubins are reused.
    launcher_only = replace_source(sol, "main.py", sol.source("main.py").content + "\n# tweak\n")
    assert run_async(prepare, launcher_only, build_service).cache_hit


@needs_nvcc
def test_fast_path_compile_error_is_data(build_service):
    sol = load_solution(FAST_EXAMPLE)
    broken = replace_source(sol, "rmsnorm.cu", sol.source("rmsnorm.cu").content.replace("rsqrtf(", "rsqrtf_nope("))
    prepared = run_async(prepare, broken, build_service)
    assert not prepared.ok and prepared.build is not None
    assert "rmsnorm.cu:" in prepared.errors and "error" in prepared.errors
    assert "rsqrtf_nope" in prepared.errors
    assert len(prepared.errors) < 2000


@needs_nvcc
def test_compile_options_cuda_cflags_reach_nvcc(build_service, fast_example_dict):
    guard = '#ifndef FROM_COMPILE_OPTIONS\n#error "cuda_cflags were not passed"\n#endif\n'
    fast_example_dict["sources"][1]["content"] = guard + fast_example_dict["sources"][1]["content"]
    from core.solution import parse_solution

    without = parse_solution(fast_example_dict)
    assert not run_async(prepare, without, build_service).ok
    fast_example_dict["spec"]["compile_options"]["cuda_cflags"].append("-DFROM_COMPILE_OPTIONS=1")
    with_flag = run_async(prepare, parse_solution(fast_example_dict), build_service)
    assert with_flag.ok, with_flag.errors


# ---------------------------------------------------------------- upstream torch extension (cuda_cpp + C++ entry)

# pybind11 alone keeps the CPU build short (~20 s on 2 cores); torch/extension.h would take ~70 s.
SCALE_CPP = r'''
#include <pybind11/pybind11.h>
#ifndef SCALE
#define SCALE 1
#endif
static double run(double x) { return x * SCALE; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run, "scale a number"); }
'''


def scale_solution(content=SCALE_CPP):
    return make_solution({"scale.cpp": content, "tunables.json": '{"space": {"SCALE": [2, 3]}}'},
                         languages=["cuda_cpp"], entry="scale.cpp::run", binding="torch", dps=False)


@pytest.mark.slow
@needs_cpp_toolchain
def test_torch_extension_is_cached_on_disk(tmp_path):
    from core.solution.loader import load_entry, materialize

    cache = tmp_path / CACHE_SUBDIR
    sol = scale_solution()
    first = run_async(prepare, sol, torch_ext_cache_dir=cache)
    assert first.ok, first.errors
    assert not first.cache_hit and first.extension.is_file() and first.extension.is_relative_to(cache)

    started = time.monotonic()
    second = run_async(prepare, sol, torch_ext_cache_dir=cache)
    assert time.monotonic() - started < 1.0
    assert second.ok and second.cache_hit and second.extension == first.extension

    fn = load_entry(materialize(second, tmp_path / "cand"), sol)
    assert fn(1.5) == 3.0  # SCALE=2 arrived as -DSCALE=2
    assert not [p for p in cache.iterdir() if ".tmp-" in p.name]  # the build folder was renamed into place


@needs_cpp_toolchain
def test_torch_extension_compile_error_is_data(tmp_path):
    prepared = run_async(prepare, scale_solution(SCALE_CPP.replace("x * SCALE", "x * NOT_DECLARED")),
                         torch_ext_cache_dir=tmp_path)
    assert not prepared.ok and prepared.extension is None
    assert prepared.errors.startswith("scale.cpp:"), prepared.errors
    assert "NOT_DECLARED" in prepared.errors
    assert not any(tmp_path.iterdir())  # failures are not cached


@needs_cpp_toolchain
def test_torch_extension_timeout_kills_the_build(tmp_path):
    sol = scale_solution(SCALE_CPP + "\n// timeout variant\n")
    started = time.monotonic()
    prepared = run_async(prepare, sol, torch_ext_cache_dir=tmp_path, torch_ext_timeout_s=1.0)
    assert time.monotonic() - started < 15
    assert not prepared.ok and prepared.timed_out
    assert "timed out" in prepared.errors
    assert not any(tmp_path.iterdir())


def test_with_values_changes_the_extension_key():
    from core.solution.torch_ext import extension_key
    from core.solution.tunables import defines

    a = scale_solution()
    b = with_values(a, {"SCALE": 3})
    assert extension_key(a, defines(a)) != extension_key(b, defines(b))
    renamed = dataclasses.replace(a, name="other", author="someone")
    assert extension_key(renamed, defines(renamed)) == extension_key(a, defines(a))
