#!/usr/bin/env bash
# Builds the fio engine (cmd/zonefleet-fio) as a shared object, against the
# headers of the fio installed here: fio has no -dev package, so the
# headers come from Debian's source package of the same version
# (apt-get source, which needs a deb-src entry; .ci/run adds one), and
# config-host.h from fio's own configure, run once and cached.
#
#   bench/fio/build-engine.sh [OUT]       (make fio-engine; OUT: bin/zonefleet-fio.so)
#
# FIO_SRC names an unpacked fio source tree to use instead (its version must
# be the installed fio's: the engine ABI, FIO_IOOPS_VERSION, and the layout
# of struct thread_data follow the version).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bin/zonefleet-fio.so}
command -v fio >/dev/null || { echo "build-engine: fio is not installed (apt-get install fio)" >&2; exit 1; }
version=$(fio --version | sed 's/^fio-//')
cache=.cache/fio
src=${FIO_SRC:-$cache/fio-$version}
if [ ! -f "$src/fio.h" ]; then
  deb=$(dpkg-query -W -f='${Version}' fio 2>/dev/null || true)
  [ -n "$deb" ] || { echo "build-engine: fio is not a Debian package here: give FIO_SRC (fio-$version sources)" >&2; exit 1; }
  mkdir -p "$cache"
  echo "build-engine: fetching the sources of fio $deb (apt-get source)"
  if ! (cd "$cache" && apt-get source --download-only -qq "fio=$deb" >/dev/null); then
    echo "build-engine: apt-get source failed: add a deb-src entry for this suite (see .ci/run)" >&2
    exit 1
  fi
  tar -C "$cache" -xzf "$cache/fio_${version}.orig.tar.gz"
fi
if [ ! -f "$src/config-host.h" ]; then
  echo "build-engine: configuring fio's headers ($src/configure --disable-native)"
  (cd "$src" && ./configure --disable-native >/dev/null)
fi
mkdir -p "$(dirname "$out")"
abs=$(cd "$src" && pwd)
CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -I$abs -D_GNU_SOURCE -include $abs/config-host.h -D_LARGEFILE_SOURCE -D_FILE_OFFSET_BITS=64 -DFIO_INTERNAL -DFIO_INC_DEBUG" \
  go build -tags fioengine -buildmode=c-shared -trimpath -ldflags '-s -w' -o "$out" ./cmd/zonefleet-fio
rm -f "${out%.so}.h"
echo "build-engine: $out (fio $version, engine ABI $(grep -m1 -o 'FIO_IOOPS_VERSION[[:space:]]*[0-9]*' "$src/ioengines.h" | awk '{print $2}'))"
