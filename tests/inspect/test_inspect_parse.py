"""Parsing the instruments' real output (captured on the H200) and rendering it for the agent."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from inspect_helpers import rmsnorm_problem, seed_solution

from core.build.nvcc import find_nvcc
from core.inspect import assembly, ncu, sanitizer
from core.inspect.service import Inspector

DATA = Path(__file__).with_name("data")
# ncu --section SpeedOfLight,Occupancy,MemoryWorkloadAnalysis,WarpStateStats,LaunchStats,ComputeWorkloadAnalysis
# --csv --page raw of torch.relu(x) + 1 (x: 2**24 fp32) and a 2048^3 bf16 matmul, on the H200.
NCU_RAW = (DATA / "ncu_raw_h200.csv").read_text()


def test_ncu_raw_page_becomes_per_kernel_figures():
    kernels = ncu.parse_raw_csv(NCU_RAW)
    assert [k.name.split("<")[0] for k in kernels] == ["void at::vectorized_elementwise_kernel"] * 2 + \
        ["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"]
    relu, add, gemm = kernels
    assert relu.duration_us == pytest.approx(31.072)
    assert relu.dram_pct == pytest.approx(73.56, abs=0.01) and relu.dram_tb_s == pytest.approx(3.5375, abs=1e-3)
    assert relu.grid == "(16384, 1, 1)" and relu.block == "(128, 1, 1)" and relu.registers == 28
    assert relu.stalls[0][0] == "long_scoreboard"
    assert gemm.tensor_pct == pytest.approx(82.86, abs=0.01) and gemm.registers == 168
    assert gemm.shared_dynamic_bytes == 213188 and gemm.l2_hit_pct == pytest.approx(84.16, abs=0.01)
    assert all(reason not in ("selected", "not_selected") for k in kernels for reason, _ in k.stalls)


def test_the_diagnosis_names_the_limit_each_kernel_is_near():
    relu, _, gemm = ncu.parse_raw_csv(NCU_RAW)
    assert ncu.diagnose(relu).startswith("memory-bound: DRAM at 74% of peak (26% headroom)")
    assert ncu.diagnose(gemm).startswith("compute-bound: SM throughput at 73% of peak")
    idle = ncu.KernelProfile("k", 3.0, 5.0, 0.2, 4.0, 6.0, 0.0, 50.0, 12.0, 0.0, 2.0, (("long_scoreboard", 9.0),),
                             32, 0, 0, "(1, 1, 1)", "(32, 1, 1)", 0.01)
    assert ncu.diagnose(idle).startswith("under-utilised") and "long scoreboard" in ncu.diagnose(idle)


def test_render_relates_kernel_time_to_t_sol_and_keeps_the_longest_first():
    text = ncu.render(ncu.parse_raw_csv(NCU_RAW), t_sol_us=44.0, t_b_us=100.0)
    assert "3 kernel launch(es) in one call, 88.03 us of kernel time" in text
    assert "kernel time is 2.00x T_sol, SOL 0.50" in text
    assert text.index("launch_clamp_scalar") < text.index("nvjet_sm90")


def test_program_output_around_the_page_and_broken_pages_are_tolerated():
    noisy = "==PROF== Connected\nprinted by the candidate\n" + NCU_RAW + "\nmore prints\n"
    assert len(ncu.parse_raw_csv(noisy)) == 3
    assert ncu.parse_raw_csv("garbage") == []
    cut = NCU_RAW[: NCU_RAW.index('\n"2","') + 500]  # the third launch's row cut short: it is left out
    assert [k.name for k in ncu.parse_raw_csv(cut)] == [k.name for k in ncu.parse_raw_csv(NCU_RAW)[:2]]


def test_ncu_failures_get_one_reason():
    assert "ERR_NVGPUCTRPERM" in ncu.failure_reason("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    assert ncu.failure_reason("==ERROR== Failed to find metric foo") == "ncu: Failed to find metric foo"
    assert ncu.failure_reason("all fine") == ""


def test_memcheck_findings_are_grouped_with_their_line():
    report = sanitizer.parse("memcheck", (DATA / "memcheck_head_h200.txt").read_text() + "\n========= ERROR SUMMARY: "
                                                                                        "3 errors\n")
    assert report.ran and report.errors == 3
    assert report.findings == (sanitizer.Finding("Invalid __global__ write of size 4 bytes", "k(float *, int)",
                                                 "oob.cu:1", 3),)
    named = sanitizer.relative_to(sanitizer.parse("memcheck", "========= COMPUTE-SANITIZER\n========= Invalid __global"
                                                  "__ read of size 16 bytes\n=========     at k+0x10 in /tmp/b/src/"
                                                  "sub/k.cu:7\n"), ["k.cu", "sub/k.cu"])
    assert named.findings[0].where == "sub/k.cu:7"
    text = sanitizer.render(report)
    assert "3 error(s), 1 distinct finding(s)" in text and "at oob.cu:1, 3 threads" in text
    assert "did not run" in sanitizer.render(sanitizer.parse("memcheck", "python: not found"))


SASS = """
        code for sm_90a
                Function : rmsnorm_bf16
        .headerflags    @"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x00000a00ff017b82 */
        /*0010*/                   S2R R0, SR_TID.X ;                           /* 0x0000000000007919 */
        /*0020*/              @!P0 LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;     /* 0x0000000402048981 */
        /*0030*/                   SHFL.BFLY PT, R9, R8, 0x10, 0x1f ;           /* 0x0e201f0008097f89 */
        /*0040*/                   STL [R1], R9 ;                               /* 0x0000000901007387 */
        /*0050*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ; /* 0x0000000000000000 */
        /*0060*/                   STG.E.128 desc[UR4][R6.64], R4 ;             /* 0x0000000406007986 */
        /*0070*/                   EXIT ;                                       /* 0x000000000000794d */
