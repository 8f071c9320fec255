#!/usr/bin/env bash
# slow: run.sh starts it first (30 s or more)
# The Debian package: `make deb`'s script builds it from a clean copy of
# the tree (release flags, no unit tests: make check runs those); its
# contents are checked with dpkg-deb -c; it is extracted into a scratch
# root, whose blockd and blockctl print the project's version; lintian
# finds no error or warning; the man pages render without a groff warning
# and name every flag of blockd --help (blockd.conf(5) as keys) and every
# blockctl command; the bash completion completes commands and options;
# the installed unit passes systemd-analyze verify and scores <= 3.0 in
# systemd-analyze security.
. "$(dirname "$0")/lib.sh"
# The package is built from the tree, not from $BUILD: make check leaves
# it out of its second pass (the ASan daemon), so that it is built once.
need dpkg-buildpackage dh dpkg-deb lintian scdoc man systemd-analyze
repo=$(cd "$(dirname "$0")/../.." && pwd)
version=$(sed -n "s/^ *version : '\([^']*\)'.*/\1/p" "$repo/meson.build" | head -1)
[ -n "$version" ] || fail "no version in meson.build"

# 1. Build (the same script as make deb), into the test's directory.
DEB_BUILD_OPTIONS="nocheck noautodbgsym" JOBS=2 "$repo/scripts/make-deb.sh" "$TMP/deb" >"$TMP/build.log" 2>&1 ||
    { tail -n 40 "$TMP/build.log" >&2; fail "make-deb.sh failed"; }
deb=$(ls "$TMP"/deb/blockd_*.deb)
[ -f "$deb" ] || fail "no blockd_*.deb built"
case $(basename "$deb") in blockd_"$version"_*.deb) ;; *) fail "package $(basename "$deb") is not version $version" ;; esac

# 2. Contents.
dpkg-deb -c "$deb" | awk '{print $NF}' | sed 's|^\./|/|' >"$TMP/contents"
for f in /usr/sbin/blockd /usr/bin/blockctl /etc/blockd/blockd.conf \
    /lib/systemd/system/blockd.service /usr/share/bash-completion/completions/blockctl \
    /usr/share/man/man8/blockd.8.gz /usr/share/man/man8/blockctl.8.gz \
    /usr/share/man/man5/blockd.conf.5.gz /usr/share/doc/blockd/copyright; do
    grep -qx "$f" "$TMP/contents" || fail "package lacks $f"
done
# (outputs are captured before grep -q: under pipefail, grep -q closing the
# pipe early makes the writer die of SIGPIPE and the pipeline fail)
conffiles=$(dpkg-deb -I "$deb" conffiles)
grep -qx /etc/blockd/blockd.conf <<<"$conffiles" ||
    fail "/etc/blockd/blockd.conf is not a conffile"
postinst=$(dpkg-deb -I "$deb" postinst)
grep -q "blockd.service" <<<"$postinst" ||
    fail "postinst does not enable blockd.service (dh_installsystemd)"

# 3. The installed programs run.
root=$TMP/root
dpkg-deb -x "$deb" "$root"
out=$("$root/usr/sbin/blockd" --version) || fail "installed blockd --version failed"
[ "$out" = "blockd $version" ] || fail "blockd --version printed '$out'"
out=$("$root/usr/bin/blockctl" --version) || fail "installed blockctl --version failed"
[ "$out" = "blockctl $version" ] || fail "blockctl --version printed '$out'"
help=$("$root/usr/sbin/blockd" --help)
grep -q "/etc/blockd/blockd.conf" <<<"$help" ||
    fail "the packaged blockd does not default to /etc/blockd/blockd.conf"

# 4. lintian: no error, no warning (overrides, if any, say why in debian/).
lintian --fail-on error,warning "$TMP"/deb/blockd_*.changes >"$TMP/lintian.log" 2>&1 ||
    { cat "$TMP/lintian.log" >&2; fail "lintian found errors or warnings"; }

