#!/usr/bin/env bash
# Here (the build machine): copies what scripts/gpu/multigpu_check.sh needs into DEST (default: the main checkout's
# .mgpu/, ignored there): epkd, the test client, the epk CLI, the device integration tests (one device and several)
# and libtomlplusplus (the device image may lack it), stripped.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="${1:-/work/main/.mgpu}"
build="${EPK_BUILD_DIR:-$root/build/default}"
rm -rf "$dest"
mkdir -p "$dest/epkd/lib" "$dest/cli"
for b in daemon/epkd tests/client/epk_test_client tests/daemon/epkd_gpu_test tests/daemon/epkd_multigpu_test; do
  strip -o "$dest/epkd/$(basename "$b")" "$build/$b"
done
strip -o "$dest/cli/epk" "$build/tools/epk/epk"
cp -L "$(ldd "$build/daemon/epkd" | awk '/libtomlplusplus/ {print $3}')" "$dest/epkd/lib/"
cp "$root/scripts/gpu/multigpu_check.sh" "$dest/"
du -sh "$dest"
