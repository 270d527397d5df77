"""The compiler outputs below were printed by nvcc 13.0 (paths shortened); real builds are in test_build_service."""

from pathlib import Path

from core.build.diagnostics import parse_diagnostics, relativize

SOURCE_DIR = Path("/var/tmp/kf/.work-abc/src")

FRONT_END_OUTPUT = f"""\
{SOURCE_DIR}/inc/util.cuh(2): error: identifier "undefined_thing" is undefined
  __attribute__((device)) inline float twice(float x) {{ return 2 * x + undefined_thing; }}
                                                                       ^

kernel.cu(4): error: identifier "x" is undefined
    a[0] = twice(x);
                 ^

kernel.cu(6): error: expected a ";"
  }}
  ^

kernel.cu(3): warning #177-D: variable "unused" was declared but never referenced
    int unused = 3;
        ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

3 errors detected in the compilation of "kernel.cu".
"""


def test_front_end_errors_are_located_relative_to_the_source_dir():
    diagnostics = parse_diagnostics(FRONT_END_OUTPUT, SOURCE_DIR)
    assert [str(error) for error in diagnostics.errors] == [
        'inc/util.cuh:2: error: identifier "undefined_thing" is undefined',
        'kernel.cu:4: error: identifier "x" is undefined',
        'kernel.cu:6: error: expected a ";"',
    ]
    assert [str(warning) for warning in diagnostics.warnings] == [
        'kernel.cu:3: warning #177-D: variable "unused" was declared but never referenced'
    ]
    assert str(SOURCE_DIR) not in diagnostics.report()


def test_report_shows_the_first_errors_and_counts_the_rest():
    output = "".join(f'kernel.cu({line}): error: identifier "v{line}" is undefined\n' for line in range(1, 9))
    report = parse_diagnostics(output).report()
    assert report.splitlines() == [
        *(f'kernel.cu:{line}: error: identifier "v{line}" is undefined' for line in range(1, 6)),
        "... and 3 more errors",
    ]
    assert parse_diagnostics(output).report(max_errors=7).endswith("... and 1 more error")


def test_template_errors_keep_their_instantiation_note():
    output = """\
tmpl.cu(1): error: expression must have class type but it has type "float"
  template <typename T> __attribute__((device)) T f(T x) { return x.foo(); }
                                                                  ^
          detected during instantiation of "T f(T) [with T=float]" at line 2

1 error detected in the compilation of "tmpl.cu".
"""
    assert parse_diagnostics(output).report() == (
        'tmpl.cu:1: error: expression must have class type but it has type "float"\n'
        '  detected during instantiation of "T f(T) [with T=float]" at line 2'
    )


def test_ptxas_errors_drop_nvcc_temporary_ptx_paths():
    output = """\
ptxas /tmp/tmpxft_00000e1d_00000000-6_asm.ptx, line 27; error   : Unknown modifier '.instr'
ptxas /tmp/tmpxft_00000e1d_00000000-6_asm.ptx, line 27; error   : Not a name of any known instruction: 'bogus'
ptxas fatal   : Ptx assembly aborted due to errors
ptxas warning : For profile sm_90a adjusting per thread register count of 16 to lower bound of 24
ptxas error   : Entry function 'k' uses too much shared data (0x40000 bytes, 0x38c00 max)
ptxas info    : 0 bytes gmem
"""
    diagnostics = parse_diagnostics(output)
    assert [str(error) for error in diagnostics.errors] == [
        "ptxas: error: Unknown modifier '.instr'",
        "ptxas: error: Not a name of any known instruction: 'bogus'",
        "ptxas: fatal: Ptx assembly aborted due to errors",
        "ptxas: error: Entry function 'k' uses too much shared data (0x40000 bytes, 0x38c00 max)",
    ]
    assert [str(warning) for warning in diagnostics.warnings] == [
        "ptxas: warning: For profile sm_90a adjusting per thread register count of 16 to lower bound of 24"
    ]


def test_errors_without_a_line_number():
    output = """\
nvcc fatal   : Unknown option '--bogus-flag'
nvlink error   : Undefined reference to '_Z3foov' in 'kernel.o'
collect2: error: ld returned 1 exit status
"""
    assert parse_diagnostics(output).report().splitlines() == [
        "nvcc: fatal: Unknown option '--bogus-flag'",
        "nvlink: error: Undefined reference to '_Z3foov' in 'kernel.o'",
        "collect2: error: ld returned 1 exit status",
    ]


def test_host_preprocessor_errors():
    output = f"""\
{SOURCE_DIR}/kernels/gemm.cu:1:10: fatal error: nothere.h: No such file or directory
    1 | #include "nothere.h"
      |          ^~~~~~~~~~~
compilation terminated.
"""
    assert parse_diagnostics(output, SOURCE_DIR).report() == (
        "kernels/gemm.cu:1: fatal error: nothere.h: No such file or directory"
    )


def test_relativize_strips_the_deepest_root_first():
    workspace = SOURCE_DIR.parent
    text = f"{SOURCE_DIR}/kernel.cu(3) and {workspace}/tmp/tmpxft_1.ptx"
    assert relativize(text, SOURCE_DIR, workspace) == "kernel.cu(3) and tmp/tmpxft_1.ptx"
