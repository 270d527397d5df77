import os
import time

import pytest

from core.build.cache import BuildCache, build_key
from core.build.ptxas import KernelResources

BASE = {
    "sources": {"kernel.cu": "__global__ void k() {}", "util.cuh": "#pragma once"},
    "compile": ("kernel.cu",),
    "flags": ("-cubin", "-DBLOCK=128"),
    "arch": "sm_90a",
    "nvcc_version": "release 13.0, V13.0.88",
}


@pytest.mark.parametrize(
    "change",
    [
        {"sources": {**BASE["sources"], "util.cuh": "#pragma once\n"}},
        {"sources": {"kernel.cu": BASE["sources"]["kernel.cu"], "other.cuh": "#pragma once"}},
        {"compile": ("kernel.cu", "util.cuh")},
        {"flags": ("-cubin", "-DBLOCK=256")},
        {"arch": "sm_100a"},
        {"nvcc_version": "release 13.1, V13.1.0"},
    ],
)
def test_every_input_changes_the_key(change):
    assert build_key(**{**BASE, **change}) != build_key(**BASE)


def test_key_ignores_source_order():
    reordered = dict(reversed(list(BASE["sources"].items())))
    assert build_key(**{**BASE, "sources": reordered}) == build_key(**BASE)


def _publish(cache: BuildCache, key: str, cubin_bytes: bytes):
    workspace = cache.new_workspace()
    built = workspace / "out.cubin"
    built.write_bytes(cubin_bytes)
    kernel = KernelResources("k", registers=8, spill_stores=0, spill_loads=0, shared_bytes=512, stack_bytes=0)
    return cache.publish(key, workspace, {"kernels/k.cu": built}, [kernel], "ptxas info : ...")


def test_published_entry_loads_back(tmp_path):
    cache = BuildCache(tmp_path)
    key = "ab" * 32
    assert cache.load(key) is None
    published = _publish(cache, key, b"\x7fELF first")
    loaded = cache.load(key)
    assert loaded == published
    assert loaded.cubins["kernels/k.cu"].read_bytes() == b"\x7fELF first"
    assert loaded.resources[0].shared_bytes == 512
    assert loaded.log == "ptxas info : ..."


def test_second_publisher_of_a_key_keeps_the_first_entry(tmp_path):
    cache = BuildCache(tmp_path)
    key = "cd" * 32
    _publish(cache, key, b"\x7fELF first")
    second = _publish(cache, key, b"\x7fELF second")
    assert second.cubins["kernels/k.cu"].read_bytes() == b"\x7fELF first"


def test_stale_workspaces_are_removed_and_fresh_ones_kept(tmp_path):
    cache = BuildCache(tmp_path)
    stale, fresh = cache.new_workspace(), cache.new_workspace()
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    cache.remove_stale_workspaces()
    assert not stale.exists()
    assert fresh.exists()
