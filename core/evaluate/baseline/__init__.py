"""The baseline time T_b of a workload: the faster of the eager reference and ``torch.compile`` of it.

Measured in the judge process (trusted code only, never the candidate's process), timed exactly as candidates are
(``core.evaluate.timing``: warm-up, rotated seeded input sets staged into buffers, L2 flushed on CUDA, medians),
checked for sanity (``sanity``: a figure that fails is measured again, then marked unreliable and never cached), and
cached on disk, because it depends only on the problem, the GPU model and the torch version:

    cache_root()/"baseline"/<key>.json     key = sha256(definition.json + workload.jsonl, GPU name, torch version)

One file per key holds one entry per workload (by index in workload.jsonl order). An entry is reused only when it
was measured with the same timing policy and number of input sets, and with torch.compile attempted whenever the
request wants it; an entry whose compile *failed* is reused (the failure is the measured result, recorded in
``compile_reason``).

torch.compile specifics:

- The reference is compiled from its own copy of the reference module, registered in ``sys.modules`` (dynamo
  imports a function's module by name while tracing; an unregistered module makes every compile fail).
- ``dynamic=False`` and ``torch._dynamo.reset()`` before each workload: each workload gets a kernel specialised to
  its shapes, as a tuned baseline would, and no recompile limit is ever reached across many workloads.
- The compile happens during a warm-up call run in a helper thread, outside any timing. If it has not finished
  within ``compile_timeout_s`` it is abandoned: T_b is the eager time, the reason is recorded, and the reply asks
  the pool to replace the judge (the compiling thread cannot be stopped and must not disturb later timings).
- A compiled result that does not match the eager one (within the workload's tolerance) is discarded.
- ``compile_timeout_s`` bounds a problem's compiles in all (``budget``): once spent, later workloads are eager only.

The modules: ``record`` (WorkloadBaseline), ``cache`` (key and files), ``measure`` (the judge's measuring),
``judge`` (the judge's ops and the pool's requests), ``budget`` (a problem's compile time), ``sanity`` (what is
trusted).
"""

from core.evaluate.baseline.budget import CompileBudget
from core.evaluate.baseline.cache import FORMAT_VERSION, BaselineCache, baseline_key, problem_content_hash
from core.evaluate.baseline.judge import from_reply, handle_request, reply_timeout_s, request_for
from core.evaluate.baseline.measure import (COMPILE_THREAD_NAME, SEED_BASE, FatalDeviceError, PreparedBaseline,
                                            WorkloadInputs, device_name, make_workload_inputs, measure_workload,
                                            prepare_workload, time_prepared)
from core.evaluate.baseline.record import (DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_INPUT_SETS, METHOD_COMPILED,
                                           METHOD_EAGER, WorkloadBaseline, failed)

__all__ = [
    "BaselineCache", "COMPILE_THREAD_NAME", "CompileBudget", "DEFAULT_COMPILE_TIMEOUT_S", "DEFAULT_INPUT_SETS", "FORMAT_VERSION",
    "FatalDeviceError", "METHOD_COMPILED", "METHOD_EAGER", "PreparedBaseline", "SEED_BASE", "WorkloadBaseline",
    "WorkloadInputs", "baseline_key", "device_name", "failed", "from_reply", "handle_request", "make_workload_inputs",
    "measure_workload", "prepare_workload", "problem_content_hash", "reply_timeout_s", "request_for",
    "time_prepared",
]
