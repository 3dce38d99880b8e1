#!/usr/bin/env bash
# On the GPU machine: `epk compress` end to end of a safetensors folder, one or more epk binaries side by side,
# alternating (round r runs them in order, round r+1 in reverse), the output on tmpfs (/dev/shm) and on the machine's
# disk (/tmp), every tmpfs output `cmp`-ed against the first binary's; then the disk's and tmpfs's own write ceilings
# for a file of the output's size (dd). Ends in a table: per binary and place, the runs by compress's own clock, and
# the median.
#   bash scripts/gpu/compress_compare.sh OUT EPK [EPK...]     (from the checkout root there: it uses bench/prefill)
# EPK: stripped `epk` binaries staged here (scripts/gpu/encode_stage.sh DEST puts one in DEST/cli).
# MODEL (default /tmp/m8, made with bench/prefill/prefill_bench.py make-model --layers 32 when absent: the
# Llama-3-8B-shaped folder, ~40 s), ROUNDS (default 3), DEVICE (default cuda), BPP (default 4), DD (0: no ceilings).
set -uo pipefail
out="${1:?usage: compress_compare.sh OUT EPK [EPK...]}"
shift
bins=("$@")
((${#bins[@]} > 0)) || { echo "compress_compare: no epk binary given" >&2; exit 2; }
root="$(cd "$(dirname "$0")/../.." && pwd)"
model="${MODEL:-/tmp/m8}" rounds="${ROUNDS:-3}" device="${DEVICE:-cuda}" bpp="${BPP:-4}"
mkdir -p "$out"
if ! compgen -G "$model/*.safetensors" > /dev/null; then
  python3 "$root/bench/prefill/prefill_bench.py" make-model --out "$model" --layers 32 > "$out/make_model.log" 2>&1 ||
    { tail -5 "$out/make_model.log"; exit 1; }
fi
cat "$model"/*.safetensors > /dev/null  # the page cache warm, as after a download
TIMEFORMAT='%R %U %S'
results="$out/results.txt"
: > "$results"
run() {  # INDEX DIR: one compress; a line "index dir own wall user sys same" into results
  local i=$1 dir=$2 log="$out/compress_$1_$(basename "$2").log" t rc own same=-
  rm -f "$dir/o.epk"
  sync
  t=$({ time "${bins[$i]}" compress "$model" -o "$dir/o.epk" --bpp "$bpp" --device "$device" > "$log" 2>&1; } 2>&1)
  rc=$?
  own=$(tail -1 "$log" | grep -o '[0-9.]* s$' | cut -d' ' -f1)
  if ((rc != 0)) || [[ -z $own ]]; then
    echo "$i $dir failed $t - (exit $rc: $log)" | tee -a "$results"
    return
  fi
  if [[ $dir == /dev/shm ]]; then
    if [[ -f /dev/shm/first.epk ]]; then cmp -s /dev/shm/first.epk "$dir/o.epk" && same=same || same=DIFF
    else mv "$dir/o.epk" /dev/shm/first.epk; same=first; fi
  fi
  echo "$i $dir ${own:-failed} $t $same" | tee -a "$results"
}
echo "== warm-up (not counted)"
run 0 /dev/shm > /dev/null
: > "$results"
echo "== rounds: binary place own-clock-s wall-s user-s sys-s output"
for ((r = 0; r < rounds; r++)); do
  for dir in /dev/shm /tmp; do
    if ((r % 2 == 0)); then order=$(seq 0 $((${#bins[@]} - 1))); else order=$(seq $((${#bins[@]} - 1)) -1 0); fi
    for i in $order; do run "$i" "$dir"; done
  done
done
size=$(stat -c %s /dev/shm/first.epk 2>/dev/null || echo 0)
rm -f /dev/shm/first.epk /dev/shm/o.epk /tmp/o.epk
if [[ "${DD:-1}" != 0 && $size -gt 0 ]]; then
  echo "== write ceilings for $size bytes (dd, 64 MiB blocks)"
  blocks=$(((size + (64 << 20) - 1) >> 26)) quarter=$(((blocks + 3) / 4))
  ceiling() {  # LABEL COMMAND
    rm -f /tmp/zz* /dev/shm/zz*
    sync
    echo "dd $1: $({ time bash -c "$2"; } 2>&1 | cut -d' ' -f1) s"
  }
  ceiling "disk, one stream, O_DIRECT" "dd if=/dev/zero of=/tmp/zz bs=64M count=$blocks oflag=direct status=none"
  ceiling "disk, four files, O_DIRECT" "for i in 0 1 2 3; do dd if=/dev/zero of=/tmp/zz\$i bs=64M count=$quarter \
oflag=direct status=none & done; wait"
  ceiling "disk, one stream, fsync" "dd if=/dev/zero of=/tmp/zz bs=64M count=$blocks conv=fsync status=none"
  ceiling "tmpfs, one writer" "dd if=/dev/zero of=/dev/shm/zz bs=64M count=$blocks status=none"
  ceiling "tmpfs, four writers into one file" "for i in 0 1 2 3; do dd if=/dev/zero of=/dev/shm/zz bs=64M \
count=$quarter seek=\$((i * $quarter)) conv=notrunc status=none & done; wait"
  ceiling "tmpfs, four files" "for i in 0 1 2 3; do dd if=/dev/zero of=/dev/shm/zz\$i bs=64M count=$quarter \
status=none & done; wait"
  rm -f /tmp/zz* /dev/shm/zz*
fi
echo "== table (compress's own clock, seconds)"
for ((i = 0; i < ${#bins[@]}; i++)); do
  for dir in /dev/shm /tmp; do
    awk -v i="$i" -v d="$dir" '$1 == i && $2 == d && $3 != "failed" { print $3 }' "$results" | sort -n |
      awk -v name="${bins[$i]}" -v d="$dir" '{ v[++n] = $1; s = s sprintf(" %.2f", $1) }
        END { if (!n) { printf "%-40s %-9s no run\n", name, d; exit }
              m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
              printf "%-40s %-9s median %.2f of%s\n", name, d, m, s }'
  done
done
if grep -q " DIFF$" "$results"; then echo "outputs DIFFER between the binaries"; exit 1; fi
if grep -q " failed " "$results"; then echo "a compress failed (its log is named above)"; exit 1; fi
exit 0