"""


def test_sass_mix_counts_the_instructions_that_matter():
    kernels = assembly.split_sass(SASS)
    assert list(kernels) == ["rmsnorm_bf16"]
    code = assembly.sass_code("rmsnorm_bf16", kernels["rmsnorm_bf16"])
    assert code.instructions == 8
    mix = dict(code.mix)
    assert mix["global load"] == 1 and mix["shuffle"] == 1 and mix["local store (spill)"] == 1
    assert mix["wgmma (warpgroup MMA)"] == 1 and mix["global store"] == 1
    assert dict(code.wide) == {"128-bit global load": 1, "128-bit global store": 1}
    assert "/* 0x" not in code.text  # encodings dropped


def test_render_trims_listings_but_never_the_mix():
    code = assembly.sass_code("k", "\n".join(f"        /*{i:04x}*/   FFMA R1, R2, R3, R4 ;" for i in range(2000)))
    text = assembly.render("SASS", [code], max_chars=1500)
    assert len(text) < 1700 and "mix: fp32 FMA/ADD/MUL 2000" in text and "more characters" in text
    assert "no SASS kernel matches 'x'" in assembly.render("SASS", [code], max_chars=1500, kernel="x")


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
def test_ptx_of_the_rmsnorm_seed_without_a_gpu():
    from core.build import BuildService
    from core.solution.prepare import prepare

    async def main():
        prepared = await prepare(seed_solution(), BuildService())
        return await Inspector(None, device="cuda", timeout_s=60).assembly(rmsnorm_problem(), prepared, form="ptx",
                                                                           max_chars=3000)

    result = anyio.run(main)
    assert result.ok and result.instrument == "nvcc -ptx", result.text
    assert result.text.startswith("PTX rmsnorm_bf16: ")
    assert "shuffle 10" in result.text and "global store" in result.text and "registers" in result.text
    assert ".loc" not in result.text
