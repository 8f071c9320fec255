#!/usr/bin/env bash
# Run every integration test (tests/integration/t-*.sh) and print a summary.
#
#   run.sh [PATTERN]...
#       one pass against $BUILD (IT_SKIP: names to leave out)
#   run.sh --pass NAME [--build DIR] [--skip "t-a t-b"] [--env VAR=VALUE]... \
#          [--after FILE] [--pass NAME ...]... [PATTERN]...
#       several passes (make check: the default build, then the ASan one)
#       run as one pool of jobs, so that neither waits for the other's
#       slowest test; each pass has its own build, tests left out and
#       environment. --after FILE: the pass's tests start once FILE exists
#       (make check's ASan build is still compiling while the default
#       pass runs); FILE.failed instead fails them all at once.
# PATTERNs filter test names (a test runs if its name contains one).
#
# Tests run IT_JOBS at a time (default 2): most of their time is spent
# waiting (timeouts, throttles, clients starting), and each test runs its
# own daemon on free ports in its own temporary directory. A test whose
# file has a line "# run-alone" (it measures latency or memory) runs after
# the others, by itself. Tests left out are each said on a line of their
# own ("skip ..."). Tests with a line "# slow" (30 s or more) start first,
# so that the long ones do not end up alone at the tail.
#
# One throwaway Ceph cluster (scripts/ceph-cluster.sh) serves every test
# that calls ceph_start (lib.sh), each in a RADOS pool of its own; it is
# started here in the background, only if such a test is selected, and
# stopped at the end. IT_CEPH_SHARED=0 gives every test its own cluster.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
JOBS=${IT_JOBS:-2}
# Per-run log directory, so that runs from several checkouts do not clash.
LOGDIR=${LOGDIR:-$(mktemp -d /tmp/blockd-it-logs.XXXXXX)}
mkdir -p "$LOGDIR" || exit 2

# ---- passes: name, build, skip list, environment
passes=()
declare -A P_BUILD=() P_SKIP=() P_ENV=() P_AFTER=()
patterns=()
while [ $# -gt 0 ]; do
    case $1 in
    --pass)
        passes+=("$2")
        P_BUILD[$2]=${BUILD:-$repo/build} P_SKIP[$2]= P_ENV[$2]= P_AFTER[$2]=
        shift 2
        ;;
    --build | --skip | --env | --after)
        [ ${#passes[@]} -gt 0 ] || { echo "run.sh: $1 before --pass" >&2; exit 2; }
        cur=${passes[-1]}
        case $1 in
        --build) P_BUILD[$cur]=$2 ;;
        --skip) P_SKIP[$cur]="${P_SKIP[$cur]} $2" ;;
        --env) P_ENV[$cur]="${P_ENV[$cur]}$2"$'\n' ;;
        --after) P_AFTER[$cur]=$2 ;;
        esac
        shift 2
        ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) patterns+=("$1"); shift ;;
    esac
