"""Building candidates: nvcc to cubins, with a timeout, a content-hash cache and ptxas resource reports."""

from core.build.nvcc import detect_arch
from core.build.ptxas import KernelResources
from core.build.service import BuildRequest, BuildResult, BuildService, build_sync

__all__ = ["BuildRequest", "BuildResult", "BuildService", "KernelResources", "build_sync", "detect_arch"]
