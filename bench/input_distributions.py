"""Our random inputs against SOL-ExecBench's, for every random input of a benchmark: one markdown table, a row
per upstream rule (the distribution upstream's ``gen_inputs`` gives the input), and the count that differ.

    python bench/input_distributions.py [BENCHMARK] [--all-workloads] [--cap N] [--ours PATH] [--details]

BENCHMARK defaults to $KERNELFLEET_SOL_EXECBENCH/benchmark (../shared/sol-execbench). Upstream's generator is
imported from the upstream/src folder beside it (it needs torch and pydantic). --ours PATH compares the
``make_inputs`` of another copy of core/problem/inputs.py instead of ours, e.g. an earlier one:
``git show HEAD~1:core/problem/inputs.py > /tmp/old.py``.

Each input is generated once by each side, from independent seeds, on the CPU. A tensor over --cap elements is
generated at a stand-in shape: the axes the rule reads are kept (the last for weight matrices, softmax, cumsums
and fp4 packing; the last two for causal masks) and the leading ones shrunk. Statistics come from at most --cap
elements, the two-sample Kolmogorov-Smirnov statistic from 20000 of each; the table's largest differences of
statistics (in units of upstream's standard deviation) are over inputs of at least 10000 elements, where sampling
noise is small. An input matches when its shape and dtype are upstream's and either upstream's rule is
deterministic (two seeds give the same tensor) and ours is that tensor, or the KS statistic is below the
alpha = 1e-6 critical value for the sample sizes. Exit status 1 when any input differs, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from core.problem import input_rules  # noqa: E402
from core.problem.load import load_problems  # noqa: E402
from core.problem.schema import (  # noqa: E402
    Definition, InputKind, InputSource, Problem, TensorSpec, Tolerance, Workload,
)

SOL_EXECBENCH = Path(os.environ.get("KERNELFLEET_SOL_EXECBENCH", ROOT.parent / "shared" / "sol-execbench"))
KS_SAMPLE = 20000
DELTA_MIN_ELEMENTS = 10000  # the table's largest differences of statistics are over inputs at least this large
KS_C_ALPHA = math.sqrt(-0.5 * math.log(1e-6 / 2))  # two-sample KS critical coefficient, alpha = 1e-6
# The axes (counted from the last) that a rule's values depend on; a stand-in shape keeps them.
TRAILING_AXES_READ = {"weight_matrix": 1, "softmax_output": 1, "ssm_A_cumsum": 1, "causal_mask": 2, "fp4": 1}
LOW_PRECISION = {"float8_e4m3fn", "float8_e5m2", "float4_e2m1fn_x2"}


def import_upstream():
    src = SOL_EXECBENCH / "upstream" / "src"
    if not (src / "sol_execbench").is_dir():
        return None
    sys.path.insert(0, str(src))
    try:
        from sol_execbench.core.bench import io
        from sol_execbench.core.data import Definition as UpstreamDefinition, Workload as UpstreamWorkload
    except ImportError as exc:  # upstream needs pydantic
        print(f"error: cannot import upstream SOL-ExecBench from {src}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

    return io, UpstreamDefinition, UpstreamWorkload


def upstream_rule_name(io, name: str, shape: tuple[int, ...] | None, dtype: str, description: str,
                       op_type: str | None) -> str:
    """The rule upstream's gen_inputs applies, found with upstream's own predicates in upstream's order."""
    default = {"float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float4_e2m1fn_x2": "fp4", "bool": "bool",
               "int8": "int8", "int16": "int", "int32": "int", "int64": "int", "uint8": "uint8"}.get(dtype, "normal")
    if shape is None:
        return default
    rule = None
    if dtype not in LOW_PRECISION and io.dtype_str_to_torch_dtype(dtype).is_floating_point:
        checks = [
            ("norm_weight", lambda: io._is_norm_weight(name)),
            ("norm_bias", lambda: io._is_norm_bias(name)),
            ("causal_mask", lambda: io._is_causal_attention_mask(name, shape, description)),
            ("binary_mask", lambda: io._is_binary_mask(name, description)),
            ("rope_cos" if "cos" in name else "rope_sin", lambda: io._is_rope_cos_sin(name)),
            ("positive", lambda: io._is_positive_tensor(name, description)),
            (f"ssm_{name}", lambda: io._is_ssm_decay(name)),
            ("softmax_output", lambda: io._is_softmax_output(name, description)),
            ("weight_matrix", lambda: io._is_weight_matrix(name, shape)),
        ]
        rule = next((label for label, matches in checks if matches()), None)
    rule = rule or default
    if op_type == "sampling" and name == "probs":
        rule = f"sampling_probs({rule})"
    return rule


