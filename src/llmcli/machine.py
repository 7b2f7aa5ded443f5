"""The machine llmcli runs on, as data, and the decisions that join it to llama.cpp's build.

Two inputs, each parsed once into a type: the CPU (its architecture and the flags /proc/cpuinfo lists),
and the features llama.cpp was compiled with (its system-info line, `CPU : AVX2 = 1 | AMX_INT8 = 1 | `).
The decisions are pure functions of the two, so they are tested on recorded lines of machines this one
is not (an AMX Xeon, an AVX2-only laptop, an ARM server):

- guard_extra_bufts: a load must keep llama.cpp's extra buffer types off, because llama.cpp's AMX
  kernels are compiled in and this CPU would run them. On Sapphire Rapids and later, ggml's AMX
  matmul crashes (SIGILL then SIGSEGV at `tilezero`: GCC 12 drops the stores that fill the tile
  config, an upstream bug Ollama's users hit too); without the extra buffer types the weights stay in
  plain CPU buffers and the AMX path is never taken (llama-bench's `--repack 0`).
- cpu_cmake_args: what `make install` adds to CMAKE_ARGS on this CPU (scripts/build_args.py):
  `-march=native` with AMX turned off on an AMX CPU, nothing elsewhere (docs/build.md says why).
- fit: whether the build fits the CPU (`llmcli doctor`).

Standard library only: scripts/build_args.py imports it with the system Python, before any venv.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass

X86 = frozenset({"x86_64", "amd64", "i386", "i686"})

# The CPU flags (Linux's /proc/cpuinfo names) each x86 feature in llama.cpp's system-info line needs.
# On x86 those features are fixed when llama.cpp is compiled (ggml-cpu.c's ggml_cpu_has_*), so a build
# that names one this CPU lacks dies of an illegal instruction. ARM's are detected at run time, and say
# what the CPU has, so they cannot misfit.
X86_FEATURE_FLAGS = {
    "SSE3": "pni",  # the kernel's name for SSE3 ("Prescott New Instructions")
    "SSSE3": "ssse3",
    "AVX": "avx",
    "AVX_VNNI": "avx_vnni",
    "AVX2": "avx2",
    "F16C": "f16c",
    "FMA": "fma",
    "BMI2": "bmi2",
    "AVX512": "avx512f",
    "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AMX_INT8": "amx_int8",
}

# The flags `llmcli doctor` shows: the ones llama.cpp's CPU kernels are built for.
RELEVANT_FLAGS = (*X86_FEATURE_FLAGS.values(), "amx_tile", "amx_bf16", "asimd", "asimddp", "asimdhp", "i8mm")
RELEVANT_FLAGS += ("sve", "sve2", "sme")

# GCC's and Clang's switches for every AMX extension ggml compiles for. An explicit -mno-* beats what
# -march=native turns on, wherever it stands on the command line (GCC's driver puts native's expansion
# before the user's switches; Clang applies -m features over the CPU's), so the rest of native stays.
NO_AMX = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")
NO_AMX_FLAGS = " ".join(NO_AMX)
NO_AMX_CMAKE_ARGS = (f"-DCMAKE_C_FLAGS={NO_AMX_FLAGS}", f"-DCMAKE_CXX_FLAGS={NO_AMX_FLAGS}")


@dataclass(frozen=True)
class Cpu:
    arch: str  # platform.machine(), lower case: x86_64, aarch64, arm64
    model: str  # "model name" ("" where the kernel does not say, as on many ARM machines)
    flags: frozenset[str]  # x86 "flags" / ARM "Features" of the first processor

    @property
    def is_x86(self) -> bool:
        return self.arch in X86

    @property
    def has_amx(self) -> bool:
        """The CPU runs AMX's int8 tiles, the ones ggml's AMX kernels use (Sapphire Rapids and later)."""
        return self.is_x86 and "amx_int8" in self.flags

    def relevant_flags(self) -> list[str]:
        return [flag for flag in RELEVANT_FLAGS if flag in self.flags]


def parse_cpuinfo(text: str, arch: str) -> Cpu:
    """A Cpu from /proc/cpuinfo's text: the first processor's flags (x86) or Features (ARM)."""
    model, flags = "", None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and flags is None:
            flags = frozenset(value.split())
    return Cpu(arch=arch.lower(), model=model, flags=flags or frozenset())


@functools.cache
def this_cpu(cpuinfo: str = "/proc/cpuinfo") -> Cpu:
    """This machine's CPU, read once per process (the one place llmcli reads /proc/cpuinfo). Where there
    is none (macOS, Windows) the flags are empty: nothing is guarded or added there."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        text = ""
    cpu = parse_cpuinfo(text, platform.machine())
    if not cpu.model:
        cpu = Cpu(cpu.arch, platform.processor() or cpu.arch, cpu.flags)
    return cpu


