"""kernelfleet's own torch-extension build: torch's commands, per-TU object cache, precompiled headers."""

import importlib.util
import time
from pathlib import Path

from solution_helpers import make_solution, needs_cpp_toolchain, run_async

from core.solution.torch_ext import build_extension
from core.solution.torch_ext_commands import parse_ninja, torch_commands
from core.solution.torch_ext_objects import object_key
from core.solution.torch_ext_pch import first_include
from core.solution.tunables import defines

# pybind11 instead of torch/extension.h keeps each compile to seconds on a 2-core machine; the build treats
# both alike (torch's include folders, torch's flags, PCH for the first include).
BINDING_CPP = r'''
#include <pybind11/pybind11.h>
#include "scale.h"
double scaled(double x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &scaled, "x * SCALE * FACTOR"); }
'''
MATH_CPP = r'''
#include "scale.h"
#ifndef SCALE
#define SCALE 1
#endif
double scaled(double x) { return x * SCALE * FACTOR; }
'''
SCALE_H = "#pragma once\n#define FACTOR 10\n"


def two_unit_solution(binding=BINDING_CPP, math=MATH_CPP, header=SCALE_H):
    return make_solution(
        {"binding.cpp": binding, "math.cpp": math, "scale.h": header,
         "tunables.json": '{"space": {"SCALE": [2, 3]}}'},
        languages=["cuda_cpp"], entry="binding.cpp::run", binding="torch", dps=False,
    )


def build(tmp_path, solution):
    return run_async(build_extension, solution, defines(solution), cache_dir=tmp_path / "ext",
                     shared_dir=tmp_path / "shared")