# 5. Man pages: no groff warning; every flag and command documented.
man_text() { MANWIDTH=200 man -l "$1" 2>/dev/null | col -b; }
for p in man8/blockd.8 man8/blockctl.8 man5/blockd.conf.5; do
    w=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$root/usr/share/man/$p.gz" 2>&1 >/dev/null)
    [ -z "$w" ] || fail "man --warnings $p: $w"
done
man_text "$root/usr/share/man/man8/blockd.8.gz" >"$TMP/blockd.8.txt"
man_text "$root/usr/share/man/man5/blockd.conf.5.gz" >"$TMP/blockd.conf.5.txt"
man_text "$root/usr/share/man/man8/blockctl.8.gz" >"$TMP/blockctl.8.txt"
flags=$("$root/usr/sbin/blockd" --help | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u)
[ "$(echo "$flags" | wc -l)" -ge 10 ] || fail "blockd --help lists too few flags: $flags"
for f in $flags; do
    grep -qF -- "$f" "$TMP/blockd.8.txt" || fail "blockd(8) does not document $f"
    case $f in --help | --version | --config) continue ;; esac
    key=$(echo "${f#--}" | tr - _)
    grep -qE "^ *$key = " "$TMP/blockd.conf.5.txt" || fail "blockd.conf(5) has no key $key (for $f)"
done
ncmd=0
while read -r cmd; do
    grep -qF -- "$cmd" "$TMP/blockctl.8.txt" || fail "blockctl(8) does not document '$cmd'"
    ncmd=$((ncmd + 1))
done < <("$root/usr/bin/blockctl" --help | sed -n 's/^  blockctl //p' |
    awk '{s=""; for (i=1;i<=NF;i++) { if ($i !~ /^[a-z][a-z0-9-]*$/) break; s=s (s?" ":"") $i } print s}')
[ "$ncmd" -ge 20 ] || fail "blockctl --help lists only $ncmd commands"

# 6. Bash completion, against the installed blockctl.
comp() {
    bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _blockctl; echo "${COMPREPLY[*]}"' \
        _ "$root/usr/share/bash-completion/completions/blockctl" "$root/usr/bin/blockctl" "$@"
}
top=$("$root/usr/bin/blockctl" --help | sed -n 's/^  blockctl \([a-z][a-z0-9-]*\).*/\1/p' | sort -u | tr '\n' ' ')
[ "$(comp "") " = "$top" ] || fail "top-level completion: '$(comp "")', commands: '$top'"
grep -qw volume <<<"$top" || fail "no volume among the top-level commands: $top"
[ "$(comp share "")" = "iscsi nbd nvme" ] || fail "share completion: '$(comp share "")'"
[ "$(comp --json share nbd c)" = "create" ] || fail "share nbd c completion: '$(comp --json share nbd c)'"
compl=$(comp volume create demo/x --s)
grep -qw -- --size <<<"$compl" || fail "volume create options: '$(comp volume create demo/x --s)'"
[ "$(comp help volume res)" = "resize" ] || fail "help completion: '$(comp help volume res)'"

# 7. The installed unit: verify (with the extracted binary and man pages)
# and its sandboxing score.
sed "s|/usr/sbin/blockd|$root/usr/sbin/blockd|" "$root/lib/systemd/system/blockd.service" \
    >"$TMP/blockd.service"
MANPATH=$root/usr/share/man systemd-analyze verify "$TMP/blockd.service" >"$TMP/verify.log" 2>&1 ||
    { cat "$TMP/verify.log" >&2; fail "systemd-analyze verify failed"; }
[ ! -s "$TMP/verify.log" ] || { cat "$TMP/verify.log" >&2; fail "systemd-analyze verify warned"; }
score=$(systemd-analyze security --offline=true "$TMP/blockd.service" 2>&1 |
    sed -n 's/.*Overall exposure level for blockd.service: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || fail "no exposure score from systemd-analyze security"
awk -v s="$score" 'BEGIN { exit !(s <= 3.0) }' || fail "exposure score $score > 3.0"
pass "$(basename "$deb"), lintian clean, exposure $score"
