"""Recorded machines: /proc/cpuinfo excerpts and llama.cpp system-info lines of CPUs this one is not.

The flag lines are those of real machines (an AWS r7i Sapphire Rapids, a Kaby Lake laptop, an AWS
Graviton3, and the AMD EPYC the suite was written on), cut to the first processor's lines that matter.
"""

from __future__ import annotations

SAPPHIRE_RAPIDS = """processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Platinum 8488C
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse \
sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc arch_perfmon rep_good nopl xtopology nonstop_tsc cpuid \
aperfmperf tsc_known_freq pni pclmulqdq monitor ssse3 fma cx16 pdcm pcid sse4_1 sse4_2 x2apic movbe popcnt \
tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch invpcid_single ssbd ibrs \
ibpb stibp ibrs_enhanced fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx \
smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni \
avx512_bf16 wbnoinvd ida arat avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes vpclmulqdq \
avx512_vnni avx512_bitalg tme avx512_vpopcntdq rdpid cldemote movdiri movdir64b md_clear serialize \
tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d arch_capabilities

processor	: 1
flags		: fpu
"""

AVX2_LAPTOP = """processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Core(TM) i7-8550U CPU @ 1.80GHz
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx \
fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good \
nopl xtopology nonstop_tsc cpuid aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx est tm2 ssse3 sdbg fma \
cx16 xtpr pdcm pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm abm \
3dnowprefetch cpuid_fault epb invpcid_single fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid mpx \
rdseed adx smap clflushopt intel_pt xsaveopt xsavec xgetbv1 xsaves ibrs ibpb stibp
"""

EPYC = """processor	: 0
vendor_id	: AuthenticAMD
model name	: AMD EPYC
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse \
sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm rep_good nopl cpuid extd_apicid pni pclmulqdq ssse3 \
fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy \
abm sse4a misalignsse 3dnowprefetch bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap \
avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx512_bf16 \
clzero xsaveerptr wbnoinvd arat avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni \
avx512_bitalg avx512_vpopcntdq rdpid fsrm
"""

GRAVITON3 = """processor	: 0
BogoMIPS	: 2100.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma \
lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm \
svebf16 i8mm bf16 dgh rng
CPU implementer	: 0x41
CPU architecture: 8
CPU part	: 0xd40
"""

# llama_print_system_info() of llama-cpp-python 0.3.36 builds.
NATIVE_SAPPHIRE_RAPIDS = (  # -march=native on the Xeon above: AMX kernels compiled in
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | "
    "OPENMP = 1 | REPACK = 1 | "
)
NO_AMX_SAPPHIRE_RAPIDS = NATIVE_SAPPHIRE_RAPIDS.replace("AMX_INT8 = 1 | ", "")  # make install's build there
NATIVE_EPYC = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | "
    "AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)
NATIVE_AVX2 = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | "
    "OPENMP = 1 | REPACK = 1 | "
)
NATIVE_GRAVITON3 = (
    "CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | MATMUL_INT8 = 1 | SVE = 1 | DOTPROD = 1 | SVE_CNT = 32 | "
    "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)
CUDA_ON_SAPPHIRE_RAPIDS = (
    "CUDA : ARCHS = 900 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | " + NATIVE_SAPPHIRE_RAPIDS
)
