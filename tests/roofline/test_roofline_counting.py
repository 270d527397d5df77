"""Counting a workload's work from its reference: FLOPs by dtype, fewest bytes, methods and failures."""

import json
from pathlib import Path

from core.problem import load_problem
from core.roofline.counting import analytic_io_bytes, count_problem, count_workload
from core.roofline.footprint import footprint, tensor_span

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "problems"


def our_problem(pattern: str):
    matches = sorted(PROBLEMS.glob(pattern))
    assert matches, f"no problem matches {pattern}"
    return load_problem(matches[0])


def write_problem(folder: Path, reference: str, inputs: dict, outputs: dict, axes: dict, workload_axes: dict,
                  input_kinds: dict | None = None, entrypoint: str | None = None):
    folder.mkdir(parents=True)
    definition = {"name": folder.name, "description": "test", "axes": axes, "custom_inputs_entrypoint": entrypoint,
                  "inputs": inputs, "outputs": outputs, "reference": reference}
    kinds = input_kinds or {n: {"type": "custom" if entrypoint else "random"} for n in inputs}
    workload = {"uuid": "w0", "axes": workload_axes, "inputs": kinds}
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text(json.dumps(workload) + "\n")
    return load_problem(folder)


# ---------------------------------------------------------------- realistic problems of our own


def test_bf16_gemm_flops_are_2mnk_at_the_bf16_rate():
    problem = our_problem("gemm/001_*")
    workload = problem.workloads[0]
    axes = workload.resolved_axes
    expected = 2 * axes["M"] * axes["N"] * axes["K"]
    count = count_workload(problem, workload)
    assert count.method == "meta"
    # The reference upcasts to fp32 before the matmul: fp32 operands, bf16 data.
    assert dict(count.matmul_flops) == {"float32": expected}
    assert dict(count.matmul_flops_effective) == {"bfloat16": expected}
    m, n, k = axes["M"], axes["N"], axes["K"]
    assert count.bytes_read == 2 * (m * k + n * k) and count.bytes_written == 2 * m * n


def test_rmsnorm_bytes_are_input_weight_output():
    problem = our_problem("norm/001_*")
    for workload in (problem.workloads[0], problem.workloads[-1]):
        tokens, hidden = workload.resolved_axes["num_tokens"], workload.resolved_axes["hidden_size"]
        count = count_workload(problem, workload)
        assert count.method == "meta"
        assert count.bytes_read == 2 * tokens * hidden + 2 * hidden
        assert count.bytes_written == 2 * tokens * hidden
        assert not count.matmul_flops and count.simt_flops > 0


def test_reference_that_quantises_to_fp8_is_counted_at_fp8():
    problem = our_problem("gemm/003_*")
    count = count_workload(problem, problem.workloads[0])
    assert set(count.matmul_flops_effective) == {"float8_e4m3fn"}
    assert set(count.matmul_flops) == {"float32"}


LOOPED_OVER_LENGTHS = '''import torch

def run(x, w, lens):
    out = torch.zeros(x.shape[0], w.shape[1], dtype=x.dtype, device=x.device)
    # Tensor values read on the host: nothing the meta device can give.
    for b, n in enumerate((lens.abs() % x.shape[1] + 1).tolist()):
        out[b] = (x[b, :n] @ w).sum(0)
    return out
'''


def test_data_dependent_reference_falls_back_to_cpu(tmp_path):
    problem = write_problem(
        tmp_path / "looped", LOOPED_OVER_LENGTHS,
        inputs={"x": {"shape": ["B", "T", "K"], "dtype": "float32"}, "w": {"shape": ["K", "N"], "dtype": "float32"},
                "lens": {"shape": ["B"], "dtype": "int32"}},
        outputs={"y": {"shape": ["B", "N"], "dtype": "float32"}},
        axes={n: {"type": "var"} for n in "BTKN"}, workload_axes={"B": 2, "T": 8, "K": 16, "N": 4})
    count = count_workload(problem, problem.workloads[0])
    assert count.method == "cpu"
    assert any(n.startswith("tried meta") for n in count.notes)
    assert count.matmul_flops_total > 0


def test_every_problem_of_ours_counts(tmp_path):
    for folder in sorted(PROBLEMS.glob("*/0*")):
        problem = load_problem(folder)
        count = count_workload(problem, problem.workloads[0])
        assert count.exact, f"{problem.name}: {count.method}"
        assert count.bytes_read > 0 and count.bytes_written > 0


# ---------------------------------------------------------------- unique storage


def test_tensor_span_of_views():
    import torch

    base = torch.zeros(4, 8, dtype=torch.bfloat16)
    assert tensor_span(base) == (0, 64)
    assert tensor_span(base[0:1].expand(100, 8)) == (0, 16)  # stride 0: the storage row, not 100 rows
    assert tensor_span(base[2]) == (32, 48)
    assert tensor_span(base.t()) == (0, 64)
    assert tensor_span(base[:0]) == (0, 0)


