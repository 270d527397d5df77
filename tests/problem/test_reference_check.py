"""Running references in a subprocess: pass, shape/dtype mismatch, timeout, memory, device limits."""

from pathlib import Path

from core.problem.reference_check import Outcome, check_in_subprocess, classify_exception


def _with_reference(make_problem, reference: str):
    return make_problem(mutate_definition=lambda d: d.update(reference=reference))


def test_honest_reference_passes_on_smallest_workload(make_problem):
    result = check_in_subprocess(make_problem(), "cpu", seed=0, timeout_s=60, memory_limit_bytes=None)
    assert result.outcome == Outcome.PASSED, result
    assert result.workload == 0  # tokens=4 is the smallest of 4, 128, 16


def test_wrong_output_dtype_and_shape_are_reported(make_problem):
    reference = "import torch\n\ndef run(x, weight, eps):\n    return x.float()[:, :3]\n"
    result = check_in_subprocess(_with_reference(make_problem, reference), "cpu", 0, 60, None)
    assert result.outcome == Outcome.OUTPUT_MISMATCH
    assert "out: shape [4, 3], expected [4, 64]" in result.detail
    assert "out: dtype float32, expected bfloat16" in result.detail


def test_wrong_number_of_outputs(make_problem):
    reference = "import torch\n\ndef run(x, weight, eps):\n    return x, x\n"
    result = check_in_subprocess(_with_reference(make_problem, reference), "cpu", 0, 60, None)
    assert result.outcome == Outcome.OUTPUT_MISMATCH and "returned 2 values" in result.detail


def test_hanging_reference_is_killed_at_timeout(make_problem):
    reference = "import time\n\ndef run(x, weight, eps):\n    time.sleep(600)\n"
    result = check_in_subprocess(_with_reference(make_problem, reference), "cpu", 0, 8, None)
    assert result.outcome == Outcome.TIMEOUT and result.seconds < 20


def test_reference_exceeding_memory_limit(make_problem):
    reference = "import torch\n\ndef run(x, weight, eps):\n    return torch.empty(1 << 40, dtype=torch.uint8)\n"
    result = check_in_subprocess(_with_reference(make_problem, reference), "cpu", 0, 60, 3 << 30)
    assert result.outcome == Outcome.OUT_OF_MEMORY, result


def test_reference_that_raises_names_its_line(make_problem):
    reference = "import torch\n\ndef run(x, weight, eps):\n    y = x\n    raise ValueError('boom')\n"
    result = check_in_subprocess(_with_reference(make_problem, reference), "cpu", 0, 60, None)
    assert result.outcome == Outcome.ERROR
    assert result.detail == "ValueError: boom (reference line 5: raise ValueError('boom'))"


def test_reference_that_kills_its_process(make_problem):
    reference = "import os, signal\n\ndef run(x, weight, eps):\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    result = check_in_subprocess(_with_reference(make_problem, reference), "cpu", 0, 60, None)
    assert result.outcome == Outcome.CRASHED and "SIGSEGV" in result.detail


def test_classification_of_device_failures():
    assert classify_exception("cpu", "RuntimeError", "Torch not compiled with CUDA enabled") == Outcome.NEEDS_CUDA
    assert classify_exception("cpu", "NotImplementedError", "\"_scaled_mm\" not implemented for 'CPU'") \
        == Outcome.UNSUPPORTED_ON_DEVICE
    assert classify_exception("cuda", "OutOfMemoryError", "CUDA out of memory.") == Outcome.OUT_OF_MEMORY
    assert classify_exception("cpu", "ValueError", "bad value") == Outcome.ERROR
    assert classify_exception("cuda", "RuntimeError", "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling") \
        == Outcome.UNSUPPORTED_ON_DEVICE
    assert classify_exception("cpu", "ValueError", "Invalid scaling configuration.",
                              " (reference line 9: y = torch._scaled_mm(a, b, sa, sb))") == Outcome.UNSUPPORTED_ON_DEVICE


def test_native_abort_on_exhausted_memory_counts_as_out_of_memory(make_problem):
    # What OpenBLAS does under a tight address-space limit: print to stderr and exit, no Python exception.
    reference = ("import os, sys\n\ndef run(x, weight, eps):\n"
                 "    sys.stderr.write('OpenBLAS error: Memory allocation still failed after 10 retries\\n')\n"
                 "    sys.stderr.flush()\n    os._exit(1)\n")
    result = check_in_subprocess(_with_reference(make_problem, reference), "cpu", 0, 60, None)
    assert result.outcome == Outcome.OUT_OF_MEMORY and "exit status 1" in result.detail
