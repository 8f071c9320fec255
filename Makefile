# blockd — the two commands a new user runs:
#   make run    install what is missing, build, start blockd with a demo volume
#   make check  install what is missing, build, run every test
#   make deb    build the Debian package into build-deb/ (scripts/make-deb.sh)
# Other targets: deps, build, asan, unit, integration, fuzz, fuzz-long, bench, format,
# format-check, build-matrix, clean.

BUILD      ?= build
ASAN_BUILD ?= build-asan
STATE      ?= ./var

# Debian packages: build tools and libraries, then the real clients and peers
# the tests and benchmarks drive.
DEPS_BUILD = gcc meson ninja-build pkg-config python3 xxd \
             libjansson-dev libsqlite3-dev libcmocka-dev libgnutls28-dev liburing-dev libwslay-dev \
             libcrypt-dev librbd-dev libgmp-dev
DEPS_TEST  = ceph-mon ceph-osd ceph-mgr ceph-common uuid-runtime tgt-rbd prometheus chromium libnbd-bin qemu-utils qemu-block-extra fio libiscsi-bin libiscsi-dev \
             nbdkit tgt gnutls-bin xfsprogs python3-websocket clang libclang-rt-14-dev \
             util-linux mount e2fsprogs curl sqlite3 python3-libnbd python3-rados python3-rbd dpkg-dev clang-format \
             nvme-cli linux-image-6.12-amd64 qemu-system-x86 busybox-static xz-utils
# The Debian package (make deb) and its checks: man pages from scdoc.
DEPS_PKG   = scdoc debhelper lintian man-db groff-base bsdextrautils systemd
DEPS       = $(DEPS_BUILD) $(DEPS_TEST) $(DEPS_PKG)

.PHONY: all deps build asan run check unit integration fuzz fuzz-long bench format format-check \
        build-matrix deb clean

all: build

# Install what is missing (as root, with apt-get); without root, name what is
# missing and fail, never carry on half-equipped. INITRD=No: the kernel
# package (linux-image-6.12-amd64) is there for the tests' QEMU guest, which
# brings its own initramfs; its hook then makes none for the machine.
deps:
	@installed=$$(dpkg-query -W -f='$${Package} $${Status}\n' $(DEPS) 2>/dev/null | \
	  awk '/ install ok installed$$/ {print $$1}'); \
	missing=""; for p in $(DEPS); do \
	  echo "$$installed" | grep -qx "$$p" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive INITRD=No apt-get install -y -qq $$missing >/dev/null || \
	      { echo "error: apt-get install failed for:$$missing" >&2; exit 1; }; \
	  else \
	    echo "error: missing Debian packages:$$missing" >&2; \
	    echo "       run 'sudo make deps' (or apt-get install them) and try again" >&2; exit 1; \
	  fi; \
	fi

$(BUILD)/build.ninja:
	meson setup $(BUILD) --buildtype=debugoptimized -Dwerror=true

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

$(ASAN_BUILD)/build.ninja:
	meson setup $(ASAN_BUILD) --buildtype=debug -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false

asan: deps $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD)

run: build
	@BUILD=$(BUILD) STATE=$(STATE) scripts/run-demo.sh

unit: build asan
	meson test -C $(BUILD) --suite unit --print-errorlogs
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  meson test -C $(ASAN_BUILD) --suite unit --print-errorlogs

integration: build
	BUILD=$(abspath $(BUILD)) tests/integration/run.sh

check: deps
	@scripts/check.sh $(BUILD) $(ASAN_BUILD)

# Every buildtype x sanitizer combination with -Werror (make check builds a subset).
build-matrix: deps
	scripts/build-matrix.sh full

# The package, built from a clean copy of the tree: build-deb/blockd_*.deb
deb: deps
	scripts/make-deb.sh build-deb

fuzz: deps
	@scripts/fuzz.sh

# Each fuzz target for an hour; new coverage is merged into fuzz/corpus/.
fuzz-long: deps
	@scripts/fuzz.sh long

bench: build
	@for b in bench/*.sh; do echo "== $$b"; flock /tmp/blockd-bench.lock bash $$b || exit 1; done

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

# What make check runs: fail if a file is not clang-format clean.
format-check:
	@scripts/check-format.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz build-deb