def test_footprint_counts_contiguous_runs_in_32_byte_sectors():
    import torch

    cache = torch.zeros(8, 4096, 128, dtype=torch.bfloat16)
    slot = cache[:, 3]  # 8 rows of 256 contiguous bytes, 1 MiB apart
    fp = footprint(slot)
    assert fp.nbytes == 8 * 256 and fp.end - fp.start > 7 * 4096 * 256 and not fp.dense
    assert footprint(cache).dense and footprint(cache).nbytes == cache.numel() * 2
    column = torch.zeros(64, 64, dtype=torch.float32)[:, 0]
    assert footprint(column).nbytes == 64 * 32  # one 32-byte sector per element
    assert footprint(torch.zeros(1, 16).expand(1000, 16)).nbytes == 64


EXPAND_REFERENCE = '''import torch

def make(axes, device):
    row = torch.randn(1, axes["D"], device=device)
    return {"x": row.expand(axes["N"], axes["D"]), "y": row.expand(axes["N"], axes["D"])}

def run(x, y):
    s = (x + y).sum(dim=0, keepdim=True)
    return s.expand(x.shape[0], x.shape[1])
'''


def test_expanded_and_shared_storage_count_once(tmp_path):
    problem = write_problem(
        tmp_path / "expand", EXPAND_REFERENCE, entrypoint="make",
        inputs={"x": {"shape": ["N", "D"], "dtype": "float32"}, "y": {"shape": ["N", "D"], "dtype": "float32"}},
        outputs={"out": {"shape": ["N", "D"], "dtype": "float32"}},
        axes={"N": {"type": "var"}, "D": {"type": "const", "value": 64}}, workload_axes={"N": 1000})
    count = count_workload(problem, problem.workloads[0])
    assert count.exact, count.method
    assert count.bytes_read == 64 * 4  # two stride-0 views of one 64-float row: the row, once
    assert count.bytes_written == 64 * 4  # the output is a stride-0 expansion of one row
    read, written = analytic_io_bytes(problem, problem.workloads[0])
    assert (read, written) == (2 * 1000 * 64 * 4, 1000 * 64 * 4)


CACHE_REFERENCE = '''import torch

def run(cache, new, slot):
    cache[:, slot] = new
    return cache
'''


def test_in_place_cache_returned_whole_costs_only_what_is_written(tmp_path):
    problem = write_problem(
        tmp_path / "cache", CACHE_REFERENCE,
        inputs={"cache": {"shape": ["B", "S", "D"], "dtype": "bfloat16"},
                "new": {"shape": ["B", "D"], "dtype": "bfloat16"},
                "slot": {"shape": None, "dtype": "int32"}},
        outputs={"cache_out": {"shape": ["B", "S", "D"], "dtype": "bfloat16"}},
        axes={"B": {"type": "var"}, "S": {"type": "const", "value": 4096}, "D": {"type": "const", "value": 128}},
        workload_axes={"B": 8},
        input_kinds={"cache": {"type": "random"}, "new": {"type": "random"}, "slot": {"type": "scalar", "value": 3}})
    count = count_workload(problem, problem.workloads[0])
    assert count.exact, count.method
    assert count.bytes_read == 8 * 128 * 2  # the new rows; the cache is only written
    assert count.bytes_written == 8 * 128 * 2  # one slot per batch entry, not the whole cache


GATHER_REFERENCE = '''import torch

def run(table, ids):
    return torch.nn.functional.embedding(ids, table)
'''


def test_gather_reads_only_the_rows_it_returns(tmp_path):
    problem = write_problem(
        tmp_path / "gather", GATHER_REFERENCE,
        inputs={"table": {"shape": ["V", "D"], "dtype": "bfloat16"}, "ids": {"shape": ["T"], "dtype": "int64"}},
        outputs={"out": {"shape": ["T", "D"], "dtype": "bfloat16"}},
        axes={"V": {"type": "const", "value": 50000}, "D": {"type": "const", "value": 256}, "T": {"type": "var"}},
        workload_axes={"T": 16})
    count = count_workload(problem, problem.workloads[0])
    assert count.bytes_read == 16 * 256 * 2 + 16 * 8  # 16 rows of the table + the ids
    assert count.bytes_written == 16 * 256 * 2


MOE_REFERENCE = '''import torch

def run(x, expert_ids, w):
    expert_ids = expert_ids.remainder(w.shape[0])  # random ints lie in [-1024, 1024), as upstream draws them
    out = torch.zeros(x.shape[0], w.shape[2])
    for e in range(w.shape[0]):
        rows = (expert_ids == e).any(dim=1).nonzero().squeeze(1)  # data-dependent: no meta
        if rows.numel() == 0:
            continue
        out[rows] += x[rows] @ w[e]
    return out
'''


