"""The machine as data: CPU flags and llama.cpp's build parsed once, and the decisions made from them,
on recorded machines (an AMX Xeon with and without AMX kernels, an AVX2 laptop, ARM, this EPYC)."""

from __future__ import annotations

import pytest

from llmcli.machine import (
    NO_AMX_CMAKE_ARGS,
    cpu_cmake_args,
    fit,
    guard_extra_bufts,
    parse_cpuinfo,
    parse_system_info,
    this_cpu,
)
from tests.support import machines as m

XEON = parse_cpuinfo(m.SAPPHIRE_RAPIDS, "x86_64")
LAPTOP = parse_cpuinfo(m.AVX2_LAPTOP, "x86_64")
EPYC = parse_cpuinfo(m.EPYC, "x86_64")
GRAVITON = parse_cpuinfo(m.GRAVITON3, "aarch64")


def test_cpuinfo_is_parsed_from_the_first_processor():
    assert XEON.model == "Intel(R) Xeon(R) Platinum 8488C"
    assert {"amx_tile", "amx_int8", "avx512_vnni", "avx2"} <= XEON.flags
    assert "fpu" in XEON.flags and len(XEON.flags) > 100  # processor 1's short line is not read
    assert XEON.has_amx and not LAPTOP.has_amx and not EPYC.has_amx
    assert {"asimd", "asimddp", "sve", "i8mm"} <= GRAVITON.flags and not GRAVITON.has_amx
    assert GRAVITON.relevant_flags() == ["asimd", "asimddp", "asimdhp", "i8mm", "sve"]


def test_amx_flags_on_an_arm_machine_are_not_amx():
    assert not parse_cpuinfo("Features\t: asimd amx_int8\n", "aarch64").has_amx


def test_no_cpuinfo_is_a_cpu_without_flags():
    cpu = parse_cpuinfo("", "arm64")
    assert cpu.flags == frozenset() and not cpu.has_amx


def test_system_info_is_parsed_per_backend():
    build = parse_system_info(m.CUDA_ON_SAPPHIRE_RAPIDS)
    assert build.backends["CUDA"]["ARCHS"] == "900"
    assert build.has("AMX_INT8") and build.has("AVX512_VNNI") and not build.has("NEON")
    assert parse_system_info(m.NATIVE_GRAVITON3).cpu_features()["SVE_CNT"] == "32"
    assert not parse_system_info("").has("AVX2")


@pytest.mark.parametrize(
    "info, cpu, guarded",
    [
        (m.NATIVE_SAPPHIRE_RAPIDS, XEON, True),  # the crash: AMX kernels on an AMX CPU
        (m.CUDA_ON_SAPPHIRE_RAPIDS, XEON, True),  # the CPU's layers of a GPU build too
        (m.NO_AMX_SAPPHIRE_RAPIDS, XEON, False),  # make install's build there: repacking stays on
        (m.NATIVE_SAPPHIRE_RAPIDS, EPYC, False),  # kernels in, no AMX: ggml's AMX buffer refuses itself
        (m.NATIVE_EPYC, EPYC, False),
        (m.NATIVE_AVX2, LAPTOP, False),
        (m.NATIVE_GRAVITON3, GRAVITON, False),
    ],
    ids=[
        "amx-kernels-amx-cpu",
        "cuda-build-amx-cpu",
        "no-amx-kernels",
        "amx-kernels-epyc",
        "epyc",
        "avx2",
        "arm",
    ],
)
def test_extra_buffer_types_are_turned_off_only_for_amx_kernels_on_an_amx_cpu(info, cpu, guarded):
    assert guard_extra_bufts(parse_system_info(info), cpu) is guarded


def test_only_an_amx_cpu_gets_cmake_args():
    assert cpu_cmake_args(XEON) == NO_AMX_CMAKE_ARGS
    assert "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in NO_AMX_CMAKE_ARGS
    assert cpu_cmake_args(EPYC) == cpu_cmake_args(LAPTOP) == cpu_cmake_args(GRAVITON) == ()


def test_a_build_for_an_isa_the_cpu_lacks_does_not_fit():
    verdict = fit(parse_system_info(m.NATIVE_EPYC), LAPTOP)
    assert not verdict.ok and verdict.missing == ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16")
    assert verdict.text().startswith("no: built for AVX512, AVX512_VBMI") and "make install" in verdict.text()


def test_fit_verdicts():
    assert fit(parse_system_info(m.NATIVE_EPYC), EPYC).text() == "yes"
    assert fit(parse_system_info(m.NATIVE_AVX2), EPYC).ok  # an older ISA runs
    guarded = fit(parse_system_info(m.NATIVE_SAPPHIRE_RAPIDS), XEON)
    assert guarded.ok and guarded.amx_guarded and guarded.text().startswith("guarded:")
    assert fit(parse_system_info(m.NATIVE_GRAVITON3), GRAVITON).text() == "yes"
    # AMX kernels on a CPU without AMX: the CPU lacks AMX_INT8, which ggml only runs where it can.
    assert fit(parse_system_info(m.NATIVE_SAPPHIRE_RAPIDS), EPYC).missing == ("AVX_VNNI", "AMX_INT8")


def test_this_cpu_is_read_once():
    assert this_cpu() is this_cpu()
    assert this_cpu().arch
