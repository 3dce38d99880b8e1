# Sourced by scripts/gpu/prefill_run.sh and prefill70b_run.sh on the GPU machine, from the repository root, with
# `stage`, `out` and `py` set: puts on PYTHONPATH
# - the epk package, built from this tree as scripts/gpu/python_run.sh does, into /tmp/epk-prefill/pysite; kept
#   between calls while its sources are unchanged (a hash of the sources it compiles);
# - bitsandbytes for the nf4 setup, from a wheel in .whl/ or STAGE/wheels (scripts/gpu/trim_bnb_wheel.sh makes it),
#   installed with pip --no-deps into /tmp/epk-prefill/bnbsite once per wheel; without one the nf4 setup reports
#   "bitsandbytes absent".
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
