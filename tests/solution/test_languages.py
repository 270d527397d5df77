"""The language registry (core.languages): every place that knows what a kernel language is asks it, so a language
registered here, and nowhere else, is read, allowed by the config, built and run."""

import dataclasses
import json

import pytest
import torch
from solution_helpers import FAST_EXAMPLE, make_solution, needs_nvcc, run_async

from core.config import load_config
from core.config.schema import LANGUAGES
from core.errors import SpecError
from core.fleet.facts import RunFacts, language_packages, render_facts
from core.languages import KernelLanguage, Toolchain, language, languages, names, register, unregister
from core.solution import Language, RunKind, dumps_solution, parse_solution, prepare, run_kind
from core.solution.io import upstream_deviations
from core.solution.loader import load_entry, materialize

# A Python-entry language a CPU runs: torch operations, as pytorch, under a name of its own.
TORCHLIKE = KernelLanguage("torchlike", "torch operations under another name (a test language)", Toolchain.PYTHON,
                           packages=("torch",))
# An nvcc language built as cuda_cpp is, fast path included.
CUDA_MINI = KernelLanguage("cuda_mini", "CUDA C++ under another name (a test language)", Toolchain.NVCC,
                           python_launcher=True)


@pytest.fixture
def registered():
    """Register the given languages for one test only."""
    added = []

    def add(entry: KernelLanguage) -> KernelLanguage:
        added.append(register(entry))
        return entry

    yield add
    for entry in added:
        unregister(entry.name)


def test_the_config_allows_exactly_the_languages_kernelfleet_builds():
    assert list(LANGUAGES) == list(names(runs=True))
    assert list(LANGUAGES) == ["cuda_cpp", "triton", "pytorch", "cute_dsl", "cutile", "cutlass"]
    assert "tlx" not in LANGUAGES and "cublas" not in LANGUAGES and "rust" not in LANGUAGES


def test_every_upstream_language_is_read_and_those_not_run_are_refused_with_the_supported_ones():
    assert [lang.value for lang in Language] == list(names())
    sol = make_solution({"k.cu": "x"}, languages=["cublas"], entry="k.cu::run")
    with pytest.raises(SpecError) as info:
        run_kind(sol)
    assert info.value.field == "spec.languages[0]"
    assert info.value.message == ("language 'cublas' is not supported by kernelfleet yet (supported: cuda_cpp, "
                                  "cute_dsl, cutile, cutlass, pytorch, triton)")


def test_language_is_one_object_per_name_and_reads_as_upstreams_enum():
    assert Language("cuda_cpp") is Language.CUDA_CPP and Language.CUDA_CPP.value == "cuda_cpp"
    assert Language.CUTLASS.is_cpp and not Language.CUTLASS.is_python and Language.TRITON.is_python
    assert Language.PYTORCH == "pytorch" and json.dumps([Language.PYTORCH]) == '["pytorch"]'
    with pytest.raises(ValueError, match="unknown language 'rust'"):
        Language("rust")


def test_a_registered_python_language_is_read_allowed_and_runs_on_the_cpu(registered, tmp_path):
    registered(TORCHLIKE)
    sol = make_solution({"main.py": "import torch\n\ndef run(x, out):\n    out.copy_(torch.relu(x) * 2)\n"},
                        languages=["torchlike"])
    assert sol.spec.languages == (Language("torchlike"),) and sol.spec.is_python
    assert run_kind(sol) is RunKind.PYTHON
    assert json.loads(dumps_solution(sol))["spec"]["languages"] == ["torchlike"]
    assert upstream_deviations(sol) == ["spec.languages[0]: 'torchlike' is not a language upstream knows"]

    prepared = run_async(prepare, sol)
    assert prepared.ok, prepared.errors
    fn = load_entry(materialize(prepared, tmp_path / "cand"), sol)
    x = torch.tensor([-1.0, 0.5, 2.0])
    out = torch.empty_like(x)
    fn(x, out)
    assert out.tolist() == [0.0, 1.0, 4.0]

    config = tmp_path / "fleet.toml"
    config.write_text('[fleet]\nlanguages = ["torchlike", "pytorch"]\n')
    assert load_config(config).fleet.languages == ("torchlike", "pytorch")
    assert "torchlike" in LANGUAGES
    text = render_facts(RunFacts(device="cpu", languages=("torchlike",)))
    assert "torchlike: torch operations under another name (a test language)" in text


