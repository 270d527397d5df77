"""What an agent is told about the machine and the run: the GPU (or the CPU), its peak rates, the build target,
the tool versions, the languages the run allows, and (added per turn by the Workbench) the planner's directives.

The GPU's properties come from a short child process (``torch.cuda.get_device_properties``) and from nvidia-smi,
so the orchestrator never creates a CUDA context; every field may be unknown (None). Building the facts from what
was probed (``facts_from_probe``) and rendering them (``render_facts``) are pure.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from core.fleet.directives import Directive
from core.languages import UnknownLanguage, language, languages
from core.secrets import without_secrets

PROBE_TIMEOUT_S = 60.0


def language_packages() -> tuple[str, ...]:
    """The distributions the languages kernelfleet runs need, whose versions the facts report."""
    return tuple(dict.fromkeys(p for entry in languages(runs=True) for p in entry.packages))


PACKAGES = language_packages()  # the built-in languages'; gather_facts asks again for later registrations

# Run in a child process: the device properties as JSON (getattr, since torch versions differ in what they have).
_PROBE = """\
import json, sys
import torch
p = torch.cuda.get_device_properties(int(sys.argv[1]))
names = ("name", "major", "minor", "total_memory", "multi_processor_count", "L2_cache_size",
         "shared_memory_per_multiprocessor", "shared_memory_per_block", "shared_memory_per_block_optin",
         "regs_per_multiprocessor", "max_threads_per_multi_processor", "warp_size")
