#!/usr/bin/env bash
# make deb: build the Debian package from a clean copy of this tree (the
# files git knows, as they are in the working tree, not the build dirs), in
# OUT (default build-deb/). dpkg-buildpackage writes its results next to
# the source directory, so the copy lives in OUT/src/ and nothing is
# written to this checkout or its parent; the .deb, .buildinfo and
# .changes end up in OUT/.
#   scripts/make-deb.sh [OUT]     extra dpkg-buildpackage flags in $DEB_FLAGS,
#   $DEB_BUILD_OPTIONS as usual (nocheck skips the unit tests), $JOBS (default nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(mkdir -p "${1:-build-deb}" && cd "${1:-build-deb}" && pwd)
version=$(dpkg-parsechangelog -S Version)
src=$OUT/src/blockd-$version
rm -rf "$OUT/src" "$OUT"/*.deb "$OUT"/*.buildinfo "$OUT"/*.changes
mkdir -p "$src"
# Tracked and new (not ignored) files: what a commit of this tree would hold.
git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -xf - -C "$src"
cd "$src"
# dh builds with -j1 unless told otherwise.
export DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:-} parallel=${JOBS:-$(nproc)}"
# shellcheck disable=SC2086
dpkg-buildpackage -b -us -uc ${DEB_FLAGS:-}
mv "$OUT"/src/*.deb "$OUT"/src/*.buildinfo "$OUT"/src/*.changes "$OUT"/
rm -rf "$OUT/src"
ls "$OUT"/blockd_*.deb
