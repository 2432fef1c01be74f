#!/bin/sh
# Builds rawstack's BPF objects from rawstack.bpf.c, one per architecture
# (the source's few differences are macros on __TARGET_ARCH_*): `go
# generate ./platform/linux/ebpf` runs it, and .ci/run runs it into a
# temporary directory and compares, so the committed objects are always
# the ones their source gives. Flags are pinned and the debug info that
# names build paths is stripped (BTF, which CO-RE needs, stays), so the
# output is byte for byte the same on any machine with the same clang
# (Debian 12: clang 14).
# usage: build.sh [DIR]   (default: this script's directory), writes
# DIR/rawstack_x86_bpfel.o and DIR/rawstack_arm64_bpfel.o
set -eu
cd "$(dirname "$0")"
dir=${1:-.}
for arch in x86 arm64; do
	out="$dir/rawstack_${arch}_bpfel.o"
	clang -O2 -g -target bpf -D__TARGET_ARCH_$arch -I/usr/include -fdebug-prefix-map="$PWD"=. \
		-fno-ident -Wall -Werror -c rawstack.bpf.c -o "$out.tmp"
	llvm-strip -g "$out.tmp"
	mv "$out.tmp" "$out"
done