@dataclass(frozen=True)
class Build:
    """llama.cpp's build, as its system-info line states it: backend -> feature -> value."""

    line: str
    backends: dict[str, dict[str, str]]

    def cpu_features(self) -> dict[str, str]:
        return self.backends.get("CPU", {})

    def has(self, feature: str) -> bool:
        return self.cpu_features().get(feature, "0") not in ("0", "")


def parse_system_info(line: str) -> Build:
    """`CPU : SSE3 = 1 | AVX2 = 1 | ... | CUDA : ARCHS = 890 | ...` (llama_print_system_info) -> Build.

    Each backend's name comes before ` : `; its features follow as `NAME = VALUE |`."""
    backends: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for part in line.split("|"):
        part = part.strip()
        if " : " in part:  # `CPU : SSE3 = 1`: a new backend, with its first feature
            name, _, part = part.partition(" : ")
            current = backends.setdefault(name.strip(), {})
        if current is None or "=" not in part:
            continue
        key, _, value = part.partition("=")
        current[key.strip()] = value.strip()
    return Build(line=line.strip(), backends=backends)


def guard_extra_bufts(build: Build, cpu: Cpu) -> bool:
    """True where a load must set `use_extra_bufts = False`: llama.cpp's AMX kernels are compiled in
    (AMX_INT8 = 1) and this CPU has AMX, so ggml would hand the weights to its AMX buffer type and
    crash. Where the CPU lacks AMX, ggml's AMX buffer type refuses itself (the kernel denies the tile
    permission), and the other extra buffer types (weight repacking for AVX2/AVX-512/NEON) stay on."""
    return build.has("AMX_INT8") and cpu.has_amx


def cpu_cmake_args(cpu: Cpu) -> tuple[str, ...]:
    """What `make install` adds to CMAKE_ARGS for this CPU: no AMX kernels on an AMX CPU (the rest of
    -march=native kept), nothing elsewhere, so a machine without AMX builds what it always built."""
    return NO_AMX_CMAKE_ARGS if cpu.has_amx else ()


@dataclass(frozen=True)
class Fit:
    """Whether llama.cpp's build fits this CPU."""

    missing: tuple[str, ...]  # x86 features compiled in that the CPU lacks: an illegal instruction
    amx_guarded: bool  # AMX kernels compiled in on an AMX CPU: loads turn the extra buffer types off

    @property
    def ok(self) -> bool:
        return not self.missing

    def text(self) -> str:
        if self.missing:
            return (
                f"no: built for {', '.join(self.missing)}, which this CPU lacks; "
                "run `make install` again on this machine (docs/build.md)"
            )
        if self.amx_guarded:
            return (
                "guarded: AMX kernels are compiled in and this CPU has AMX, so every load turns "
                "llama.cpp's extra buffer types off (slower); `make install` builds without them"
            )
        return "yes"


def fit(build: Build, cpu: Cpu) -> Fit:
    missing: tuple[str, ...] = ()
    if cpu.is_x86 and cpu.flags:  # no flags: nothing to compare against (not Linux)
        missing = tuple(f for f, flag in X86_FEATURE_FLAGS.items() if build.has(f) and flag not in cpu.flags)
    return Fit(missing=missing, amx_guarded=guard_extra_bufts(build, cpu))