@dataclass
class Case:
    problem: str
    name: str
    dtype: str
    shape: tuple[int, ...] | None
    description: str
    op_type: str | None
    upstream_rule: str
    our_rule: str
    stand_in: tuple[int, ...] | None = None
    result: dict = field(default_factory=dict)


def stand_in_shape(shape: tuple[int, ...], kept_trailing: int, cap: int) -> tuple[int, ...]:
    """``shape`` with its leading axes shrunk until it holds at most ``cap`` elements (the last
    ``kept_trailing`` axes are never shrunk)."""
    out = list(shape)
    size = math.prod(shape)
    for axis in range(len(shape) - kept_trailing):
        if size <= cap:
            break
        rest = size // out[axis] if out[axis] else 0
        out[axis] = max(1, cap // rest) if rest else out[axis]
        size = math.prod(out)
    return tuple(out)


# ---------------------------------------------------------------- generating one input on each side


def upstream_value(io, UpstreamDefinition, UpstreamWorkload, case: Case, seed: int):
    spec = {"shape": None if case.stand_in is None else [str(d) for d in case.stand_in], "dtype": case.dtype,
            "description": case.description}
    data = {"name": "stand_in", "axes": {}, "inputs": {case.name: spec},
            "outputs": {"stand_in_out": {"shape": None, "dtype": "float32"}},
            "reference": f"def run({case.name}):\n    return 0\n"}
    if case.op_type:
        data["op_type"] = case.op_type
    definition = UpstreamDefinition.model_validate(data)
    workload = UpstreamWorkload.model_validate({"uuid": "stand-in", "axes": {},
                                                 "inputs": {case.name: {"type": "random"}}})
    torch.manual_seed(seed)
    return io.gen_inputs(definition, workload, "cpu")[0]


_HAS_OP_TYPE = "op_type" in {f.name for f in fields(Definition)}


def our_value(make_inputs, source: Problem, case: Case, seed: int):
    spec = TensorSpec(case.name, case.stand_in, case.dtype, case.description)
    definition = Definition(name=source.definition.name, description=source.definition.description,
                            axes=MappingProxyType({}), inputs=MappingProxyType({case.name: spec}),
                            outputs=MappingProxyType({}), reference="")
    if _HAS_OP_TYPE:
        definition = replace(definition, op_type=case.op_type)
    workload = Workload(index=0, uuid="stand-in", axes=MappingProxyType({}),
                        inputs=MappingProxyType({case.name: InputSource(InputKind.RANDOM)}), tolerance=Tolerance(),
                        resolved_axes=MappingProxyType({}))
    problem = Problem(source.path, source.subset, definition, (workload,))
    return make_inputs(problem, workload, "cpu", seed)[case.name]


# ---------------------------------------------------------------- statistics


_E2M1_VALUES = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float64)


