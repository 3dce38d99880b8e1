# Sourced by scripts/gpu/prefill_run.sh and prefill70b_run.sh on the GPU machine, from the repository root, with
# `stage`, `out` and `py` set: puts on PYTHONPATH
# - the epk package, built from this tree as scripts/gpu/python_run.sh does, into /tmp/epk-prefill/pysite; kept
#   between calls while its sources are unchanged (a hash of the sources it compiles);
# - bitsandbytes for the nf4 setup, from a wheel in .whl/ or STAGE/wheels (scripts/gpu/trim_bnb_wheel.sh makes it),
#   installed with pip --no-deps into /tmp/epk-prefill/bnbsite once per wheel; without one the nf4 setup reports
#   "bitsandbytes absent";
# and defines the compress and decompress steps of both scripts' prepare() (below; they need EPK_CLI, out, stamp).
if [[ -z "${CUDA_HOME:-}" && ! -f /usr/local/cuda/include/cuda.h && -f "$stage/include/cuda.h" ]]; then
  export CUDA_HOME="$stage"
fi
pysite=/tmp/epk-prefill/pysite
src_hash="$(find client codec shm daemon cmake CMakeLists.txt -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \
  -o -name '*.cuh' -o -name '*.py' -o -name '*.pyi' -o -name '*.txt' -o -name '*.toml' -o -name '*.cmake' \) \
  -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
if [[ "$(cat "$pysite/.stamp" 2>/dev/null || true)" != "$src_hash" ]]; then
  t_pkg=$SECONDS
  rm -rf "$pysite"
  EPK_PY_CUDA=ON EPK_PY_CLIENT_DECODE=ON "$py" -m pip install --no-build-isolation --no-deps --no-index \
    --target "$pysite" -v ./client/python > "$out/pip_install.log" 2>&1 || { tail -40 "$out/pip_install.log"; exit 1; }
  echo "$src_hash" > "$pysite/.stamp"
  echo "== epk package built in $((SECONDS - t_pkg)) s"
else
  echo "== epk package: built earlier from the same sources ($pysite)"
fi
export PYTHONPATH="$pysite${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c 'import epk; assert epk.HAS_CUDA, "the package was built without device support"; print("epk", epk.__version__)'

bnb_wheel="$(ls .whl/bitsandbytes-*.whl "$stage"/wheels/bitsandbytes-*.whl 2>/dev/null | head -1 || true)"
if [[ -n "$bnb_wheel" ]]; then
  bnbsite=/tmp/epk-prefill/bnbsite
  if [[ "$(cat "$bnbsite/.stamp" 2>/dev/null || true)" != "$(basename "$bnb_wheel")" ]]; then
    rm -rf "$bnbsite"
    if "$py" -m pip install --no-deps --no-index --target "$bnbsite" "$bnb_wheel" > "$out/pip_bnb.log" 2>&1; then
      basename "$bnb_wheel" > "$bnbsite/.stamp"
    else
      echo "== bitsandbytes did not install (the nf4 setup will report it):"; tail -3 "$out/pip_bnb.log"
    fi
  fi
  export PYTHONPATH="$PYTHONPATH:$bnbsite"
  echo "== bitsandbytes: $(basename "$bnb_wheel")"
else
  echo "== bitsandbytes: no wheel in .whl/ or $stage/wheels (the nf4 setup will report it absent)"
fi

# The steps both scripts' prepare() take, each skipped when its output exists (a cut-off call is resumed):
# epk_compress_once SRC EPK: `epk compress SRC --bpp 4 --include-embeddings` into EPK (through EPK.partial, so a
# cut-off compress leaves nothing that looks done).
epk_compress_once() {
  local src="$1" epk="$2" t0=$SECONDS
  if [[ -f "$epk" ]]; then
    echo "== compress: $epk done earlier"
    return
  fi
  rm -f "$epk.partial"
  "$EPK_CLI" compress "$src" -o "$epk.partial" --bpp 4 --threads 16 --include-embeddings > "$out/compress.log" 2>&1 \
    || { tail -30 "$out/compress.log"; exit 1; }
  mv "$epk.partial" "$epk"
  tail -6 "$out/compress.log"
  echo "== compress: $((SECONDS - t0)) s ($(stamp)), $(du -h "$epk" | cut -f1)"
}
# epk_decompress_once EPK DIR CONFIG_STEP: `epk decompress EPK` on the GPU into DIR/model.safetensors, then
# CONFIG_STEP (a command that puts the model's config.json into DIR), then DIR/.complete.
epk_decompress_once() {
  local epk="$1" dir="$2" t0=$SECONDS
  shift 2
  if [[ -f "$dir/.complete" ]]; then
    echo "== decompress: $dir done earlier"
    return
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  "$EPK_CLI" decompress "$epk" -o "$dir/model.safetensors" --device cuda > "$out/decompress.log" 2>&1 \
    || { tail -30 "$out/decompress.log"; exit 1; }
  "$@"
  touch "$dir/.complete"
  tail -2 "$out/decompress.log"
  echo "== decompress: $((SECONDS - t0)) s ($(stamp))"
}
