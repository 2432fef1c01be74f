#!/bin/sh
# Builds the allocation sampler that record --alloc preloads into a
# launched program, from shim.c: `go generate ./platform/linux/allocshim`
# runs it, and TestObjectCurrent builds it into a temporary file and
# compares, so the committed object is always the one its source gives.
# Flags are pinned, with no build paths and no compiler identification
# in the output, so it is byte for byte the same on any machine with the
# same clang, linker and C library (Debian 12: clang 14, binutils 2.40,
# glibc 2.36).
# Linked by GNU ld, not lld: with lld's layout (the text segment's virtual
# address 4 KiB past its file offset) rawstack's DWARF unwinder found no
# CFI for the sampler's frames and dropped the caller of the marker.
# Local symbols are discarded (--discard-all): malloc and its hidden
# alias s_malloc share an address, and a symbolizer must name it malloc.
# The arm64 object (librawstack-alloc-arm64.so) is built by the same
# clang for --target=aarch64-linux-gnu against Debian's cross C library
# (libc6-dev-arm64-cross) and linked by its GNU ld (binutils-aarch64-linux-gnu).
# usage: build.sh [OUT [OUT_ARM64]]   (default: both objects next to this script)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
abs() {
	case $1 in
	/*) echo "$1" ;;
	*) echo "$PWD/$1" ;;
	esac
}
out=$(abs "${1:-$here/librawstack-alloc.so}")
out_arm64=$(abs "${2:-$here/librawstack-alloc-arm64.so}")
cd "$here"
build() { # TARGET OUT
	clang --target="$1" -O2 -fPIC -shared -fvisibility=hidden -ftls-model=initial-exec -fno-builtin \
		-fno-omit-frame-pointer -fno-stack-protector -fno-ident -fdebug-prefix-map="$PWD"=. \
		-Wl,-soname,librawstack-alloc.so -Wl,--build-id=sha1 -Wl,-z,now -Wl,--hash-style=both \
		-Wall -Werror -o "$2.tmp" shim.c
	llvm-strip --strip-debug --discard-all "$2.tmp"
	mv "$2.tmp" "$2"
}
build x86_64-linux-gnu "$out"
build aarch64-linux-gnu "$out_arm64"
