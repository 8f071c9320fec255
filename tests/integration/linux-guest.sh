# shellcheck shell=bash
# A small QEMU guest running Debian's Linux kernel, for tests that drive
# blockd with the kernel's own initiators (t-nvme-linux: the NVMe/TCP host).
# Source it after lib.sh:
#   . "$(dirname "$0")/linux-guest.sh"
#   lg_need                          # QEMU, a kernel with nvme-tcp, busybox, nvme-cli
#   lg_initramfs STEPS [FILE]...     # $TMP/guest/initrd.gz: STEPS runs as /steps.sh,
#                                    # the FILEs are copied to /data/
#   lg_start                         # boot it in the background, console in $LG_LOG
#   lg_wait_line REGEX [SECONDS]     # wait for a console line
#   lg_finish [SECONDS]              # wait for the guest's end; fail if a step failed
#
# The guest: busybox (static), the kernel modules the NVMe/TCP host and
# the virtio network card need (resolved through the kernel's modules.dep,
# built-in ones left out), and nvme-cli with its shared libraries (ldd).
# Its /init mounts /proc, /sys and /dev, loads the modules, brings up eth0
# on QEMU's user networking (10.0.2.15/24; 10.0.2.2 reaches the host's
# 127.0.0.1, and nothing else), sources /steps.sh with the helpers below,
# prints the kernel log, and powers off. Everything goes to the serial
# console (ttyS0), one marker per line:
#   LGUEST ok NAME               a step passed
#   LGUEST fail NAME: WHY        a step failed (the steps stop there)
#   LGUEST host WORD             the guest asks the host to act (lg_wait_line)
#   LGUEST dmesg ...             the kernel log, line by line, at the end
#   LGUEST end RC                the steps are over (0: all passed)
# Helpers for the steps: ok NAME; bad NAME WHY; wait_for SECONDS COMMAND...;
# want NAME EXPECTED ACTUAL; host WORD.
#
# Nothing is skipped: a missing QEMU, kernel package, busybox or nvme-cli
# fails the test (make deps installs them). QEMU uses KVM where it can run
# a stock kernel (lg_accel), and emulates the CPU otherwise.

LG_DIR=$TMP/guest
LG_LOG=$LG_DIR/console.log
LG_PID=
LG_KVER=
LG_KERNEL=
# The modules the guest loads (with what each needs), when not built in.
LG_MODULES="virtio_pci virtio_net crc32c_generic nvme-tcp"

# lg_kernel: the newest /boot/vmlinuz-VERSION whose modules include
# nvme-tcp (LG_KERNEL_VERSION=VERSION: that one).
lg_kernel() {
    local k v pat=${LG_KERNEL_VERSION:-*}
    # shellcheck disable=SC2086 # pat is a glob unless a version is given
    for k in $(ls -1 /boot/vmlinuz-$pat 2>/dev/null | sort -V -r); do
        v=${k#/boot/vmlinuz-}
        if [ -f "/lib/modules/$v/modules.dep" ] && [ -r "$k" ] &&
            grep -q "/nvme-tcp.ko" "/lib/modules/$v/modules.dep"; then
            LG_KERNEL=$k LG_KVER=$v
            return 0
        fi
    done
    return 1
}

lg_need() {
    need qemu-system-x86_64 cpio gzip xz ldd nvme
    [ -x /bin/busybox ] && file_is_static /bin/busybox ||
        fail "a static /bin/busybox is required (busybox-static; make deps)"
    lg_kernel || fail "no /boot/vmlinuz-${LG_KERNEL_VERSION:-*} with nvme-tcp in /lib/modules (make deps installs linux-image-6.12-amd64)"
}

file_is_static() {
    ! ldd "$1" >/dev/null 2>&1
}

# lg_config NAME: the value of CONFIG_NAME in the guest kernel's config ("" if unset).
lg_config() {
    sed -n "s/^CONFIG_$1=//p" "/boot/config-$LG_KVER" 2>/dev/null
}

# _lg_modules: the module files to load, in load order (each after what it
# needs); modules built into the kernel (modules.builtin) are left out.
_lg_modules() {
    local base=/lib/modules/$LG_KVER m f line dep seen=" "
    for m in $LG_MODULES; do
        f=$(grep -E "/${m//[-_]/[-_]}\.ko(\.[a-z]+)?:" "$base/modules.dep" | head -n 1 | cut -d: -f1)
        if [ -z "$f" ]; then
            grep -qE "/${m//[-_]/[-_]}\.ko" "$base/modules.builtin" ||
                fail "kernel $LG_KVER has module $m neither built in nor in modules.dep"
            continue
        fi
        line=$(grep -E "^$f:" "$base/modules.dep" | cut -d: -f2)
        # modules.dep lists what a module needs so that the last loads first
        for dep in $(echo $line | tr ' ' '\n' | tac) "$f"; do
            case $seen in *" $dep "*) continue ;; esac
            seen="$seen$dep "
            echo "$dep"
        done
    done
}