def test_a_registered_language_is_gone_once_unregistered(tmp_path):
    register(TORCHLIKE)
    unregister("torchlike")
    assert "torchlike" not in LANGUAGES and "torchlike" not in names()
    with pytest.raises(SpecError, match=r"spec.languages\[0\]: unknown language 'torchlike'"):
        make_solution({"main.py": "def run(): pass\n"}, languages=["torchlike"])
    config = tmp_path / "fleet.toml"
    config.write_text('[fleet]\nlanguages = ["torchlike"]\n')
    with pytest.raises(Exception) as info:
        load_config(config)
    assert str(info.value) == (f"{config}: fleet.languages[0]: must be one of 'cuda_cpp', 'triton', 'pytorch', "
                               "'cute_dsl', 'cutile', 'cutlass', got 'torchlike'")


def test_a_language_that_needs_what_this_machine_lacks_is_refused_with_its_own_line(registered):
    registered(dataclasses.replace(TORCHLIKE, name="needy", packages=("needy-lib",),
                                   refusal=lambda: "needy-lib is not installed in this environment"))
    sol = make_solution({"main.py": "def run(): pass\n"}, languages=["needy"])
    with pytest.raises(SpecError) as info:
        run_kind(sol)
    assert info.value.field == "spec.languages[0]" and info.value.message == "needy-lib is not installed in this " \
                                                                            "environment"
    assert run_kind(sol, check_environment=False) is RunKind.PYTHON
    assert "needy-lib" in language_packages()


def test_an_alias_reads_as_the_language_it_names():
    cuda_cpp = language("cuda_cpp")
    register(dataclasses.replace(cuda_cpp, aliases=("cuda",)), replace=True)
    try:
        data = json.loads(FAST_EXAMPLE.read_text())
        data["spec"]["languages"] = ["cuda"]
        sol = parse_solution(data, "alias.json")
        assert sol.spec.languages == (Language.CUDA_CPP,) and run_kind(sol) is RunKind.CUDA_FAST
        assert json.loads(dumps_solution(sol))["spec"]["languages"] == ["cuda_cpp"]
    finally:
        register(cuda_cpp, replace=True)
    assert language("cuda_cpp") is cuda_cpp
    with pytest.raises(ValueError, match="unknown language 'cuda'"):
        language("cuda")


def test_two_languages_cannot_answer_to_one_name():
    with pytest.raises(ValueError, match="language name 'pytorch' is taken by 'pytorch'"):
        register(dataclasses.replace(TORCHLIKE, name="pytorch"))
    with pytest.raises(ValueError, match="language name 'triton' is taken by 'triton'"):
        register(dataclasses.replace(TORCHLIKE, aliases=("triton",)))
    assert "torchlike" not in names()


@needs_nvcc
def test_a_registered_nvcc_language_builds_its_kernels_with_nvcc(registered, build_service):
    registered(CUDA_MINI)
    data = json.loads(FAST_EXAMPLE.read_text())
    data["spec"]["languages"] = ["cuda_mini"]
    sol = parse_solution(data, "mini.json")
    assert sol.spec.is_cpp and run_kind(sol) is RunKind.CUDA_FAST
    prepared = run_async(prepare, sol, build_service)
    assert prepared.ok, prepared.errors
    cubin = prepared.cubins["rmsnorm.cu"]
    assert cubin.is_file() and cubin.read_bytes()[:4] == b"\x7fELF"
    assert [r.name for r in prepared.build.resources] == ["rmsnorm_kernel"]


def test_a_python_launcher_is_only_for_languages_that_allow_it(registered):
    registered(dataclasses.replace(CUDA_MINI, name="cuda_strict", python_launcher=False))
    data = json.loads(FAST_EXAMPLE.read_text())
    data["spec"]["languages"] = ["cuda_strict"]
    with pytest.raises(SpecError) as info:
        parse_solution(data, "strict.json")
    assert info.value.field == "spec.entry_point"
    assert info.value.message.endswith('a .py entry is accepted only with languages ["cuda_cpp"] alone')


def test_the_built_in_records_say_what_each_needs():
    assert [e.name for e in languages(runs=True) if e.is_python] == ["triton", "pytorch", "cute_dsl", "cutile"]
    assert language("cutlass").needs_cutlass_headers and language("cutlass").toolchain is Toolchain.NVCC
    assert language_packages() == ("triton", "torch", "nvidia-cutlass-dsl", "cuda-tile")
    assert [e.docs.name for e in languages() if e.docs] == ["triton", "torch", "cute_dsl"]
    assert all(e.description and "\n" not in e.description for e in languages())
    assert not language("tlx").upstream and language("cudnn").upstream and not language("cudnn").runs
