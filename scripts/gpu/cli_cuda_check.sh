#!/usr/bin/env bash
# On the GPU machine, from a checkout root: epk decompress / verify --device cuda against the CPU path, bit for bit.
# DIR holds epk and make_demo_model built with CUDA (e.g. strip -o DIR/epk build/default/tools/epk/epk).
C="${1:?usage: cli_cuda_check.sh DIR_WITH_epk_AND_make_demo_model}"
T=$(mktemp -d)
fail=0
nvidia-smi -L
$C/make_demo_model $T/m --layers 4 --hidden 512 > /dev/null
for bpp in 2 4 8; do
  $C/epk compress $T/m -o $T/m$bpp.epk --bpp $bpp --threads 8 | tail -1
  for d in bf16 fp16 fp32 fp8_e4m3; do
    $C/epk decompress $T/m$bpp.epk -o $T/g.st --dtype $d --device cuda > /dev/null || { echo "GPU decompress failed $bpp $d"; fail=1; }
    $C/epk decompress $T/m$bpp.epk -o $T/c.st --dtype $d --device cpu > /dev/null
    cmp -s $T/g.st $T/c.st && echo "bpp $bpp $d: GPU == CPU" || { echo "bpp $bpp $d: GPU != CPU"; fail=1; }
  done
done
$C/epk decompress $T/m4.epk -o $T/default.st
$C/epk verify $T/m4.epk --against $T/m --device cuda | tail -2
cp $T/m4.epk $T/bad.epk
off=$($C/epk inspect --json $T/bad.epk | python3 -c "
import json,sys; j=json.load(sys.stdin)
t=[t for t in j['tensors'] if t['name']=='model.layers.1.mlp.up_proj.weight'][0]
b=[b for b in t['buffers'] if b['name']=='payload'][0]; print(b['offset']+b['size']//2)")
printf '\xff' | dd of=$T/bad.epk bs=1 seek=$off conv=notrunc 2>/dev/null
$C/epk verify $T/bad.epk --device cuda | grep -v ' ok$'
$C/epk verify $T/bad.epk --device cuda > /dev/null 2>&1
rc=$?; echo "verify (cuda) of the corrupted file: exit $rc"; [ $rc = 1 ] || fail=1
$C/epk verify $T/bad.epk --device cpu | grep 'tile'
for f in tests/data/entropack/*.safetensors; do
  n=$(basename $f .safetensors)
  $C/epk import-entropack $f -o $T/v.epk > /dev/null
  $C/epk decompress $T/v.epk -o $T/vg.st --device cuda --dtype bf16 > /dev/null 2>$T/err || { echo "$n: GPU failed: $(cat $T/err)"; fail=1; continue; }
  $C/epk decompress $T/v.epk -o $T/vc.st --device cpu --dtype bf16 > /dev/null
  cmp -s $T/vg.st $T/vc.st && echo "$n: GPU == CPU (bf16)" || { echo "$n: GPU != CPU"; fail=1; }
done
echo "cli_cuda_check: $([ $fail = 0 ] && echo pass || echo FAIL)"
exit $fail
