#!/usr/bin/env bash
# glibc-stubs.sh OUTDIR [FLOOR] [CC]
#
# Writes link-time stand-ins for the C library into OUTDIR: for each of glibc's shared libraries
# (libc, libm, libpthread, libdl, librt, the loader) a stub with the same soname that exports every
# public symbol of the build machine's copy at the newest version not above FLOOR (default 2.17),
# as that version's default. Linking against OUTDIR instead of the real libraries binds every call to
# a version that a glibc of FLOOR already has, so the binary loads on any glibc from FLOOR on.
# A function that glibc FLOOR does not have is absent from the stubs: the link fails with
# "undefined reference to `name'", unless support/glibc-compat.c defines it.
#
# The symbol list comes from the build machine's own libraries (readelf), so any function the code
# calls is covered without a hand-kept list; only the version numbers are chosen here.
set -euo pipefail
out=${1:?usage: glibc-stubs.sh OUTDIR [FLOOR] [CC]}
floor=${2:-2.17}
cc=${3:-cc}
command -v readelf >/dev/null || { echo "glibc-stubs.sh: readelf not found (binutils)" >&2; exit 1; }

# Finds a library the way the compiler driver does; fails naming it when the driver cannot.
find_lib() {
    local p
    p=$("$cc" -print-file-name="$1")
    if [ "$p" = "$1" ] || [ ! -e "$p" ]; then
        for d in /lib64 /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib /usr/lib; do
            [ -e "$d/$1" ] && { echo "$d/$1"; return; }
        done
        echo "glibc-stubs.sh: $1: not found by $cc -print-file-name" >&2
        return 1
    fi
    echo "$p"
}

rm -rf "$out.tmp"
mkdir -p "$out.tmp"
for soname in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 ld-linux-x86-64.so.2; do
    real=$(find_lib "$soname")
    base=${soname%%.so*}
    readelf --dyn-syms -W "$real" | awk -v floor="$floor" -v asm="$out.tmp/$base.s" -v map="$out.tmp/$base.map" '
        function vnum(v,   p) { split(v, p, "."); return p[1] * 10000 + p[2] * 100 + p[3] }
        function num(s,   r, i) {  # readelf prints large sizes in hex; mawk has no strtonum
            if (s !~ /^0x/) return s + 0
            r = 0; for (i = 3; i <= length(s); i++) r = r * 16 + index("0123456789abcdef", tolower(substr(s, i, 1))) - 1
            return r
        }
        BEGIN { lim = vnum(floor) }
        # Num: Value Size Type Bind Vis Ndx Name@[@]VERSION
        $1 ~ /:$/ && NF >= 8 && $7 != "UND" && $7 != "ABS" && ($4 == "FUNC" || $4 == "IFUNC" || $4 == "OBJECT") {
            n = $8; at = index(n, "@"); if (at == 0) next
            name = substr(n, 1, at - 1); ver = substr(n, at + 1); sub(/^@/, "", ver)
            if (ver !~ /^GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?$/) next
            v = vnum(substr(ver, 7)); if (v > lim) next
            if (!(name in best) || v > best[name]) {
                best[name] = v; bver[name] = ver; btype[name] = ($4 == "OBJECT") ? "object" : "function"
                bsize[name] = num($3); bbind[name] = $5
            }
        }
        END {
            i = 0
            for (name in best) {
                s = "stub_" i++
                bindop = (bbind[name] == "WEAK") ? "weak" : "globl"  # the versioned name takes the label binding
                if (btype[name] == "object") {
                    printf "\t.data\n\t.balign 8\n\t.%s %s\n\t.type %s, @object\n\t.size %s, %d\n%s:\n\t.zero %d\n", bindop, s, s, s, bsize[name], s, (bsize[name] > 0 ? bsize[name] : 1) > asm
                } else {
                    printf "\t.text\n\t.%s %s\n\t.type %s, @function\n%s:\n\tud2\n", bindop, s, s, s > asm
                }
                printf "\t.symver %s, %s@@%s\n", s, name, bver[name] > asm
                used[bver[name]] = 1
            }
            if (i == 0) printf "\t.text\n" > asm
            # One version node per version named, each inheriting the one before (as glibc does);
            # the stub_N labels stay local.
            nv = 0
            for (ver in used) vers[++nv] = ver
            for (a = 1; a <= nv; a++) for (b = a + 1; b <= nv; b++)
                if (vnum(substr(vers[b], 7)) < vnum(substr(vers[a], 7))) { t = vers[a]; vers[a] = vers[b]; vers[b] = t }
            for (a = 1; a <= nv; a++)
                printf "%s {%s}%s;\n", vers[a], (a == 1 ? " local: stub_*; " : " "), (a > 1 ? " " vers[a - 1] : "") > map
            if (nv == 0) printf "{ local: stub_*; };\n" > map
        }'
    "$cc" -shared -nostdlib -Wl,-soname,"$soname" -Wl,--version-script="$out.tmp/$base.map" \
        -o "$out.tmp/$soname" "$out.tmp/$base.s"
done

# The names the linker looks for (-lc, -lm, -lpthread, ...). libc keeps libc_nonshared.a, whose
# atexit and pthread_atfork glibc has always linked statically into programs.
nonshared=$(find_lib libc_nonshared.a)
printf 'GROUP ( %s/libc.so.6 %s AS_NEEDED ( %s/ld-linux-x86-64.so.2 ) )\n' "$out" "$nonshared" "$out" > "$out.tmp/libc.so"
for l in libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1; do ln -s "$l" "$out.tmp/${l%%.so*}.so"; done
echo "$floor" > "$out.tmp/FLOOR"
rm -rf "$out"
mv "$out.tmp" "$out"