def test_data_dependent_routing_over_lazy_weights(tmp_path):
    """The CPU method keeps indices real and creates the large weights lazily (on meta): the count follows the
    routing the real inputs give, without ever allocating the weights."""
    import torch

    from core.problem.inputs import make_inputs

    problem = write_problem(
        tmp_path / "moe", MOE_REFERENCE,
        inputs={"x": {"shape": ["T", "H"], "dtype": "float32"},
                "expert_ids": {"shape": ["T", "K"], "dtype": "int64", "description": "experts in [0, E)"},
                "w": {"shape": ["E", "H", "N"], "dtype": "float32"}},
        outputs={"out": {"shape": ["T", "N"], "dtype": "float32"}},
        axes={"T": {"type": "var"}, "H": {"type": "const", "value": 64}, "N": {"type": "const", "value": 32},
              "K": {"type": "const", "value": 2}, "E": {"type": "const", "value": 16}},
        workload_axes={"T": 5})
    workload = problem.workloads[0]
    count = count_workload(problem, workload, lazy_above_bytes=4096, fake_matmuls_above=0)
    assert count.method == "cpu", count.method
    assert any(n.startswith("tried meta") for n in count.notes)
    assert "created lazily (meta): w" in count.notes
    ids = make_inputs(problem, workload, "cpu", 0)["expert_ids"] % 16
    rows = {e: int((ids == e).any(dim=1).sum()) for e in range(16)}
    touched = sum(1 for r in rows.values() if r)
    assert dict(count.matmul_flops) == {"float32": 2 * sum(rows.values()) * 64 * 32}
    # Only the experts some token picked are read: their weights, the ids, and the gathered rows of x.
    expected_x = min(5, sum(rows.values())) * 64 * 4
    assert count.bytes_read == touched * 64 * 32 * 4 + ids.numel() * 8 + expected_x
    assert count.bytes_written == 5 * 32 * 4
    assert torch.equal(ids, make_inputs(problem, workload, "cpu", 0)["expert_ids"] % 16)


def test_large_matmuls_are_shaped_not_computed_on_cpu():
    problem = our_problem("attention/003_*")
    exact = count_workload(problem, problem.workloads[0], methods=("cpu",), fake_matmuls_above=None)
    faked = count_workload(problem, problem.workloads[0], methods=("cpu",), fake_matmuls_above=0)
    assert any(n.startswith("not computed") for n in faked.notes)
    assert dict(faked.matmul_flops) == dict(exact.matmul_flops) and faked.bytes_total == exact.bytes_total


# ---------------------------------------------------------------- failures


FAILING_REFERENCE = '''import torch

def run(x):
    raise ValueError("this reference is broken")
'''


def test_failing_reference_gives_a_recorded_failure(tmp_path):
    problem = write_problem(
        tmp_path / "broken", FAILING_REFERENCE, inputs={"x": {"shape": ["N"], "dtype": "float32"}},
        outputs={"y": {"shape": ["N"], "dtype": "float32"}}, axes={"N": {"type": "var"}}, workload_axes={"N": 10})
    count = count_workload(problem, problem.workloads[0])
    assert count.failed and not count.exact
    assert count.method.startswith("failed: ")
    assert "ValueError: this reference is broken" in count.method and "meta" in count.method and "cpu" in count.method
    assert count.bytes_total == 0 and not count.matmul_flops
    # With the analytic fallback: declared input + output bytes, no FLOPs, the reason kept.
    fallback = count_workload(problem, problem.workloads[0], analytic_fallback=True)
    assert fallback.method.startswith("analytic: ") and "this reference is broken" in fallback.method
    assert (fallback.bytes_read, fallback.bytes_written) == (40, 40)
    assert not fallback.failed and not fallback.exact


def test_reference_that_fails_to_load_is_recorded(tmp_path):
    problem = write_problem(
        tmp_path / "noload", "import torch\nraise ImportError('no such kernel library')\n\ndef run(x):\n    return x\n",
        inputs={"x": {"shape": ["N"], "dtype": "float32"}}, outputs={"y": {"shape": ["N"], "dtype": "float32"}},
        axes={"N": {"type": "var"}}, workload_axes={"N": 10})
    [count] = count_problem(problem)
    assert count.method.startswith("failed: reference does not load: ImportError")


def test_unavailable_workload_is_recorded(tmp_path):
    problem = write_problem(
        tmp_path / "blob", "import torch\n\ndef run(x):\n    return x * 2\n",
        inputs={"x": {"shape": ["N"], "dtype": "float32"}}, outputs={"y": {"shape": ["N"], "dtype": "float32"}},
        axes={"N": {"type": "var"}}, workload_axes={"N": 10},
        input_kinds={"x": {"type": "safetensors", "path": "blobs/missing.safetensors", "tensor_key": "x"}})
    count = count_workload(problem, problem.workloads[0])
    assert count.failed and "unavailable" in count.method


def test_cpu_budget_is_respected(tmp_path):
    problem = write_problem(
        tmp_path / "big", "import torch\n\ndef run(x):\n    return x[x > 0].sum()\n",  # data-dependent: no meta
        inputs={"x": {"shape": ["N"], "dtype": "float32"}}, outputs={"y": {"shape": [], "dtype": "float32"}},
        axes={"N": {"type": "var"}}, workload_axes={"N": 1 << 20})
    count = count_workload(problem, problem.workloads[0], cpu_max_input_bytes=1 << 10)
    assert count.failed and "limit" in count.method
    assert count_workload(problem, problem.workloads[0]).method == "cpu"