def load(result):
    import torch  # noqa: F401

    spec = importlib.util.spec_from_file_location(result.module_name, result.library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- pieces (no compiler)


def test_first_include_is_the_first_directive_only():
    assert first_include("// c\n/* block\n */\n#include <torch/extension.h>\n#include <x.h>\n") == "torch/extension.h"
    assert first_include("#  include <ATen/ATen.h>  // why\n") == "ATen/ATen.h"
    assert first_include('#include "local.h"\n#include <torch/extension.h>\n') is None
    assert first_include("#define X 1\n#include <torch/extension.h>\n") is None
    assert first_include("int x;\n") is None


def test_parse_ninja_expands_variables_and_maps_sources_to_rules():
    text = (
        "cxx = c++\nnvcc = /cuda/bin/nvcc\n"
        "cflags = -DTORCH_EXTENSION_NAME=m -I/s -isystem '/a b' -std=c++17\npost_cflags = \n"
        "cuda_cflags = -D__CUDA_NO_HALF_OPERATORS__ --compiler-options '-fPIC'\ncuda_post_cflags = \n"
        "ldflags = -shared -L/t -ltorch\n\n"
        "rule compile\n  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags\n  depfile = $out.d\n"
        "rule cuda_compile\n  command = $nvcc $cuda_cflags -c $in -o $out $cuda_post_cflags\n"
        "rule link\n  command = $cxx $in $ldflags -o $out\n"
        "build b.o: compile /s/b.cpp\nbuild k.cuda.o: cuda_compile /s/my$ k.cu\nbuild m.so: link b.o k.cuda.o\n"
    )
    commands = parse_ninja(text)
    assert commands.rule_of == {"/s/b.cpp": "compile", "/s/my k.cu": "cuda_compile", "b.o": "link",
                                "k.cuda.o": "link"}
    assert commands.compile_template("/s/b.cpp") == (
        "c++", "-MMD", "-MF", "$out.d", "-DTORCH_EXTENSION_NAME=m", "-I/s", "-isystem", "/a b",
        "-std=c++17", "-c", "$in", "-o", "$out")
    assert commands.compile_template("/s/my k.cu")[:3] == ("/cuda/bin/nvcc", "-D__CUDA_NO_HALF_OPERATORS__",
                                                            "--compiler-options")
    assert commands.link_argv(["a.o", "b.o"], "m.so") == ["c++", "a.o", "b.o", "-shared", "-L/t", "-ltorch",
                                                          "-o", "m.so"]


def test_commands_are_the_ones_load_writes(tmp_path, monkeypatch):
    """Our request reaches torch's ninja writer exactly as ``cpp_extension.load`` passes it."""
    from torch.utils import cpp_extension as ext

    src = tmp_path / "src"
    src.mkdir()
    (src / "b.cpp").write_text("int x;\n")
    flags = dict(extra_cflags=["-O2", "-DBLOCK=4"], extra_ldflags=["-lm"], extra_include_paths=[str(src)])
    (tmp_path / "load").mkdir()
    monkeypatch.setattr(ext, "_run_ninja_build", lambda *a, **k: None)
    monkeypatch.setattr(ext, "_import_module_from_library", lambda *a, **k: None)
    ext.load(name="kf_ext_same", sources=[str(src / "b.cpp")], build_directory=str(tmp_path / "load"),
             with_cuda=False, **{k: list(v) for k, v in flags.items()})  # load appends to the lists it gets
    (tmp_path / "ours").mkdir()
    ours = torch_commands(name="kf_ext_same", sources=[str(src / "b.cpp")], include_dirs=[str(src)],
                          cflags=flags["extra_cflags"], cuda_cflags=[], ldflags=flags["extra_ldflags"],
                          with_cuda=False, build_dir=tmp_path / "ours")
    assert ours.ninja == (tmp_path / "load" / "build.ninja").read_text()
    template = ours.compile_template(str(src / "b.cpp"))
    assert "-DTORCH_EXTENSION_NAME=kf_ext_same" in template and "-DTORCH_API_INCLUDE_EXTENSION_H" in template
    assert "-fPIC" in template and any(t.startswith("-std=c++") for t in template)
    assert {"-O2", "-DBLOCK=4"} <= set(template)


def test_torch_headers_never_name_the_extension_macro():
    """The object key leaves TORCH_EXTENSION_NAME out for TUs that do not name it: safe only while this holds."""
    import torch

    include = Path(torch.__file__).parent / "include"
    offenders = [p for p in include.rglob("*") if p.is_file() and b"TORCH_EXTENSION_NAME" in p.read_bytes()]
    assert offenders == []


def test_object_key_depends_on_the_module_name_only_where_it_is_named():
    common = dict(headers={"h.h": "#define A 1\n"}, template=("c++", "-DTORCH_EXTENSION_NAME=kf_a", "-I/w/src"),
                  placeholders={"/w/src": "<solution>"}, toolchain="g++ 12")
    a = object_key(source="k.cpp", text="int k;", name="kf_a", **common)
    moved = dict(common, template=("c++", "-DTORCH_EXTENSION_NAME=kf_b", "-I/other/src"),
                 placeholders={"/other/src": "<solution>"})
    assert object_key(source="k.cpp", text="int k;", name="kf_b", **moved) == a
    binding = "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}"
    assert object_key(source="k.cpp", text=binding, name="kf_a", **common) != object_key(
        source="k.cpp", text=binding, name="kf_b", **moved)
    changed_header = dict(common, headers={"h.h": "#define A 2\n"})
    assert object_key(source="k.cpp", text="int k;", name="kf_a", **changed_header) != a


# ---------------------------------------------------------------- builds


@needs_cpp_toolchain
def test_build_imports_and_reuses_an_unchanged_unit_and_a_changed_header_invalidates_both(tmp_path):
    first = build(tmp_path, two_unit_solution())
    assert first.ok, first.errors
    assert sorted(first.compiled) == ["binding.cpp", "math.cpp"] and first.reused == ()
    assert load(first).run(1.5) == 30.0  # SCALE=2 (tunable) * FACTOR=10 (local header)
    objects = sorted((tmp_path / "shared" / "objects").rglob("*.o"))
    assert len(objects) == 2
    mtimes = {p: p.stat().st_mtime_ns for p in objects}

    # Only the binding changes: a new module name, math.cpp's object is linked as it is.
    second = build(tmp_path, two_unit_solution(binding=BINDING_CPP + "// v2\n"))
    assert second.ok, second.errors
    assert second.compiled == ("binding.cpp",) and second.reused == ("math.cpp",)
    assert second.module_name != first.module_name
    assert load(second).run(1.5) == 30.0
    assert all(p.stat().st_mtime_ns == mtimes[p] for p in objects)

    # Only the kernel side changes: the binding (which names TORCH_EXTENSION_NAME, the same in every build) is
    # linked from its cached object.
    third = build(tmp_path, two_unit_solution(math=MATH_CPP.replace("x * SCALE", "x * SCALE * 2")))
    assert third.ok, third.errors
    assert third.compiled == ("math.cpp",) and third.reused == ("binding.cpp",)
    assert load(third).run(1.5) == 60.0
    # The three builds live side by side in one process, each under its own name.
    assert len({first.module_name, second.module_name, third.module_name}) == 3
    assert load(first).run(1.5) == 30.0 and load(third).run(1.5) == 60.0

    again = build(tmp_path, two_unit_solution())  # the whole-build cache by key still answers first
    assert again.cache_hit and again.library == first.library

    # A local header both units include changes: neither cached object is linked.
    changed = build(tmp_path, two_unit_solution(header=SCALE_H.replace("10", "100")))
    assert changed.ok, changed.errors
    assert sorted(changed.compiled) == ["binding.cpp", "math.cpp"] and changed.reused == ()
    assert load(changed).run(1.5) == 300.0


@needs_cpp_toolchain
def test_only_top_level_units_are_compiled_as_upstream_builds_them(tmp_path):
    # math.cpp in a folder, included by a top-level unit: compiled once, through it (on its own too, its symbol
    # would be defined twice and the link fail).
    solution = make_solution(
        {"binding.cpp": BINDING_CPP, "unit.cpp": '#include "members/math.cpp"\n', "members/math.cpp": MATH_CPP,
         "scale.h": SCALE_H},
        languages=["cuda_cpp"], entry="binding.cpp::run", binding="torch", dps=False,
    )
    built = build(tmp_path, solution)
    assert built.ok, built.errors
    assert sorted(built.compiled) == ["binding.cpp", "unit.cpp"]
    assert load(built).run(1.5) == 15.0  # SCALE defaults to 1 without tunables


@needs_cpp_toolchain
def test_precompiled_header_is_used_and_a_broken_one_falls_back(tmp_path):
    first = build(tmp_path, two_unit_solution())  # pybind11/pybind11.h's PCH, built after it by a process of its own
    assert first.ok, first.errors
    assert '"pch": {"binding.cpp": "building"}' in first.log and "being built for the next builds" in first.log
    deadline = time.monotonic() + 120

    def built() -> list[Path]:  # in place, not in the builder's work folder
        return [g for g in (tmp_path / "shared" / "pch").rglob("pybind11.h.gch") if ".tmp-" not in str(g)]

    while not (gchs := built()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(gchs) == 1 and gchs[0].stat().st_size > 1_000_000
    assert not list((tmp_path / "shared" / "pch").glob("*.tmp-*")), "the builder left its work behind"

    used = build(tmp_path, two_unit_solution(binding=BINDING_CPP + "// uses the pch\n"))
    assert used.ok, used.errors
    assert "-Winvalid-pch" in used.log and "[-Winvalid-pch]" not in used.log
    assert '"pch": {"binding.cpp": "used"}' in used.log

    gchs[0].write_bytes(b"not a precompiled header")
    fallback = build(tmp_path, two_unit_solution(binding=BINDING_CPP + "// pch broken\n"))
    assert fallback.ok, fallback.errors
    assert "[-Winvalid-pch]" in fallback.log and '"pch": {"binding.cpp": "rejected"}' in fallback.log
    assert load(fallback).run(1.5) == 30.0


@needs_cpp_toolchain
def test_compile_error_is_data_with_a_summary(tmp_path):
    broken = build(tmp_path, two_unit_solution(math=MATH_CPP.replace("x * SCALE", "x * NOT_DECLARED")))
    assert not broken.ok and broken.library is None
    assert broken.errors.startswith("math.cpp:"), broken.errors
    assert "NOT_DECLARED" in broken.errors
    assert not any((tmp_path / "ext").iterdir())  # the failed build left nothing in the build cache


@needs_cpp_toolchain
def test_cutlass_headers_reach_the_extension_build_or_it_is_refused(tmp_path, monkeypatch):
    """A unit that includes <cutlass/...>: refused in one line where no CUTLASS is found, built against the one in
    $CUTLASS_DIR otherwise (after the solution folder, as upstream orders them)."""
    from core.build import cutlass

    monkeypatch.delenv("CUTLASS_DIR", raising=False)
    monkeypatch.setattr(cutlass, "UPSTREAM_DEFAULT_DIR", str(tmp_path / "none"))
    monkeypatch.setattr(cutlass, "PACKAGE", "kernelfleet_no_such_cutlass_package")
    cutlass._find.cache_clear()
    math = '#include <cutlass/cutlass.h>\n#include "scale.h"\ndouble scaled(double x) { return x * CUTLASS_SEVEN; }\n'
    solution = two_unit_solution(math=math)
    refused = build(tmp_path, solution)
    assert not refused.ok and refused.errors == cutlass.MISSING

    root = tmp_path / "cutlass"
    (root / "include" / "cutlass").mkdir(parents=True)
    (root / "include" / "cutlass" / "cutlass.h").write_text("#pragma once\n#define CUTLASS_SEVEN 7\n")
    monkeypatch.setenv("CUTLASS_DIR", str(root))
    cutlass._find.cache_clear()
    try:
        built = build(tmp_path, solution)
        assert built.ok, built.errors
        assert load(built).run(2.0) == 14.0
    finally:
        cutlass._find.cache_clear()
