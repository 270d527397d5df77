import os
import stat

import pytest

from core.build.nvcc import (
    ARCH_ENV,
    arch_for_capability,
    compile_flags,
    define_flags,
    detect_arch,
    find_nvcc,
    gencode_flags,
    gpu_arch,
    nvcc_version,
)


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    """Puts an nvidia-smi that reports the given capability first on PATH; forgets the cached GPU query."""

    def install(capability: str) -> None:
        script = tmp_path / "nvidia-smi"
        script.write_text(f"#!/bin/sh\necho '{capability}'\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        gpu_arch.cache_clear()

    monkeypatch.delenv(ARCH_ENV, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield install
    gpu_arch.cache_clear()


@pytest.mark.parametrize(
    ("capability", "arch"),
    [("9.0", "sm_90a"), ("10.0", "sm_100a"), ("8.6", "sm_86"), ("12.0", "sm_120"), (" 8.0\n", "sm_80"), ("n/a", None)],
)
def test_capability_maps_to_arch(capability, arch):
    assert arch_for_capability(capability) == arch


def test_arch_comes_from_the_gpu(fake_nvidia_smi):
    fake_nvidia_smi("10.0")
    assert detect_arch() == "sm_100a"


def test_env_overrides_the_gpu_and_an_argument_overrides_both(fake_nvidia_smi, monkeypatch):
    fake_nvidia_smi("10.0")
    monkeypatch.setenv(ARCH_ENV, "sm_89")
    assert detect_arch() == "sm_89"
    assert detect_arch("sm_80") == "sm_80"


def test_without_gpu_or_override_the_default_is_our_h200(tmp_path, monkeypatch):
    monkeypatch.delenv(ARCH_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    gpu_arch.cache_clear()
    try:
        assert detect_arch() == "sm_90a"
    finally:
        gpu_arch.cache_clear()


def test_invalid_arch_is_refused():
    with pytest.raises(ValueError, match="compute_90"):
        detect_arch("compute_90")


def test_gencode_flags():
    assert gencode_flags("sm_90a") == ("-gencode=arch=compute_90a,code=sm_90a",)
    assert gencode_flags("sm_100f") == ("-gencode=arch=compute_100f,code=sm_100f",)


def test_define_flags_are_sorted_and_c_friendly():
    assert define_flags({"WARPS": 4, "BLOCK": 128, "USE_TMA": True, "SCALE": 0.5}) == (
        "-DBLOCK=128",
        "-DSCALE=0.5",
        "-DUSE_TMA=1",
        "-DWARPS=4",
    )
    with pytest.raises(ValueError, match="not a C identifier"):
        define_flags({"BLOCK -o x": 1})


def test_compile_flags_hold_the_fixed_flags_then_target_defines_and_extras():
    flags = compile_flags("sm_90a", {"BLOCK": 64}, ("-maxrregcount=64",))
    assert flags[:7] == ("-cubin", "-O3", "--use_fast_math", "-std=c++17", "-lineinfo", "-Xptxas", "-v")
    assert flags[7:] == ("-gencode=arch=compute_90a,code=sm_90a", "-DBLOCK=64", "-maxrregcount=64")


def test_cuda_home_is_searched(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvcc"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert find_nvcc() == fake


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_nvcc_version_names_the_release():
    assert "release" in nvcc_version(find_nvcc())
