# Sourced by scripts/build.sh and scripts/fuzz.sh: compile through ccache where it is installed (scripts/setup.sh
# installs it), with paths relative to the checkout, so clones in other folders share the cache.
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
fi
