"""The typed messages between the pool and its workers (core.evaluate.messages): every kind survives the codec,
and what is not one of them is refused."""

import json

import pytest

from core.evaluate import messages as m
from core.evaluate.messages import MessageError, decode_answer, decode_request, encode

REQUESTS = [
    m.Exit(),
    m.Load("/p", {"name": "s"}, "/sol", ["/blobs"]),
    m.Run(2, [7, 8], "/x", ["cache"], keep_inputs=True),
    m.Time(2, {"warmup_calls": 1, "flush_bytes": None}),
    m.Spot(2, "/x", 123456789012),
    m.Reference("/p", 1, [7], ["/b"], keep_workload=0),
    m.Check("/p", 1, {"7": "/x/w1_s7.out"}, [], [[7, "/x/t.out"]], sample_seed=5),
    *[kind(problem_dir="/p", workload=3, timing={"min_calls": 5}, input_sets=3, compile=False,
           compile_timeout_s=0.0, compile_skip_reason="skipped", compile_attempted=True, use_cache=False,
           forget=True, machine_now={"probe_ms": 1.0})
      for kind in (m.Baseline, m.BaselineLookup, m.BaselineForget, m.BaselineInputs, m.BaselinePrepare)],
    m.BaselineTime(),
    m.MachineProbe(),
]


def test_every_request_kind_is_covered():
    assert {type(r) for r in REQUESTS} == set(m.REQUESTS.values())


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_a_request_survives_the_pipe(request_):
    assert decode_request(json.loads(json.dumps(encode(request_)))) == request_


ANSWERS = [
    (m.Load, m.Done()),
    (m.Run, m.Ran({"7": "/x/w1_s7.out"}, {"rounds": 0.5})),
    (m.Time, m.Timed({"median_ms": 1.0, "spread": 0.1, "calls": 10, "method": "wall clock per call (cpu)"},
                     {"timing": 0.2})),
    (m.Spot, m.Spotted([[7, "/x/t.out"]], {"spot": 0.1})),
    (m.Reference, m.ReferenceMade(["cache"])),
    (m.Check, m.Checked({"max_abs_error": 0.0}, {"load": 0.1})),
    (m.Check, m.Failed("INCORRECT_NUMERICAL", "off by one", errors={"max_abs_error": 1.0})),
    (m.Load, m.Failed("RUNTIME_ERROR", "could not load the solution: ImportError", code="load_failed")),
    (m.Run, m.Failed("RUNTIME_ERROR", "illegal memory access", fatal=True)),
    (m.Baseline, m.BaselineMeasured({"index": 0, "baseline_ms": 1.0})),
    (m.Baseline, m.BaselineMeasured({"index": 0}, restart=True)),
    (m.BaselineLookup, m.BaselineMiss()),
    (m.BaselineForget, m.Done()),
    (m.BaselineInputs, m.BaselineReady()),
    (m.BaselinePrepare, m.BaselineReady()),
    (m.BaselinePrepare, m.BaselineAbandoned("torch.compile abandoned after 120 s")),
    (m.BaselinePrepare, m.BaselineMeasured({"index": 0})),
    (m.BaselineTime, m.BaselineMeasured({"index": 0})),
    (m.BaselineTime, m.Failed("error", "no prepared baseline to time")),
    (m.MachineProbe, m.MachineProbed({"probe_ms": 2.0})),
]


@pytest.mark.parametrize("kind,answer", ANSWERS, ids=lambda x: getattr(x, "__name__", type(x).__name__))
def test_an_answer_survives_the_pipe(kind, answer):
    assert decode_answer(json.loads(json.dumps(encode(answer))), kind) == answer


def test_the_ready_signal_round_trips():
    assert m.decode_ready(m.encode_ready(m.Ready(42))) == m.Ready(42)
    with pytest.raises(MessageError):
        m.decode_ready({"status": "ok"})


@pytest.mark.parametrize("data,why", [
    ({"op": "format_disk"}, "unknown request kind"),
    ({"workload": 1}, "unknown request kind"),
    ([{"op": "exit"}], "must be an object"),
    ({"op": "run", "workload": 1, "seeds": [1]}, "missing field 'exchange_dir'"),
    ({"op": "run", "workload": "1", "seeds": [1], "exchange_dir": "/x"}, "field 'workload'"),
    ({"op": "run", "workload": True, "seeds": [1], "exchange_dir": "/x"}, "field 'workload'"),
    ({"op": "run", "workload": 1, "seeds": [1, "2"], "exchange_dir": "/x"}, "field 'seeds'"),
    ({"op": "exit", "now": True}, "unknown field"),
])
def test_a_malformed_or_unknown_request_is_refused(data, why):
    with pytest.raises(MessageError, match=why):
        decode_request(data)


@pytest.mark.parametrize("data", [None, "PASSED", [1], {"errors": {}}, {"status": 1}])
def test_an_answer_that_is_none_is_refused(data):
    with pytest.raises(MessageError):
        decode_answer(data, m.Check)


def test_a_hostile_answer_reads_its_wrongly_typed_fields_as_absent():
    ran = decode_answer({"status": "ok", "files": ["not", "a", "map"], "phase_s": {"rounds": "1e9"}}, m.Run)
    assert ran == m.Ran()
    failed = decode_answer({"status": "TIMEOUT", "reason": ["x"], "fatal": "yes", "code": 3}, m.Time)
    assert failed == m.Failed("TIMEOUT")
    # A success of another request's kind is a failure of this one, not a trusted answer.
    assert isinstance(decode_answer({"status": "PASSED"}, m.Run), m.Failed)


def test_baseline_kinds_keep_their_fields():
    lookup = m.as_kind(REQUESTS[7], m.BaselineLookup)
    assert isinstance(lookup, m.BaselineLookup) and lookup.machine_now == {"probe_ms": 1.0}
    assert encode(lookup)["op"] == "baseline_lookup"