done
if [ ${#passes[@]} = 0 ]; then
    passes=(default)
    P_BUILD[default]=${BUILD:-$repo/build} P_SKIP[default]=${IT_SKIP:-} P_ENV[default]= P_AFTER[default]=
fi
multi=0
[ ${#passes[@]} -gt 1 ] && multi=1

# ---- the jobs ("pass name" pairs): slow ones first, then the rest, the
# run-alone ones at the end. Within a group the passes alternate (the last
# pass, the slower ASan one in make check, first), and so do the tests on
# the shared Ceph cluster with the others: its one OSD serves a few tests
# at a time, and the first tests run while it starts.
slow=(); slow_c=(); rest=(); rest_c=(); alone=()
needs_ceph=0
for t in "$here"/t-*.sh; do
    name=$(basename "$t" .sh)
    if [ ${#patterns[@]} -gt 0 ]; then
        hit=0
        for pat in "${patterns[@]}"; do [[ "$name" == *"$pat"* ]] && hit=1; done
        [ $hit = 1 ] || continue
    fi
    c= shared=
    grep -q '^[^#]*ceph_start' "$t" && c=_c
    grep -Eq '^[^#]*ceph_start *($|[;&|)])' "$t" && shared=1
    for ((i = ${#passes[@]} - 1; i >= 0; i--)); do
        p=${passes[$i]}
        if [[ " ${P_SKIP[$p]} " == *" $name "* ]]; then
            [ $multi = 1 ] && echo "skip $name [$p] (not in this pass)" || echo "skip $name (IT_SKIP)"
            continue
        fi
        [ -n "$shared" ] && needs_ceph=1
        if grep -q '^# run-alone' "$t"; then
            alone+=("$p $name")
        elif grep -q '^# slow' "$t"; then
            eval "slow$c+=(\"\$p \$name\")"
        else
            eval "rest$c+=(\"\$p \$name\")"
        fi
    done
done
jobs_list=()
interleave() { # A[0] B[0] A[1] B[1] ... of two arrays named $1 and $2
    local -n a=$1 b=$2
    local k n=$((${#a[@]} > ${#b[@]} ? ${#a[@]} : ${#b[@]}))
    for ((k = 0; k < n; k++)); do
        [ $k -lt ${#a[@]} ] && jobs_list+=("${a[$k]}")
        [ $k -lt ${#b[@]} ] && jobs_list+=("${b[$k]}")
    done
    return 0
}
interleave slow slow_c
interleave rest rest_c

# ---- the shared Ceph cluster, started while the first tests run
CEPH_SHARED_DIR=
stop_ceph() {
    [ -n "$CEPH_SHARED_DIR" ] || return 0
    "$repo/scripts/ceph-cluster.sh" stop "$CEPH_SHARED_DIR" >/dev/null 2>&1
    # Its logs stay with the tests' logs; the rest goes.
    mkdir -p "$LOGDIR/ceph"
    cp -a "$CEPH_SHARED_DIR/log" "$CEPH_SHARED_DIR/ceph.conf" "$LOGDIR/ceph/" 2>/dev/null
    [ "$CEPH_SHARED_DIR" = "$LOGDIR/ceph" ] || rm -rf "$CEPH_SHARED_DIR"
    CEPH_SHARED_DIR=
}
if [ "$needs_ceph" = 1 ] && [ "${IT_CEPH_SHARED:-1}" != 0 ]; then
    # On tmpfs when there is one: the monitor syncs its store at every map
    # change (each test's pool), which a loaded disk delays by seconds.
    CEPH_SHARED_DIR=$(mktemp -d /dev/shm/blockd-it-ceph.XXXXXX 2>/dev/null) || CEPH_SHARED_DIR=$LOGDIR/ceph
    mkdir -p "$CEPH_SHARED_DIR"
    (
        # Every test's pool is deleted when the test ends; the memory store
        # holds what the tests running at the same time write. No pool is
        # called rbd here: a test that names it instead of $CEPH_POOL fails.
        if CEPH_MEM_BYTES=${IT_CEPH_MEM_BYTES:-8589934592} CEPH_POOL=it-unused \
            "$repo/scripts/ceph-cluster.sh" start \
            "$CEPH_SHARED_DIR" >"$LOGDIR/ceph.start.log" 2>&1; then
            touch "$CEPH_SHARED_DIR/ready"
        else
            touch "$CEPH_SHARED_DIR/failed"
        fi
    ) </dev/null 3>&- &
    export BLOCKD_IT_CEPH=$CEPH_SHARED_DIR BLOCKD_IT_CEPH_LOG=$LOGDIR/ceph.start.log
    trap 'exit 130' INT TERM
    # Killed with SIGKILL (a CI timeout): a watcher stops the cluster.
    me=$$
    (
        while kill -0 "$me" 2>/dev/null; do sleep 2; done
        "$repo/scripts/ceph-cluster.sh" stop "$CEPH_SHARED_DIR"
        [ "$CEPH_SHARED_DIR" = "$LOGDIR/ceph" ] || rm -rf "$CEPH_SHARED_DIR"
    ) </dev/null >/dev/null 2>&1 3>&- &
fi

# ---- the tests' scratch directories (lib.sh's $TMP: state, DB, pools)
# go on a tmpfs mounted for this run under /tmp when run as root (IT_TMP
# overrides; /dev/shm would not do: pools may not live under /dev): on a
# disk whose cache flush takes 0.4-0.9 s, as measured on CI's kind of
# machine, every test's DB commits and volume flushes queue behind the
# other tests' flushes, which made make check take more than twice as long
# as on a disk that flushes in microseconds (the code under test makes the
# same fdatasync calls either way). A test with a line "# disk" keeps a
# directory on the real disk (/tmp): it is about a disk filesystem.
IT_TMP=${IT_TMP:-}
IT_TMPFS=
umount_tmpfs() {
    [ -n "$IT_TMPFS" ] || return 0
    # What is left are failed tests' files (lib.sh keeps them): onto the
    # disk with the logs, so that "(test files kept in ...)" still helps.
    if [ -n "$(ls -A "$IT_TMPFS" 2>/dev/null)" ]; then
        mkdir -p "$LOGDIR/kept" && cp -a --sparse=always "$IT_TMPFS"/. "$LOGDIR/kept/" 2>/dev/null &&
            echo "(the failed tests' files, kept in $IT_TMPFS, are now in $LOGDIR/kept)"
    fi
    umount "$IT_TMPFS" 2>/dev/null || umount -l "$IT_TMPFS" 2>/dev/null
    rmdir "$IT_TMPFS" 2>/dev/null
    IT_TMPFS=
}
if [ -z "$IT_TMP" ] && [ "$(id -u)" = 0 ]; then
    IT_TMPFS=$(mktemp -d /tmp/blockd-it-tmpfs.XXXXXX)
    if mount -t tmpfs -o size=12g,mode=0700 blockd-it "$IT_TMPFS" 2>/dev/null; then
        IT_TMP=$IT_TMPFS
        # Killed with SIGKILL (a CI timeout): a watcher unmounts it.
        me=$$ dir=$IT_TMPFS
        (
            while kill -0 "$me" 2>/dev/null; do sleep 2; done
            umount "$dir" 2>/dev/null || umount -l "$dir" 2>/dev/null
            rmdir "$dir" 2>/dev/null
        ) </dev/null >/dev/null 2>&1 3>&- &
    else
        echo "(no tmpfs could be mounted at $IT_TMPFS: test directories on the disk)"
        rmdir "$IT_TMPFS"
        IT_TMPFS=
    fi
fi
IT_TMP=${IT_TMP:-/tmp}
echo "(test directories in $IT_TMP; tests marked '# disk' in /tmp)"

trap 'stop_ceph; umount_tmpfs' EXIT
trap 'exit 130' INT TERM

# ---- one test of one pass: its log, then a status file "<rc> <seconds>"
run_one() {
    local p=$1 name=$2 start rc tmp=$IT_TMP
    start=$(date +%s)
    grep -q '^# disk' "$here/$name.sh" && tmp=/tmp
    (
        while IFS= read -r kv; do
            [ -n "$kv" ] && export "${kv?}"
        done <<<"${P_ENV[$p]}"
        BLOCKD_TEST_TMP=$tmp BUILD=${P_BUILD[$p]} exec bash "$here/$name.sh"
    ) >"$LOGDIR/$p.$name.log" 2>&1 </dev/null
    rc=$?
    echo "$rc $(($(date +%s) - start))" >"$LOGDIR/$p.$name.status"
}

declare -A PASS_OK=() PASS_FAIL=()
for p in "${passes[@]}"; do PASS_OK[$p]=0 PASS_FAIL[$p]=0; done
report() {
    local p=$1 name=$2 rc secs label=$2
    [ $multi = 1 ] && label="$name [$p]"
    read -r rc secs <"$LOGDIR/$p.$name.status"
    if [ "$rc" = 0 ]; then
        PASS_OK[$p]=$((PASS_OK[$p] + 1)); echo "ok   $label (${secs}s)"
    else
        PASS_FAIL[$p]=$((PASS_FAIL[$p] + 1)); echo "FAIL $label (${secs}s)"
        # the test's own verdict first, if the log's tail (daemon logs)
        # does not hold it
        tail -n 40 "$LOGDIR/$p.$name.log" | grep -q '^FAIL: ' ||
            grep -m 3 '^FAIL: ' "$LOGDIR/$p.$name.log" | sed 's/^/    /'
        sed 's/^/    /' "$LOGDIR/$p.$name.log" | tail -n 40
    fi
}

# gate P: 0 if pass P may start (no --after, or its file exists), 1 if
# not yet, 2 if its file.failed exists (its tests fail without running).
gate() {
    local f=${P_AFTER[$1]}
    [ -z "$f" ] && return 0
    [ -e "$f" ] && return 0
    [ -e "$f.failed" ] && return 2
    return 1
}
fail_gated() { # a test of a pass whose --after failed
    echo "1 0" >"$LOGDIR/$1.$2.status"
    echo "FAIL: $2: not run: ${P_AFTER[$1]}.failed (the build of pass $1 failed)" >"$LOGDIR/$1.$2.log"
}
# reap: report the jobs that ended.
reap() {
    local pid
    for pid in "${!running[@]}"; do
        kill -0 "$pid" 2>/dev/null && continue
        wait "$pid" 2>/dev/null; report ${running[$pid]}; unset "running[$pid]"
    done
}

# Start up to JOBS tests, in list order but skipping those of a pass that
# may not start yet; report each as it ends (in the order they end).
declare -A running=()
pending=("${jobs_list[@]}")
while [ ${#pending[@]} -gt 0 ]; do
    while [ ${#running[@]} -ge "$JOBS" ]; do
        wait -n 2>/dev/null || true
        reap
    done
    job=
    for k in "${!pending[@]}"; do
        read -r p name <<<"${pending[$k]}"
        gate "$p"
        case $? in
        0) job=${pending[$k]}; unset "pending[$k]"; break ;;
        2) fail_gated "$p" "$name"; report "$p" "$name"; unset "pending[$k]" ;;
        esac
    done
    pending=("${pending[@]}")
    if [ -z "$job" ]; then
        [ ${#pending[@]} -gt 0 ] || break
        sleep 1 # every pending test waits for a pass's build
        reap
        continue
    fi
    run_one $job &
    running[$!]=$job
done
for pid in "${!running[@]}"; do
    wait "$pid" 2>/dev/null; report ${running[$pid]}
done
for j in "${alone[@]}"; do
    read -r p name <<<"$j"
    while gate "$p"; [ $? = 1 ]; do sleep 1; done
    if gate "$p"; then run_one $j; else fail_gated "$p" "$name"; fi
    report $j
done
stop_ceph

pass=0 failed=0
for p in "${passes[@]}"; do
    [ $multi = 1 ] && echo "integration [$p]: ${PASS_OK[$p]} passed, ${PASS_FAIL[$p]} failed"
    pass=$((pass + PASS_OK[$p])) failed=$((failed + PASS_FAIL[$p]))
done
echo "integration: $pass passed, $failed failed"
[ "$failed" = 0 ]
