#!/usr/bin/env bash
# glibc-check.sh BINARY [FLOOR]
# Fails, naming each symbol, when BINARY imports a glibc symbol version newer than FLOOR (default
# 2.17) or a private one, or needs a shared library that is not part of glibc.
set -euo pipefail
bin=${1:?usage: glibc-check.sh BINARY [FLOOR]}
floor=${2:-2.17}
command -v readelf >/dev/null || { echo "glibc-check.sh: readelf not found (binutils)" >&2; exit 1; }
bad=$(readelf --dyn-syms -W "$bin" | awk -v floor="$floor" '
    function vnum(v,   p) { split(v, p, "."); return p[1] * 10000 + p[2] * 100 + p[3] }
    $1 ~ /:$/ && NF >= 8 {
        n = $8; at = index(n, "@"); if (at == 0) next
        ver = substr(n, at + 1); sub(/^@/, "", ver)
        if (ver ~ /^GLIBC_PRIVATE/) { print "  " n; next }
        if (ver ~ /^GLIBC_[0-9]/ && vnum(substr(ver, 7)) > vnum(floor)) print "  " n
    }')
if [ -n "$bad" ]; then
    echo "$bin: needs glibc symbols newer than $floor:" >&2
    echo "$bad" >&2
    exit 1
fi
libs=$(readelf -d -W "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for l in $libs; do
    case $l in
        libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|ld-linux-x86-64.so.2) ;;
        *) echo "$bin: needs $l, which is not part of glibc" >&2; exit 1 ;;
    esac
done
