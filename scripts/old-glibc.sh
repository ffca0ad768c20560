#!/usr/bin/env bash
# old-glibc.sh DIR
# Unpacks Debian 11's C library (glibc 2.31: libc6, and libvulkan1 for `bankml gpu`) into DIR for the
# tests that run ./bankml through an old glibc's own loader:
#   DIR/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path DIR/lib/x86_64-linux-gnu:DIR/usr/lib/x86_64-linux-gnu ./bankml ...
# Fetched with apt-get from Debian's archive through a private sources list and cache under DIR, so the
# machine's own apt setup is left as it is. Needs the network once; CI runs it from .ci/run.
set -euo pipefail
dir=${1:?usage: old-glibc.sh DIR}
suite=${OLD_GLIBC_SUITE:-bullseye}
mirror=${OLD_GLIBC_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || { echo "old-glibc.sh: $keyring: missing (apt-get install debian-archive-keyring)" >&2; exit 1; }
command -v apt-get >/dev/null || { echo "old-glibc.sh: apt-get not found" >&2; exit 1; }

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
apt="$dir/apt"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
: > "$apt/status"  # an empty package database: the download picks the old suite's version
echo "deb [signed-by=$keyring] $mirror $suite main" > "$apt/sources.list"
opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
      -o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/status" -o "Dir::Cache=$apt/cache" -o "APT::Architecture=amd64"
      -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root" -qq)
apt-get "${opts[@]}" update
(cd "$apt/debs" && apt-get "${opts[@]}" download libc6:amd64 libvulkan1:amd64)
for deb in "$apt/debs"/*.deb; do dpkg-deb -x "$deb" "$dir"; done
ld="$dir/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
[ -x "$ld" ] || { echo "old-glibc.sh: $ld: missing after unpacking" >&2; exit 1; }
rm -rf "$apt/lists" "$apt/cache"
"$ld" --library-path "$dir/lib/x86_64-linux-gnu" "$dir/lib/x86_64-linux-gnu/libc.so.6" | head -1