# _lg_copy_elf FILE ROOT: FILE and the shared libraries it needs (ldd).
_lg_copy_elf() {
    local f=$1 root=$2 lib
    mkdir -p "$root/$(dirname "$f")"
    cp -L "$f" "$root/$f"
    for lib in $(ldd "$f" | grep -oE '/[^ ]+'); do
        [ -e "$root/$lib" ] && continue
        mkdir -p "$root/$(dirname "$lib")"
        cp -L "$lib" "$root/$lib"
    done
}

lg_initramfs() {
    local steps=$1 root=$LG_DIR/root f
    shift
    rm -rf "$LG_DIR"
    mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,data,etc/nvme,lib/modules/"$LG_KVER"}
    cp /bin/busybox "$root/bin/busybox"
    for f in $(_lg_modules); do
        mkdir -p "$root/lib/modules/$LG_KVER/$(dirname "$f")"
        # compressed modules (Debian's kernels from 6.12: .ko.xz) are
        # stored plain: busybox's insmod takes the file as it is
        case $f in
        *.xz) xz -dc "/lib/modules/$LG_KVER/$f" >"$root/lib/modules/$LG_KVER/${f%.xz}" ;;
        *.zst) zstd -qdc "/lib/modules/$LG_KVER/$f" >"$root/lib/modules/$LG_KVER/${f%.zst}" ;;
        *.gz) gzip -dc "/lib/modules/$LG_KVER/$f" >"$root/lib/modules/$LG_KVER/${f%.gz}" ;;
        *) cp "/lib/modules/$LG_KVER/$f" "$root/lib/modules/$LG_KVER/$f" ;;
        esac || fail "could not copy module $f"
        echo "${f%.ko*}.ko" >>"$root/modules.load"
    done
    _lg_copy_elf "$(command -v nvme)" "$root"
    cp "$steps" "$root/steps.sh"
    for f in "$@"; do cp "$f" "$root/data/"; done
    _lg_init >"$root/init"
    chmod 755 "$root/init"
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$LG_DIR/initrd.gz" ||
        fail "could not build the guest's initramfs"
}

# The guest's /init (busybox sh).
_lg_init() {
    cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# the kernel found no /dev/console in the initramfs: open it now
exec </dev/console >/dev/console 2>&1
KVER=$(uname -r)
ok() { echo "LGUEST ok $1"; }
bad() { echo "LGUEST fail $1: $2"; FAILED=1; }
host() { echo "LGUEST host $1"; }
# wait_for SECONDS COMMAND...: until COMMAND succeeds, polled every 0.1 s
wait_for() {
    local n=$(($1 * 10)); shift
    while [ "$n" -gt 0 ]; do
        "$@" && return 0
        sleep 0.1
        n=$((n - 1))
    done
    return 1
}
# want NAME EXPECTED ACTUAL
want() {
    [ "$2" = "$3" ] || { bad "$1" "expected '$2', got '$3'"; return 1; }
}
FAILED=0
for m in $(cat /modules.load); do
    insmod "/lib/modules/$KVER/$m" || bad modules "insmod $m failed"
done
if [ "$FAILED" = 0 ]; then
    if wait_for 20 [ -e /sys/class/net/eth0 ]; then
        ip link set lo up
        ip link set eth0 up
        ip addr add 10.0.2.15/24 dev eth0
        ok network
    else
        bad network "no eth0"
    fi
fi
[ "$FAILED" = 0 ] && . /steps.sh
dmesg | sed 's/^/LGUEST dmesg /'
echo "LGUEST end $FAILED"
# the serial line drains the console's buffer at its own pace: power off
# only once it has (else the host misses the last lines)
sleep 1
poweroff -f
INIT
}

# lg_accel: KVM where it runs a stock kernel, else QEMU's own emulation
# (TCG: the guest boots in seconds all the same). A KVM module of the PVM
# kind (kvm_pvm: paging-based, no hardware virtualisation) runs only guest
# kernels built for it: a stock kernel hangs at its first instructions.
# LG_ACCEL=kvm|tcg chooses.
lg_accel() {
    if [ -n "${LG_ACCEL:-}" ]; then
        echo "$LG_ACCEL"
    elif [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ]; then
        echo kvm
    else
        echo tcg
    fi
}

