#!/usr/bin/env bash
# Build native llama-bench from the very llama.cpp that our llama-cpp-python wheel was built from,
# so a "native vs llmcli" ratio compares the same kernels, not two llama.cpp versions.
#
#   benchmarks/build_native.sh        -> builds (once) and prints the llama-bench path on stdout
#   benchmarks/build_native.sh --batched
#                                     -> the same for llama-batched-bench (B sequences decoded together)
#   benchmarks/build_native.sh --server
#                                     -> the same for llama-server (the serve benchmarks' native side)
#   benchmarks/build_native.sh --callgrind
#                                     -> builds (once) llama.cpp's shared libraries without AVX-512
#                                        (valgrind cannot run AVX-512 code) and prints their directory,
#                                        for LLAMA_CPP_LIB_PATH in benchmarks/decode_overhead.py
#
# Idempotent: the sdist is downloaded once, cmake configures once, and a finished binary is
# reused as is. Everything lives in benchmarks/.native/ (gitignored; never commit it).
# Progress goes to stderr so that `LLAMA_BENCH=$(benchmarks/build_native.sh)` works.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
NATIVE="$HERE/.native"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-2}"

# The version pinned in pyproject.toml: the native side must match the Python side.
VERSION="${LLAMA_CPP_PYTHON_VERSION:-$(grep -o 'llama-cpp-python==[0-9][0-9.]*' "$REPO/pyproject.toml" | head -1 | cut -d= -f3)}"
if [ -z "$VERSION" ]; then
    echo "build_native: cannot find the llama-cpp-python pin in pyproject.toml; set LLAMA_CPP_PYTHON_VERSION" >&2
    exit 2
fi

SDIST_DIR="$NATIVE/sdist"
SRC="$NATIVE/src/llama_cpp_python-$VERSION"
BUILD="$NATIVE/build-$VERSION"
TARGET="llama-bench"

log() { echo "build_native: $*" >&2; }

MODE="${1:-}"
if [ "$MODE" = "--batched" ]; then
    TARGET="llama-batched-bench"
elif [ "$MODE" = "--server" ]; then
    TARGET="llama-server"
fi
BIN="$BUILD/bin/$TARGET"
if [ "$MODE" = "--callgrind" ]; then
    BUILD="$NATIVE/build-callgrind"
    BIN="$BUILD/bin/libllama.so"
fi

if [ -x "$BIN" ]; then
    echo "$BIN" | sed 's#/libllama.so$##'
    exit 0
fi

mkdir -p "$SDIST_DIR" "$NATIVE/src"
TARBALL="$SDIST_DIR/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$TARBALL" ]; then
    log "downloading the llama-cpp-python $VERSION source distribution"
    "$PYTHON" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$SDIST_DIR" >&2
fi

if [ ! -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ]; then
    log "unpacking $TARBALL"
    rm -rf "$SRC.partial" && mkdir -p "$SRC.partial"
    tar -xzf "$TARBALL" -C "$SRC.partial" --strip-components=1
    mv "$SRC.partial" "$SRC"
fi

if [ "$MODE" = "--callgrind" ]; then
    if [ ! -f "$BUILD/CMakeCache.txt" ]; then
        log "configuring shared libraries for valgrind (AVX2, no AVX-512, Release)"
        cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
            -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF -DGGML_CUDA=OFF >&2
    fi
    log "building libllama with -j$JOBS"
    cmake --build "$BUILD" --config Release --target llama -j"$JOBS" >&2
    [ -f "$BIN" ] || { log "the build finished but $BIN is missing"; exit 1; }
    dirname "$BIN"
    exit 0
fi

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    log "configuring (CPU only, -march=native, Release)"
    # The same switches as the wheel's build where they matter for speed (native CPU features,
    # OpenMP, shared ggml), and nothing we do not need (curl, tests, server, examples).
    cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" \
        -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_TOOLS=ON \
        -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF >&2
fi
if [ "$MODE" = "--server" ] && ! grep -q '^LLAMA_BUILD_SERVER:BOOL=ON' "$BUILD/CMakeCache.txt"; then
    # The same build directory (and so the same objects) as llama-bench: only the server's target is
    # added to the configuration; what is already built is reused.
    log "adding llama-server to the configuration"
    cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" -DLLAMA_BUILD_SERVER=ON >&2
fi

log "building $TARGET with -j$JOBS (a few minutes on 2 cores)"
cmake --build "$BUILD" --config Release --target "$TARGET" -j"$JOBS" >&2

if [ ! -x "$BIN" ]; then
    log "the build finished but $BIN is missing"
    exit 1
fi
echo "$BIN"
