"""Baseline T_b (core.evaluate.baseline), in process on the CPU: eager and torch.compile timing, the fallbacks when
compiling fails, is too slow or computes something else, the on-disk cache and its key; and the pool's
``baseline`` method with a real judge process."""

import json
import shutil
import time
from dataclasses import replace

import pytest
import torch

from core.evaluate import baseline as tb
from core.evaluate.messages import encode
from core.evaluate.timing_policy import TimingPolicy
from core.problem import load_problem

QUICK = TimingPolicy(warmup_calls=1, min_calls=5, max_calls=20, target_seconds=0.005, device_check_calls=3)

REFERENCE = '''import torch

@torch.no_grad()
def run(x, weight, eps):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)
'''


@pytest.fixture
def problem_dir(tmp_path):
    folder = tmp_path / "norm" / "rmsnorm_baseline"
    folder.mkdir(parents=True)
    definition = {
        "name": "rmsnorm_baseline", "description": "RMSNorm (small hidden size for tests).",
        "axes": {"tokens": {"type": "var"}, "hidden": {"type": "const", "value": 256}},
        "custom_inputs_entrypoint": None,
        "inputs": {"x": {"shape": ["tokens", "hidden"], "dtype": "float32"},
                   "weight": {"shape": ["hidden"], "dtype": "float32"},
                   "eps": {"shape": None, "dtype": "float32"}},
        "outputs": {"out": {"shape": ["tokens", "hidden"], "dtype": "float32"}},
        "reference": REFERENCE,
    }
    (folder / "definition.json").write_text(json.dumps(definition))
    inputs = {"x": {"type": "random"}, "weight": {"type": "random"}, "eps": {"type": "scalar", "value": 1e-6}}
    lines = [{"uuid": f"u{i}", "axes": {"tokens": t}, "inputs": inputs,
              "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}} for i, t in enumerate([8, 64])]
    (folder / "workload.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return folder


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(folder))
    return folder


class FakeJudge:
    """What handle_request needs of core.evaluate.worker.Judge: its device and its problem loader."""

    def __init__(self, device="cpu"):
        self.device = torch.device(device)

    def _problem(self, request):
        from core.problem.reference import compile_reference

        problem = load_problem(request.problem_dir)
        return problem, compile_reference(problem.definition)


def refusing_compiler(fn, **options):
    raise RuntimeError("no C++ compiler here\nsecond line")


def slow_compiler(fn, **options):
    def compiled(*args):
        time.sleep(2.0)
        return fn(*args)
    return compiled


def wrong_compiler(fn, **options):
    return lambda *args: fn(*args) * 1.5


def test_eager_only_measurement(problem_dir):
    problem = load_problem(problem_dir)
    result, abandoned = tb.measure_workload(problem, 1, "cpu", QUICK, input_sets=3, try_compile=False)
    assert not abandoned and result.ok and not result.error
    assert result.method == "eager" and result.baseline_ms == result.eager_ms > 0
    assert result.compiled_ms is None and result.compile_reason == "torch.compile not attempted"
    assert not result.compile_attempted
    assert result.uuid == "u1" and result.device_name == "cpu" and result.torch_version == torch.__version__
    assert result.timing_method == "wall clock per call (cpu)" and result.input_sets == 3


def test_compile_failure_falls_back_to_eager_and_is_recorded(problem_dir):
    problem = load_problem(problem_dir)
    result, abandoned = tb.measure_workload(problem, 0, "cpu", QUICK, compile_fn=refusing_compiler)
    assert not abandoned and result.ok
    assert result.method == "eager" and result.baseline_ms == result.eager_ms and result.compiled_ms is None
    assert result.compile_reason == "torch.compile failed: RuntimeError: no C++ compiler here"
    assert result.compile_attempted  # a final answer: the cache keeps it


def test_slow_compile_is_abandoned_and_the_judge_asked_to_restart(problem_dir, cache_dir, monkeypatch):
    problem = load_problem(problem_dir)
    started = time.monotonic()
    result, abandoned = tb.measure_workload(problem, 0, "cpu", QUICK, compile_timeout_s=0.2, compile_fn=slow_compiler)
    assert time.monotonic() - started < 1.9  # did not wait for the compile
    assert abandoned and result.ok and result.method == "eager"
    assert result.compile_reason.startswith("torch.compile did not finish within 0.2 s; abandoned")

    monkeypatch.setattr(tb.measure, "_compile_and_warm",
                        lambda *a, **k: (None, None, None, "torch.compile did not finish within 0.2 s; abandoned", True))
    reply = encode(tb.handle_request(FakeJudge(), tb.request_for(problem, 0, timing=QUICK, compile_timeout_s=0.2)))
    assert reply["status"] == "ok" and reply["restart"] is True


def test_compiled_output_that_differs_from_eager_is_discarded(problem_dir):
    problem = load_problem(problem_dir)
    result, _ = tb.measure_workload(problem, 0, "cpu", QUICK, compile_fn=wrong_compiler)
    assert result.method == "eager" and result.compiled_ms is None
    assert result.compile_reason.startswith("torch.compile output differs from eager: out:")


def test_cache_hit_on_the_second_request(problem_dir, cache_dir):
    problem = load_problem(problem_dir)
    judge = FakeJudge()
    request = tb.request_for(problem, 1, timing=QUICK, compile_timeout_s=0)
    first = tb.from_reply(problem, 1, tb.handle_request(judge, request))
    second = tb.from_reply(problem, 1, tb.handle_request(judge, request))
    assert first.ok and not first.cached
    assert second.cached and second.baseline_ms == first.baseline_ms and second.measured_at == first.measured_at
    files = list((cache_dir / "baseline").glob("*.json"))
    assert len(files) == 1
    stored = json.loads(files[0].read_text())
    assert stored["device_name"] == "cpu" and stored["torch_version"] == torch.__version__
    assert stored["content_sha256"] == tb.problem_content_hash(problem_dir) and set(stored["workloads"]) == {"1"}

    # Another timing policy, or a request that wants torch.compile where the entry skipped it, measures again.
    other_policy = tb.request_for(problem, 1, timing=replace(QUICK, min_calls=6), compile_timeout_s=0)
    assert not tb.from_reply(problem, 1, tb.handle_request(judge, other_policy)).cached
    assert tb.BaselineCache().lookup(tb.baseline_key(problem_dir, "cpu", torch.__version__), 1, QUICK, 5,
                                     want_compile=True) is None
    # use_cache=False always measures.
    fresh = tb.request_for(problem, 1, timing=QUICK, compile_timeout_s=0, use_cache=False)
    assert not tb.from_reply(problem, 1, tb.handle_request(judge, fresh)).cached


def test_a_recorded_compile_failure_is_reused_when_compile_is_wanted(problem_dir, cache_dir):
    problem = load_problem(problem_dir)
    result, _ = tb.measure_workload(problem, 0, "cpu", QUICK, compile_fn=refusing_compiler)
    key = tb.baseline_key(problem_dir, "cpu", torch.__version__)
    cache = tb.BaselineCache()
    cache.store(key, result, {"problem": problem.name})
    found = cache.lookup(key, 0, QUICK, tb.DEFAULT_INPUT_SETS, want_compile=True)
    assert found is not None and found.cached and found.compile_reason.startswith("torch.compile failed")


def test_key_follows_problem_content_gpu_and_torch_version(problem_dir, tmp_path):
    key = tb.baseline_key(problem_dir, "NVIDIA H200", "2.11.0")
    copy = tmp_path / "copy"
    shutil.copytree(problem_dir, copy)
    assert tb.baseline_key(copy, "NVIDIA H200", "2.11.0") == key  # content, not location
    assert tb.baseline_key(problem_dir, "NVIDIA H100 80GB HBM3", "2.11.0") != key
    assert tb.baseline_key(problem_dir, "NVIDIA H200", "2.12.0") != key
    workloads = copy / "workload.jsonl"
    workloads.write_text(workloads.read_text().replace('"tokens": 64', '"tokens": 65'))
    assert tb.baseline_key(copy, "NVIDIA H200", "2.11.0") != key
    definition = problem_dir / "definition.json"
    definition.write_text(definition.read_text().replace("small hidden size", "small hidden"))
    assert tb.baseline_key(problem_dir, "NVIDIA H200", "2.11.0") != key


def test_unreadable_cache_file_is_a_miss(problem_dir, cache_dir):
    problem = load_problem(problem_dir)
    key = tb.baseline_key(problem_dir, "cpu", torch.__version__)
    (cache_dir / "baseline").mkdir(parents=True)
    (cache_dir / "baseline" / f"{key}.json").write_text("{not json")
    assert tb.BaselineCache().lookup(key, 0, QUICK, 5, want_compile=False) is None
    reply = encode(tb.handle_request(FakeJudge(), tb.request_for(problem, 0, timing=QUICK, compile_timeout_s=0)))
    assert reply["status"] == "ok" and reply["baseline"]["baseline_ms"] > 0  # measured and rewritten
    assert tb.BaselineCache().lookup(key, 0, QUICK, 5, want_compile=False) is not None


def test_an_entry_measured_the_older_way_is_not_reused(problem_dir, cache_dir):
    problem = load_problem(problem_dir)
    result, _ = tb.measure_workload(problem, 0, "cpu", QUICK)
    key = tb.baseline_key(problem_dir, "cpu", torch.__version__)
    tb.BaselineCache().store(key, result, {"problem": problem.name})
    assert tb.BaselineCache().lookup(key, 0, QUICK, tb.DEFAULT_INPUT_SETS, want_compile=False) is not None
    path = tb.BaselineCache().path(key)
    path.write_text(path.read_text().replace(f'"format": {tb.FORMAT_VERSION}', f'"format": {tb.FORMAT_VERSION - 1}'))
    assert tb.BaselineCache().lookup(key, 0, QUICK, tb.DEFAULT_INPUT_SETS, want_compile=False) is None


def test_failing_reference_gives_no_baseline_and_is_not_cached(problem_dir, cache_dir):
    definition = problem_dir / "definition.json"
    data = json.loads(definition.read_text())
    data["reference"] = REFERENCE.replace("return (y", "raise ValueError('broken reference')\n    return (y")
    definition.write_text(json.dumps(data))
    problem = load_problem(problem_dir)
    reply = tb.handle_request(FakeJudge(), tb.request_for(problem, 0, timing=QUICK, compile_timeout_s=0))
    result = tb.from_reply(problem, 0, reply)
    assert not result.ok and result.error == "eager reference: ValueError: broken reference"
    assert not list((cache_dir / "baseline").glob("*.json"))


@pytest.mark.slow
def test_real_torch_compile_is_used_or_its_failure_recorded(problem_dir):
    """torch.compile may or may not work on this machine (it needs a C++ compiler on the CPU): either way T_b is
    the faster of what could be measured, and a compile is never counted in the timing."""
    problem = load_problem(problem_dir)
    result, abandoned = tb.measure_workload(problem, 1, "cpu", QUICK, compile_timeout_s=300)
    assert not abandoned and result.ok and result.compile_attempted
    if result.compiled_ms is not None:
        assert result.compile_reason == "" and result.compile_seconds > 0
        assert result.baseline_ms == min(result.eager_ms, result.compiled_ms)
        assert result.method == ("torch.compile" if result.compiled_ms < result.eager_ms else "eager")
    else:
        assert result.compile_reason.startswith("torch.compile") and result.baseline_ms == result.eager_ms


def test_pool_baseline_through_a_real_judge(problem_dir, cache_dir):
    from anyio.from_thread import start_blocking_portal

    from core.evaluate import EvaluationPool

    problem = load_problem(problem_dir)

    async def make_pool():
        # The machine's state left out: a shared CPU's probe moves with other jobs, and what is cached here must
        # not depend on it (tests/evaluate/test_baseline_machine_state.py covers the state).
        return EvaluationPool("cpu", spare=False, workload_timeout_s=60, machine_check=False)

    with start_blocking_portal() as portal:
        pool = portal.call(make_pool)
        try:
            first = portal.call(lambda: pool.baseline(problem, [1, 0], timing=QUICK, compile_timeout_s=0))
            second = portal.call(lambda: pool.baseline(problem, [0], timing=QUICK, compile_timeout_s=0))
        finally:
            pool.close()
    assert [b.index for b in first] == [1, 0] and all(b.ok and not b.cached for b in first)
    assert first[0].uuid == "u1" and first[0].compile_reason == "torch.compile skipped (compile timeout 0)"
    assert second[0].cached and second[0].baseline_ms == first[1].baseline_ms
