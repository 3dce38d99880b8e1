# Sourced by the device-side run scripts (latency_run, uncached_run, uncached_matrix, rtt_compare) after they set
# `default_out` and `default_limit`, with their own arguments: BIN (the staged epkd folder) and [OUT].
# Sets bin, out (created), limit (LIMIT seconds), puts BIN/lib on LD_LIBRARY_PATH, defines left() (seconds left of
# LIMIT) and machine() (the date, cores, load, CPU model and GPUs, for the top of a log).
bin="$1"
out="${2:-${OUT:-$default_out}}"
limit="${LIMIT:-$default_limit}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
left() { echo $((limit - SECONDS)); }
machine() {
  date -u
  echo "nproc $(nproc); $(uptime)"
  lscpu | grep -E 'Model name|Socket' | head -2
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader 2>&1 | head -2
  fi
}