def as_float64(value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        return torch.tensor([float(value)], dtype=torch.float64)
    if value.dtype == torch.float4_e2m1fn_x2:
        packed = value.view(torch.uint8).reshape(-1).long()
        return _E2M1_VALUES[torch.stack([packed & 15, packed >> 4], dim=1).reshape(-1)]
    return value.reshape(-1).to(torch.float64)


def sample(values: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    if values.numel() <= count:
        return values
    return values[torch.randint(0, values.numel(), (count,), generator=generator)]


def ks_statistic(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.sort().values, b.sort().values
    points = torch.cat([a, b])
    cdf_a = torch.searchsorted(a, points, right=True).double() / a.numel()
    cdf_b = torch.searchsorted(b, points, right=True).double() / b.numel()
    return float((cdf_a - cdf_b).abs().max())


def stats(values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0}
    return {"mean": float(values.mean()), "std": float(values.std()) if values.numel() > 1 else 0.0,
            "min": float(values.min()), "max": float(values.max())}


def compare(ours, theirs, theirs_again, cap: int) -> dict:
    """Statistics of both sides and whether they agree; ``theirs_again`` is upstream's value from another seed
    (equal to ``theirs`` when upstream's rule is deterministic), None when the draws are known to be random."""
    shape_ours = tuple(ours.shape) if isinstance(ours, torch.Tensor) else None
    shape_theirs = tuple(theirs.shape) if isinstance(theirs, torch.Tensor) else None
    dtype_ours = ours.dtype if isinstance(ours, torch.Tensor) else type(ours)
    dtype_theirs = theirs.dtype if isinstance(theirs, torch.Tensor) else type(theirs)
    generator = torch.Generator().manual_seed(0)
    full_ours, full_theirs = as_float64(ours), as_float64(theirs)
    equal = full_ours.shape == full_theirs.shape and torch.equal(full_ours, full_theirs)
    a, b = sample(full_ours, cap, generator), sample(full_theirs, cap, generator)
    s_ours, s_theirs = stats(a), stats(b)
    scale = s_theirs["std"] or max(abs(s_theirs["mean"]), 1.0)
    deltas = {k: abs(s_ours[k] - s_theirs[k]) / scale for k in s_ours}
    deterministic = theirs_again is not None and torch.equal(full_theirs, as_float64(theirs_again))
    ka, kb = sample(a, KS_SAMPLE, generator), sample(b, KS_SAMPLE, generator)
    if ka.numel() and kb.numel():
        ks = ks_statistic(ka, kb)
        critical = KS_C_ALPHA * math.sqrt((ka.numel() + kb.numel()) / (ka.numel() * kb.numel()))
    else:  # an empty tensor: only its shape and dtype can differ
        ks, critical, deterministic = 0.0, 1.0, True
    same_values = equal if deterministic else ks <= critical
    problems = []
    if shape_ours != shape_theirs:
        problems.append(f"shape {shape_ours} vs {shape_theirs}")
    if dtype_ours != dtype_theirs:
        problems.append(f"dtype {dtype_ours} vs {dtype_theirs}")
    if not same_values:
        problems.append("values differ" if deterministic else f"KS {ks:.3f} > {critical:.3f}")
    return {"ours": s_ours, "upstream": s_theirs, "deltas": deltas, "elements": b.numel(), "ks": ks,
            "critical": critical, "deterministic": deterministic, "match": not problems, "why": "; ".join(problems)}


def compare_scalar(make_ours, make_theirs, draws: int = 2000) -> dict:
    """A Python scalar: ``draws`` values from each side, one per seed."""
    ours = torch.tensor([float(make_ours(s)) for s in range(draws)], dtype=torch.float64)
    theirs = torch.tensor([float(make_theirs(10**6 + s)) for s in range(draws)], dtype=torch.float64)
    return compare(ours, theirs, None, draws)


# ---------------------------------------------------------------- the run


def load_make_inputs(path: str | None):
    if path is None:
        from core.problem.inputs import make_inputs

        return make_inputs
    spec = importlib.util.spec_from_file_location("inputs_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_inputs


def collect(problems, io, all_workloads: bool, cap: int) -> tuple[list[Case], list[str]]:
    cases, notes = [], []
    for problem in problems:
        raw = json.loads((problem.path / "definition.json").read_text())
        op_type = raw.get("op_type")
        workloads = problem.workloads
        if not workloads:
            continue
        first = workloads[0]
        for name, spec in problem.definition.inputs.items():
            if first.inputs[name].kind is not InputKind.RANDOM:
                continue
            shape = problem.definition.shape_of(spec, first.resolved_axes)
            upstream = upstream_rule_name(io, name, shape, spec.dtype, spec.description, op_type)
            ours = input_rules.rule_for(name, shape, spec.dtype, spec.description, op_type).name
            kept = TRAILING_AXES_READ.get(upstream.removeprefix("sampling_probs(").rstrip(")"), 0)
            if upstream.startswith("sampling_probs("):
                kept = max(kept, 1)
            stand_in = None if shape is None else stand_in_shape(shape, kept, cap)
            cases.append(Case(problem.name, name, spec.dtype, shape, spec.description, op_type, upstream, ours,
                              stand_in))
            if all_workloads:
                for workload in workloads[1:]:
                    if workload.inputs[name].kind is not InputKind.RANDOM:
                        continue
                    other = problem.definition.shape_of(spec, workload.resolved_axes)
                    rule = upstream_rule_name(io, name, other, spec.dtype, spec.description, op_type)
                    if rule != upstream:
                        notes.append(f"{problem.name}.{name}: {upstream} in workload 0, {rule} in workload "
                                     f"{workload.index}")
    return cases, notes


def run_case(case: Case, problems_by_name, make_inputs, io, UpstreamDefinition, UpstreamWorkload, cap: int,
             seed: int) -> None:
    source = problems_by_name[case.problem]
    if case.shape is None:
        case.result = compare_scalar(lambda s: our_value(make_inputs, source, case, s),
                                     lambda s: upstream_value(io, UpstreamDefinition, UpstreamWorkload, case, s))
        return
    try:
        theirs = upstream_value(io, UpstreamDefinition, UpstreamWorkload, case, seed + 1)
        theirs_again = upstream_value(io, UpstreamDefinition, UpstreamWorkload, case, seed + 2)
    except Exception as exc:  # upstream cannot generate some dtypes (float64, uint8)
        case.result = {"match": False, "why": f"upstream cannot generate it: {exc}", "upstream_failed": True}
        return
    ours = our_value(make_inputs, source, case, seed)
    case.result = compare(ours, theirs, theirs_again, cap)


def markdown(cases: list[Case], notes: list[str], label: str) -> str:
    by_rule: dict[str, list[Case]] = defaultdict(list)
    for case in cases:
        by_rule[case.upstream_rule].append(case)
    summaries = {rule.name: rule.summary for rule in input_rules.ALL_RULES}
    lines = [f"| upstream rule | inputs | upstream's distribution | {label} | max Δmean/σ | max Δstd/σ | "
             "max Δmin/σ, Δmax/σ | max KS (critical) | differ |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for rule in sorted(by_rule, key=lambda r: (-len(by_rule[r]), r)):
        group = by_rule[rule]
        measured = [c.result for c in group if "deltas" in c.result]
        large = [m for m in measured if m["elements"] >= DELTA_MIN_ELEMENTS]
        mark = "" if large else " *"  # no input of the rule is large: the differences are over small ones
        large = large or measured
        ours = defaultdict(int)
        for c in group:
            ours[c.our_rule] += 1
        ours_text = ", ".join(f"{name} ×{n}" if len(ours) > 1 else name for name, n in sorted(ours.items()))
        if label != "ours (rule applied)":
            ours_text = "—"

        def worst(key):
            return max((m["deltas"][key] for m in large), default=float("nan"))

        ks = max(measured, key=lambda m: m["ks"] - m["critical"], default=None)
        ks_text = f"{ks['ks']:.3f} ({ks['critical']:.3f})" if ks else "—"
        differ = sum(1 for c in group if not c.result["match"])
        base = rule.removeprefix("sampling_probs(").rstrip(")")
        summary = summaries.get(base, rule)
        if rule.startswith("sampling_probs("):
            summary = f"softmax along the last axis of {summary}"
        lines.append(f"| {rule} | {len(group)} | {summary} | {ours_text} | {worst('mean'):.3g}{mark} "
                     f"| {worst('std'):.3g}{mark} | {max(worst('min'), worst('max')):.3g}{mark} | {ks_text} "
                     f"| {differ} |")
    lines += ["", f"σ: upstream's standard deviation (its |mean| or 1 where that is 0). Largest differences over "
                  f"the rule's inputs of at least {DELTA_MIN_ELEMENTS} elements; * where it has none, over its small "
                  "ones. Min and max are extreme order statistics and vary between draws."]
    differ = [c for c in cases if not c.result["match"]]
    floating = [c for c in cases if c.dtype in input_rules.NAME_RULE_DTYPES or c.dtype in LOW_PRECISION]
    differ_floating = [c for c in differ if c in floating]
    lines += ["", f"{len(differ)} of {len(cases)} random inputs differ from upstream's distribution "
                  f"({len(differ_floating)} of {len(floating)} floating-point ones)."]
    if notes:
        lines += ["", "Inputs whose upstream rule changes between workloads:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmark", nargs="?", default=str(SOL_EXECBENCH / "benchmark"))
    parser.add_argument("--all-workloads", action="store_true",
                        help="also check that every workload's inputs take the first workload's rules")
    parser.add_argument("--cap", type=int, default=1 << 18, help="elements per generated tensor (default 262144)")
    parser.add_argument("--ours", metavar="PATH", help="another copy of core/problem/inputs.py to compare")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--details", action="store_true", help="list every input that differs")
    args = parser.parse_args()
    if not Path(args.benchmark).is_dir():
        print(f"error: {args.benchmark}: no such folder", file=sys.stderr)
        return 2
    if args.cap < 1:
        print("error: --cap must be at least 1", file=sys.stderr)
        return 2
    if args.ours and not Path(args.ours).is_file():
        print(f"error: {args.ours}: no such file", file=sys.stderr)
        return 2
    upstream = import_upstream()
    if upstream is None:
        print(f"error: upstream SOL-ExecBench not found at {SOL_EXECBENCH / 'upstream' / 'src'} "
              "(set KERNELFLEET_SOL_EXECBENCH)", file=sys.stderr)
        return 2
    io, UpstreamDefinition, UpstreamWorkload = upstream
    make_inputs = load_make_inputs(args.ours)
    torch.set_num_threads(1)

    report = load_problems([args.benchmark])
    problems_by_name = {p.name: p for p in report.problems}
    cases, notes = collect(report.problems, io, args.all_workloads, args.cap)
    for index, case in enumerate(cases):
        run_case(case, problems_by_name, make_inputs, io, UpstreamDefinition, UpstreamWorkload, args.cap,
                 args.seed + 3 * index)
    label = "ours (rule applied)" if args.ours is None else f"ours ({Path(args.ours).name})"
    print(f"{len(report.problems)} problems, {len(cases)} random inputs (first workload of each)"
          + (f", {len(report.invalid)} problems failed to load" if report.invalid else "") + "\n")
    print(markdown(cases, notes, label))
    if args.details:
        print()
        for case in cases:
            if not case.result["match"]:
                print(f"- {case.problem}.{case.name} ({case.dtype}, {case.upstream_rule}): {case.result['why']}")
    return 1 if any(not c.result["match"] for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
