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
# usage: build.sh [OUT]   (default: librawstack-alloc.so next to this script)
set -eu
case ${1:-} in
"") out=$(cd "$(dirname "$0")" && pwd)/librawstack-alloc.so ;;
/*) out=$1 ;;
*) out=$PWD/$1 ;;
esac
cd "$(dirname "$0")"
clang -O2 -fPIC -shared -fvisibility=hidden -ftls-model=initial-exec -fno-builtin \
	-fno-omit-frame-pointer -fno-stack-protector -fno-ident -fdebug-prefix-map="$PWD"=. \
	-Wl,-soname,librawstack-alloc.so -Wl,--build-id=sha1 -Wl,-z,now -Wl,--hash-style=both \
	-Wall -Werror -o "$out.tmp" shim.c
llvm-strip --strip-debug --discard-all "$out.tmp"
mv "$out.tmp" "$out"
