#!/bin/sh
# Builds rawstack's BPF object from rawstack.bpf.c: `go generate
# ./platform/linux/ebpf` runs it, and .ci/run runs it into a temporary file and
# compares, so the committed object is always the one its source gives.
# Flags are pinned and the debug info that names build paths is stripped
# (BTF, which CO-RE needs, stays), so the output is byte for byte the same
# on any machine with the same clang (Debian 12: clang 14).
# usage: build.sh [OUT]   (default: rawstack_x86_bpfel.o next to this script)
set -eu
cd "$(dirname "$0")"
out=${1:-rawstack_x86_bpfel.o}
clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I/usr/include -fdebug-prefix-map="$PWD"=. \
	-fno-ident -Wall -Werror -c rawstack.bpf.c -o "$out.tmp"
llvm-strip -g "$out.tmp"
mv "$out.tmp" "$out"