print(json.dumps({"properties": {n: getattr(p, n, None) for n in names}, "cuda_runtime": torch.version.cuda}))
"""
_SMI_FIELDS = ("clocks.max.sm", "clocks.max.memory", "memory.total", "driver_version")


@dataclass(frozen=True)
class RunFacts:
    device: str  # "cuda" or "cpu"
    languages: tuple[str, ...]  # the languages this run allows ([fleet] languages)
    gpu_name: str | None = None
    sm_count: int | None = None
    sm_clock_mhz: int | None = None  # the SM's maximum clock
    memory_clock_mhz: int | None = None
    memory_bytes: int | None = None
    memory_bandwidth_bytes_s: float | None = None  # the peak of the roofline spec
    l2_bytes: int | None = None
    shared_memory_per_sm: int | None = None
    shared_memory_per_block: int | None = None  # without opting in
    shared_memory_per_block_optin: int | None = None
    registers_per_sm: int | None = None
    max_threads_per_sm: int | None = None
    compute_capability: str | None = None
    # FLOP/s by what they price: the tensor-core rate per dtype, then "fp32 simt" and "fp64 simt"
    peak_rates: tuple[tuple[str, float], ...] = ()
    spec_name: str | None = None  # the roofline spec in use
    spec_source: str | None = None  # "datasheet" or "measured"
    arch: str | None = None  # the nvcc target, e.g. sm_90a
    arch_flags: tuple[str, ...] = ()
    cuda_driver: str | None = None
    cuda_runtime: str | None = None  # the CUDA version torch was built with
    nvcc: str | None = None
    packages: tuple[tuple[str, str | None], ...] = ()  # (distribution, version or None when not installed)
    cpu_model: str | None = None
    cpu_cores: int | None = None
    # The planner model's directives to the agent reading these facts, or to its problem, since its previous turn
    # (``core.fleet.directives``): the Workbench adds them; the machine's facts have none.
    directives: tuple[Directive, ...] = ()


def language_refusal(language: str, allowed: Sequence[str]) -> str | None:
    """Why a candidate in ``language`` is refused in a run allowing ``allowed``; None when it is allowed."""
    if language in allowed:
        return None
    return f"language {language!r} is not allowed in this run; allowed: {', '.join(allowed)}"


def facts_from_probe(device: str, languages: Sequence[str], *, properties: Mapping[str, Any] | None = None,
                     smi: Mapping[str, str] | None = None, spec=None, gpu_name: str = "", arch: str | None = None,
                     arch_flags: Sequence[str] = (), cuda_runtime: str | None = None, nvcc: str | None = None,
                     packages: Sequence[tuple[str, str | None]] = (), cpu_model: str | None = None,
                     cpu_cores: int | None = None) -> RunFacts:
    """RunFacts from what was probed: ``properties`` (torch's device properties as a dict), ``smi`` (nvidia-smi's
    fields by name), ``spec`` (the roofline GpuSpec in use, or None). Missing values stay None."""
    common = dict(device=device, languages=tuple(languages), nvcc=nvcc, packages=tuple(packages),
                  cpu_model=cpu_model, cpu_cores=cpu_cores)
    if device != "cuda":
        return RunFacts(**common)
    props = dict(properties or {})
    smi = dict(smi or {})
    memory_mib = _number(smi.get("memory.total"))
    memory = _int(props.get("total_memory")) or (int(memory_mib) << 20 if memory_mib else None) or \
        (spec.memory_bytes if spec is not None and spec.memory_bytes else None)
    major, minor = props.get("major"), props.get("minor")
    rates: list[tuple[str, float]] = []
    if spec is not None:
        rates = sorted(((dtype, rate) for dtype, rate in spec.tensor_flops.items() if rate), key=lambda r: -r[1])
        rates.append(("fp32 simt", spec.fp32_simt_flops))
        if spec.fp64_simt_flops:
            rates.append(("fp64 simt", spec.fp64_simt_flops))
    return RunFacts(
        **common, gpu_name=props.get("name") or gpu_name or None,
        sm_count=_int(props.get("multi_processor_count")) or (spec.sm_count if spec is not None else None),
        sm_clock_mhz=_int(_number(smi.get("clocks.max.sm"))),
        memory_clock_mhz=_int(_number(smi.get("clocks.max.memory"))), memory_bytes=memory,
        memory_bandwidth_bytes_s=spec.memory_bandwidth_bytes_s if spec is not None else None,
        l2_bytes=_int(props.get("L2_cache_size")) or (spec.l2_bytes if spec is not None else None),
        shared_memory_per_sm=_int(props.get("shared_memory_per_multiprocessor")),
        shared_memory_per_block=_int(props.get("shared_memory_per_block")),
        shared_memory_per_block_optin=_int(props.get("shared_memory_per_block_optin")),
        registers_per_sm=_int(props.get("regs_per_multiprocessor")),
        max_threads_per_sm=_int(props.get("max_threads_per_multi_processor")),
        compute_capability=f"{major}.{minor}" if major is not None and minor is not None else None,
        peak_rates=tuple(rates), spec_name=spec.name if spec is not None else None,
        spec_source=spec.source if spec is not None else None, arch=arch, arch_flags=tuple(arch_flags),
        cuda_driver=smi.get("driver_version") or None, cuda_runtime=cuda_runtime)


def _number(text: Any) -> float | None:
    try:
        return float(str(text).strip())
    except (TypeError, ValueError):  # "[N/A]", "", None
        return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


# ---------------------------------------------------------------- gathering (blocking: call off the event loop)


def gather_facts(device: str, languages: Sequence[str], gpu: int | None = None, gpu_name: str = "") -> RunFacts:
    """Probe the machine: the GPU ``gpu`` (the run's first) when ``device`` is "cuda", else the CPU."""
    common = dict(packages=tuple((name, _version(name)) for name in language_packages()), cpu_model=cpu_model(),
                  cpu_cores=os.cpu_count())
    if device != "cuda":
        return facts_from_probe(device, languages, **common)
    probed = probe_properties(gpu or 0)
    properties = probed.get("properties") if isinstance(probed.get("properties"), dict) else None
    name = (properties or {}).get("name") or gpu_name
    return facts_from_probe(device, languages, properties=properties, smi=query_smi(gpu or 0),
                            spec=roofline_spec(name), gpu_name=name, cuda_runtime=probed.get("cuda_runtime"),
                            nvcc=_nvcc(), **_arch(), **common)


def probe_properties(gpu: int, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """torch's properties of CUDA device ``gpu``, asked of a child process (no secret in its environment); {} when
    it fails."""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, str(gpu)], capture_output=True, text=True,
                              timeout=timeout_s, env=without_secrets(os.environ))
    except (OSError, subprocess.TimeoutExpired):
        return {}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {}
    try:
        value = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def query_smi(gpu: int) -> dict[str, str]:
    """nvidia-smi's maximum clocks (MHz), memory (MiB) and driver version of GPU ``gpu``; {} without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        done = subprocess.run([smi, f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits",
                               f"--id={gpu}"], capture_output=True, text=True, timeout=30,
                              env=without_secrets(os.environ))
    except (OSError, subprocess.TimeoutExpired):
        return {}
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        return {}
    return parse_smi_line(lines[0])


def parse_smi_line(line: str) -> dict[str, str]:
    """One csv line of the query, by field name; "[N/A]" and empty values left out."""
    values = [v.strip() for v in line.split(",")]
    return {k: v for k, v in zip(_SMI_FIELDS, values) if v and not v.startswith("[")}


def roofline_spec(gpu_name: str):
    """The spec T_sol is priced with (as ``core.roofline.problem_sol.speed_of_light`` picks it), or None."""
    if not gpu_name:
        return None
    from core.roofline.specs import UnknownGpu, lookup_spec

    try:
        return lookup_spec(gpu_name)
    except UnknownGpu:
        pass
    from core.roofline.ceilings import load_cached, spec_from_ceilings

    cached = load_cached(gpu_name)
    return spec_from_ceilings(cached) if cached is not None else None


def _arch() -> dict[str, Any]:
    from core.build.nvcc import detect_arch, gencode_flags

    try:
        arch = detect_arch()
        return {"arch": arch, "arch_flags": gencode_flags(arch)}
    except ValueError:
        return {}


def _nvcc() -> str | None:
    from core.build.nvcc import find_nvcc, nvcc_version

    nvcc = find_nvcc()
    if nvcc is None:
        return None
    try:
        return nvcc_version(nvcc)
    except (OSError, subprocess.SubprocessError):
        return None


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


# ---------------------------------------------------------------- the brief's section


def render_facts(facts: RunFacts) -> str:
    """The "## Machine and run" section of the brief; a value not known reads "unknown"."""
    lines = ["## Machine and run"]
    cpu = f"{facts.cpu_model or 'unknown'}, {_or_unknown(facts.cpu_cores)} cores"
    if facts.device != "cuda":
        lines.append(f"- device: the CPU ({cpu}); no GPU in this run: candidates run on the CPU")
    else:
        lines.append(f"- GPU: {facts.gpu_name or 'unknown'}, compute capability "
                     f"{_or_unknown(facts.compute_capability)}, {_or_unknown(facts.sm_count)} SMs, SM clock up to "
                     f"{_mhz(facts.sm_clock_mhz)}, memory clock up to {_mhz(facts.memory_clock_mhz)}")
        lines.append(f"- memory: {_bytes(facts.memory_bytes)}, peak bandwidth "
                     f"{_rate(facts.memory_bandwidth_bytes_s, 'B/s')}; L2 {_bytes(facts.l2_bytes)}")
        lines.append(f"- per SM: shared memory {_bytes(facts.shared_memory_per_sm)}, registers "
                     f"{_or_unknown(facts.registers_per_sm)}, threads at most {_or_unknown(facts.max_threads_per_sm)}; "
                     f"shared memory per block {_bytes(facts.shared_memory_per_block)} "
                     f"({_bytes(facts.shared_memory_per_block_optin)} when opted in)")
        if facts.peak_rates:
            source = "datasheet" if facts.spec_source == "datasheet" else f"{facts.spec_source or 'unknown'} ceilings"
            tensor = ", ".join(f"{what} {rate / 1e12:.4g}" for what, rate in facts.peak_rates if " simt" not in what)
            simt = ", ".join(f"{what.split()[0]} {rate / 1e12:.4g}" for what, rate in facts.peak_rates
                             if " simt" in what)
            lines.append(f"- peak rates in TFLOP/s ({source} of {facts.spec_name}, dense; T_sol is priced at them): "
                         f"tensor cores {tensor or 'none'}; CUDA cores {simt or 'unknown'}")
        else:
            lines.append("- peak rates: unknown (no roofline spec for this GPU)")
        flags = f" ({' '.join(facts.arch_flags)})" if facts.arch_flags else ""
        lines.append(f"- build target: {_or_unknown(facts.arch)}{flags}")
        lines.append(f"- host CPU: {cpu}")
    versions = [f"CUDA driver {_or_unknown(facts.cuda_driver)}",
                f"CUDA runtime (torch) {_or_unknown(facts.cuda_runtime)}",
                f"nvcc {_or_unknown(facts.nvcc)}"] if facts.device == "cuda" else []
    versions += [f"{name} {version or 'not installed'}" for name, version in facts.packages]
    lines.append("- versions: " + ("; ".join(versions) or "unknown"))
    lines.append("- the languages, in short: " + "; ".join(_described(name) for name in facts.languages))
    lines.append(f"- languages this run allows: {', '.join(facts.languages)}")
    return "\n".join(lines)


def _described(name: str) -> str:
    try:
        return f"{name}: {language(name).description}"
    except UnknownLanguage:
        return name


def _or_unknown(value: Any) -> str:
    return "unknown" if value is None else str(value)


def _mhz(value: int | None) -> str:
    return "unknown" if value is None else f"{value} MHz"


def _bytes(value: int | None) -> str:
    if value is None:
        return "unknown"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.4g} {unit}"
    return f"{value} B"


def _rate(value: float | None, unit: str) -> str:
    if value is None:
        return "unknown"
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9)):
        if value >= size:
            return f"{value / size:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"
