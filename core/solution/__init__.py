"""Candidates: SOL-ExecBench ``solution.json`` (sources + build spec), tunables, preparing and loading.

Orchestrator side (pure data and builds, never runs candidate code): ``schema``, ``io``, ``tunables``,
``support``, ``prepare``. Worker side (imports candidate code): ``core.solution.loader`` and the candidate
helper ``core.solution.runtime``; neither is imported here.
"""

from core.solution.io import (
    content_hash,
    dumps_solution,
    load_solution,
    loads_solution,
    parse_solution,
    solution_to_dict,
    upstream_deviations,
    write_solution,
)
from core.solution.prepare import PreparedSolution, prepare
from core.solution.schema import (
    CPP_LANGUAGES,
    HARDWARE,
    PYTHON_LANGUAGES,
    BuildSpec,
    CompileOptions,
    Language,
    Solution,
    SourceFile,
)
from core.solution.support import CUTE_DSL_MISSING, RunKind, check_supported, run_kind
from core.solution.tunables import (
    TUNABLES_FILE,
    TUNABLES_MODULE,
    Tunables,
    defines,
    format_tunables,
    get_tunables,
    parse_tunables,
    python_module_source,
    with_values,
)

__all__ = [
    "CPP_LANGUAGES", "CUTE_DSL_MISSING", "HARDWARE", "PYTHON_LANGUAGES", "TUNABLES_FILE", "TUNABLES_MODULE",
    "BuildSpec", "CompileOptions", "Language", "PreparedSolution", "RunKind", "Solution", "SourceFile", "Tunables",
    "check_supported", "content_hash", "defines", "dumps_solution", "format_tunables", "get_tunables",
    "load_solution", "loads_solution", "parse_solution", "parse_tunables", "prepare", "python_module_source",
    "run_kind", "solution_to_dict", "upstream_deviations", "with_values", "write_solution",
]
