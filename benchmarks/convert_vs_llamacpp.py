#!/usr/bin/env python3
"""llmcli's converter against llama.cpp's own convert_hf_to_gguf.py: time, peak memory, same tensors.

    python benchmarks/convert_vs_llamacpp.py [--src HF_DIR] [--vendor LLAMA_CPP_DIR] [--outtypes f32,f16,q8_0]

Both run as child processes on the same checkpoint and outtype; peak RSS is each child's own
(os.wait4). For f32 and f16 the two GGUFs must hold identical tensors (names, types, bytes).
Without --src it exports the embedded SmolLM2 to a bf16 checkpoint. Without --vendor it uses
vendor/llama.cpp from the llama-cpp-python sdist, fetched with `pip download` into a cache
folder. llama.cpp's script needs torch (in this project's test extra) and sentencepiece
(`pip install sentencepiece`), which it imports even for byte-level BPE models.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
SDIST_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llmcli-bench"
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"


def vendor_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    found = sorted(SDIST_CACHE.glob("llama_cpp_python-*/vendor/llama.cpp"))
    if found:
        return found[-1]
    SDIST_CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            ":all:",
            LLAMA_CPP_PYTHON,
            "-d",
            str(SDIST_CACHE),
        ],
        check=True,
    )
    with tarfile.open(next(SDIST_CACHE.glob("llama_cpp_python-*.tar.gz"))) as tar:
        tar.extractall(SDIST_CACHE, filter="data")
    return sorted(SDIST_CACHE.glob("llama_cpp_python-*/vendor/llama.cpp"))[-1]


def run(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one child process."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


def same_tensors(a: Path, b: Path) -> tuple[bool, str]:
    import gguf
    import numpy as np

    ta = {t.name: t for t in gguf.GGUFReader(str(a)).tensors}
    tb = {t.name: t for t in gguf.GGUFReader(str(b)).tensors}
    if ta.keys() != tb.keys():
        return False, f"names differ: {sorted(ta.keys() ^ tb.keys())[:5]}"
    for name, x in ta.items():
        y = tb[name]
        if x.tensor_type != y.tensor_type:
            return False, f"{name}: {x.tensor_type.name} vs {y.tensor_type.name}"
        if not np.array_equal(np.asarray(x.data).view(np.uint8), np.asarray(y.data).view(np.uint8)):
            return False, f"{name}: bytes differ"
    return True, f"{len(ta)} tensors identical"


def export_embedded(out: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.convert.fixtures import embedded_gguf

    from llmcli.convert.export_hf import export_gguf_to_hf

    export_gguf_to_hf(embedded_gguf(), out, "bf16")


def helper(*args: str) -> str:
    # Export and comparison run in children: a child forked from a parent holding a model counts
    # the parent's pages in its own peak RSS, which would hide the difference being measured.
    return subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def main() -> int:
    if sys.argv[1:2] == ["--export"]:
        export_embedded(Path(sys.argv[2]))
        return 0
    if sys.argv[1:2] == ["--compare"]:
        print(same_tensors(Path(sys.argv[2]), Path(sys.argv[3]))[1])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path)
    parser.add_argument("--vendor")
    parser.add_argument("--outtypes", default="f32,f16,q8_0")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="convert-bench-"))
    src = args.src
    if src is None:
        src = work / "SmolLM2-135M-Instruct"
        helper("--export", str(src))
    vendor = vendor_dir(args.vendor)
    print(f"checkpoint: {src} ({sum(f.stat().st_size for f in src.glob('*.safetensors')) / 1e6:,.0f} MB)")
    print(f"llama.cpp:  {vendor / 'convert_hf_to_gguf.py'}")
    print(
        f"{'outtype':<8} {'llmcli s':>9} {'llama.cpp s':>12} {'speedup':>8} {'llmcli MB':>10} "
        f"{'llama.cpp MB':>13} {'mem ratio':>10}  tensors"
    )
    for outtype in args.outtypes.split(","):
        ours, theirs = work / f"ours-{outtype}.gguf", work / f"theirs-{outtype}.gguf"
        t_ours, m_ours = run(
            [
                sys.executable,
                str(ROOT / "scripts/convert/hf_to_gguf.py"),
                str(src),
                "-o",
                str(ours),
                "--outtype",
                outtype,
            ]
        )
        t_theirs, m_theirs = run(
            [
                sys.executable,
                str(vendor / "convert_hf_to_gguf.py"),
                str(src),
                "--outfile",
                str(theirs),
                "--outtype",
                outtype,
            ],
            env={**os.environ, "PYTHONPATH": str(vendor / "gguf-py")},
        )
        check = helper("--compare", str(ours), str(theirs)) if outtype in ("f32", "f16") else "(not compared)"
        print(
            f"{outtype:<8} {t_ours:>9.2f} {t_theirs:>12.2f} {t_theirs / t_ours:>7.2f}x {m_ours:>10.0f} "
            f"{m_theirs:>13.0f} {m_theirs / m_ours:>9.2f}x  {check}"
        )
        ours.unlink()
        theirs.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