# lg_start [KERNEL ARGS]: boot the guest in the background; its console
# goes to $LG_LOG. qemu is the background process itself, so that the
# test's exit (lib.sh's BG_PIDS) kills it.
lg_start() {
    : >"$LG_LOG"
    LG_ACCEL_USED=$(lg_accel)
    qemu-system-x86_64 -accel "$LG_ACCEL_USED" -m 512 -smp 1 \
        -no-reboot -nodefaults -serial "file:$LG_LOG" -display none \
        -kernel "$LG_KERNEL" -initrd "$LG_DIR/initrd.gz" \
        -append "console=ttyS0 panic=-1 quiet loglevel=1 $*" \
        -netdev user,id=n -device virtio-net-pci,netdev=n \
        </dev/null >"$LG_DIR/qemu.out" 2>&1 &
    LG_PID=$!
    BG_PIDS+=("$LG_PID")
}

# lg_guest_helpers: shell functions for a test's guest steps, to append to
# its steps file. fabrics OPTIONS creates a controller through
# /dev/nvme-fabrics with the host (10.0.2.2) as traddr and prints
# "instance=N,cntlid=M"; 1 (the kernel's reason in /tmp/fabrics.err) if
# the kernel refuses.
lg_guest_helpers() {
    cat <<'EOF'
fabrics() {
    exec 3<>/dev/nvme-fabrics
    if ! echo "transport=tcp,traddr=10.0.2.2,$1" >&3 2>/tmp/fabrics.err; then
        exec 3>&-
        return 1
    fi
    read -r r <&3
    exec 3>&-
    echo "$r"
}
EOF
}

# lg_dump: what the guest printed, for a failure message.
lg_dump() {
    echo "--- guest console (markers; kernel log lines last) ---" >&2
    grep -a "LGUEST" "$LG_LOG" | grep -av "LGUEST dmesg" >&2 || true
    grep -a "LGUEST dmesg" "$LG_LOG" | tail -n 60 >&2 || true
    grep -av "LGUEST" "$LG_LOG" | tail -n 20 >&2 || true
    [ ! -s "$LG_DIR/qemu.out" ] || { echo "--- qemu ---" >&2; cat "$LG_DIR/qemu.out" >&2; }
}

# lg_wait_line REGEX [SECONDS]: wait for a console line matching REGEX
# (extended); fails if the guest ends or reports a failure first.
lg_wait_line() {
    local re=$1 n=$((${2:-120} * 10))
    while [ "$n" -gt 0 ]; do
        grep -aqE "$re" "$LG_LOG" && return 0
        if grep -aqE "^LGUEST (fail|end)" "$LG_LOG" || ! kill -0 "$LG_PID" 2>/dev/null; then
            # the line may have come between the two reads
            grep -aqE "$re" "$LG_LOG" && return 0
            lg_dump
            fail "guest ended before printing /$re/"
        fi
        sleep 0.1
        n=$((n - 1))
    done
    lg_dump
    fail "guest did not print /$re/ in ${2:-120} s"
}

# lg_finish [SECONDS]: wait for the guest to power off; fail unless every
# step passed. The guest's kernel log is left in $LG_DIR/dmesg.txt.
lg_finish() {
    lg_wait_line "^LGUEST end " "${1:-120}"
    local rc=0 n=300
    # the guest powers off right after its last line
    while kill -0 "$LG_PID" 2>/dev/null && [ "$n" -gt 0 ]; do sleep 0.1; n=$((n - 1)); done
    if kill -0 "$LG_PID" 2>/dev/null; then
        kill -KILL "$LG_PID" 2>/dev/null || true
        wait "$LG_PID" 2>/dev/null || true
        rc="no power-off in 30 s"
    else
        wait "$LG_PID" || rc=$?
    fi
    LG_PID=
    sed -n 's/^LGUEST dmesg //p' "$LG_LOG" | tr -d '\r' >"$LG_DIR/dmesg.txt"
    if ! grep -aq "^LGUEST end 0" "$LG_LOG" || grep -aq "^LGUEST fail" "$LG_LOG"; then
        lg_dump
        fail "a step in the guest failed"
    fi
    [ "$rc" = 0 ] || { lg_dump; fail "qemu: $rc"; }
    grep -a "^LGUEST ok" "$LG_LOG" | tr -d '\r' | sed 's/^LGUEST ok /ok  guest: /'
}
