# ibcm — build, install, demo and test.
#
#   make demo            the main job (README): a CM demo on the software fabric
#   make test            every test: Rust, man pages, C (ASan, valgrind, LD_PRELOAD), librdmacm.so.1, Python
#   make rdmacm          target/rdmacm/librdmacm.so.1 (docs/RDMACM.md)
#   make interop         ibcm against the Linux kernel CM in qemu guests, on real
#                        (Soft-RoCE) devices with real QPs, and the unmodified rdma_cm
#                        tools on ibcm's librdmacm (root)
#   make install PREFIX=/usr/local

PREFIX     ?= /usr/local
CARGO      ?= cargo
VERSION    := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
BUILD      := build
STAGE      := $(abspath $(BUILD)/prefix)
CFLAGS_T   := -std=c11 -Wall -Wextra -Werror -O1 -g
PKG        := PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig pkg-config
CTESTS     := abi_static cm_scenarios misuse
VALGRIND   ?= valgrind

.PHONY: all lib rdmacm install demo deps test test-rust test-man test-docs test-c test-rdmacm test-python test-service wheel clean

all: lib

lib:
	$(CARGO) build --release --lib --bins

# librdmacm.so.1 (docs/RDMACM.md): the rdmacm/ crate's static archive
# linked with gcc (rustc would add its own version script to a cdylib)
# under SONAME librdmacm.so.1 and rdma-core's version nodes; everything
# but the rdma_*/r* functions of rdmacm/librdmacm.map stays local.
RDMACM_SO   := target/rdmacm/librdmacm.so.1
RDMACM_LIBS := -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
rdmacm:
	$(CARGO) build --release -p ibcm-rdmacm --lib
	@mkdir -p $(dir $(RDMACM_SO))
	$(CC) -shared -o $(RDMACM_SO) \
		-Wl,--whole-archive target/release/libibcm_rdmacm.a -Wl,--no-whole-archive \
		-Wl,-soname,librdmacm.so.1 -Wl,--version-script=rdmacm/librdmacm.map \
		-Wl,-z,now -Wl,-z,defs -Wl,--gc-sections $(RDMACM_LIBS)

install: lib rdmacm
	install -d $(DESTDIR)$(PREFIX)/lib/ibcm
	install -m 0755 $(RDMACM_SO) $(DESTDIR)$(PREFIX)/lib/ibcm/librdmacm.so.1
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/rdma $(DESTDIR)$(PREFIX)/bin
	install -m 0755 target/release/libibcm.so $(DESTDIR)$(PREFIX)/lib/libibcm.so.$(VERSION)
	ln -sf libibcm.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libibcm.so.0
	ln -sf libibcm.so.0 $(DESTDIR)$(PREFIX)/lib/libibcm.so
	install -m 0644 target/release/libibcm.a $(DESTDIR)$(PREFIX)/lib/libibcm.a
	install -m 0644 include/rdma/*.h $(DESTDIR)$(PREFIX)/include/rdma/
	install -m 0644 include/ibcm.h $(DESTDIR)$(PREFIX)/include/ibcm.h
	install -m 0755 target/release/ibcm $(DESTDIR)$(PREFIX)/bin/ibcm
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/system
	sed -e 's|@PREFIX@|$(PREFIX)|' systemd/ibcmd.service.in \
		> $(DESTDIR)$(PREFIX)/lib/systemd/system/ibcmd.service
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	target/release/ibcm completions bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/ibcm
	target/release/ibcm completions zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_ibcm
	target/release/ibcm completions fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/ibcm.fish
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' pkgconfig/ibcm.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/ibcm.pc
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man3 \
		$(DESTDIR)$(PREFIX)/share/man/man7
	install -m 0644 man/man1/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 man/man3/*.3 $(DESTDIR)$(PREFIX)/share/man/man3/
	install -m 0644 man/man7/*.7 $(DESTDIR)$(PREFIX)/share/man/man7/

demo: lib
	./target/release/ibcm bench --baseline

test: deps
	$(MAKE) --no-print-directory test-rust test-man test-docs test-c test-rdmacm test-python test-service test-netns test-interop

deps:
	./scripts/deps.sh

test-rust:
	$(CARGO) build --release --lib
	$(CARGO) test --release
	@echo "== examples/forward_cost (design B's data path, docs/SERVICE.md Round 18), small: every connection made"
	FWD_NET=$(TEST_NET) timeout 300 target/release/examples/forward_cost 2000 32 1

# Man pages (man/): mandoc lint and groff render of every page, a page for
# every function of ibcm.map, .so links resolve, every `ibcm --help`
# command has its section in ibcm.1 (scripts/check-man.sh).
test-man: lib
	./scripts/check-man.sh

# References stay inside the repository: no pointers to notes elsewhere,
# and every `CM_RULES.md §<section>` cited names a section of
# docs/CM_RULES.md (scripts/check-refs.sh).
test-docs:
	./scripts/check-refs.sh

# C tests build against the installed header and library through pkg-config,
# exactly as a user's program does.
$(STAGE)/lib/pkgconfig/ibcm.pc: lib
	$(MAKE) --no-print-directory install PREFIX=$(STAGE)

$(BUILD)/c/%: c-tests/%.c $(STAGE)/lib/pkgconfig/ibcm.pc
	@mkdir -p $(BUILD)/c
	$(CC) $(CFLAGS_T) $< -o $@ $$($(PKG) --cflags --libs ibcm) -lpthread -Wl,-rpath,$(STAGE)/lib

$(BUILD)/c/%.asan: c-tests/%.c $(STAGE)/lib/pkgconfig/ibcm.pc
	@mkdir -p $(BUILD)/c
	$(CC) $(CFLAGS_T) -fsanitize=address,undefined -fno-omit-frame-pointer $< -o $@ \
		$$($(PKG) --cflags --libs ibcm) -lpthread -Wl,-rpath,$(STAGE)/lib

# ThreadSanitizer build of the C tests (the Rust library is not
# instrumented; c-tests/tsan.supp scopes suppressions to libibcm).
$(BUILD)/c/%.tsan: c-tests/%.c $(STAGE)/lib/pkgconfig/ibcm.pc
	@mkdir -p $(BUILD)/c
	$(CC) $(CFLAGS_T) -fsanitize=thread $< -o $@ \
		$$($(PKG) --cflags --libs ibcm) -lpthread -Wl,-rpath,$(STAGE)/lib

# The LD_PRELOAD run: the program finds a stub libibcm.so.0 whose every
# function aborts; only the preloaded real library makes it pass.
$(BUILD)/stub/libibcm.so.0: ibcm.map
	@mkdir -p $(BUILD)/stub
	sed -n 's/^ *\(ib[a-z_]*\);$$/void \1(void) { abort(); }/p' ibcm.map \
		| (echo '#include <stdlib.h>'; cat) > $(BUILD)/stub/stub.c
	$(CC) -shared -fPIC -Wl,-soname,libibcm.so.0 $(BUILD)/stub/stub.c -o $@
	ln -sf libibcm.so.0 $(BUILD)/stub/libibcm.so

$(BUILD)/c/%.preload: c-tests/%.c $(STAGE)/lib/pkgconfig/ibcm.pc $(BUILD)/stub/libibcm.so.0
	@mkdir -p $(BUILD)/c
	$(CC) $(CFLAGS_T) $< -o $@ $$($(PKG) --cflags ibcm) -L$(BUILD)/stub -libcm -lpthread

# The C tests' loopback addresses: this run's own 127.A.B.x and
# 127.A.B+1.x (scripts/test-net.sh, claimed for make's pid), so two runs on
# one host (worktrees, CI beside a developer) never bind the same soft
# device address. Each test below takes its own last bytes;
# `make test-c TEST_NET=127.0.0` picks the network by hand.
TEST_NET = $(eval TEST_NET := $$(or $$(shell sh scripts/test-net.sh $$$$PPID),$$(error scripts/test-net.sh gave no network)))$(TEST_NET)

# test-c, test-python, test-netns: in-process (IBCM_SERVICE=off) — one
# process per address, and no service at the host's default socket;
# test-service runs the C scenarios and the Python suite through the service.
test-c test-python test-netns: export IBCM_SERVICE = off
test-c: $(addprefix $(BUILD)/c/,$(CTESTS)) $(addprefix $(BUILD)/c/,$(addsuffix .asan,$(CTESTS))) $(BUILD)/c/cm_scenarios.preload $(BUILD)/c/misuse.tsan
	@echo "== C tests (pkg-config build)"
	$(BUILD)/c/abi_static
	$(BUILD)/c/cm_scenarios $(TEST_NET).2 $(TEST_NET).3
	$(BUILD)/c/misuse $(TEST_NET).20 $(TEST_NET).21
	@echo "== C API misuse under ThreadSanitizer (suppressions: c-tests/tsan.supp)"
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/c-tests/tsan.supp" \
		setarch $$(uname -m) -R $(BUILD)/c/misuse.tsan $(TEST_NET).22 $(TEST_NET).23
	@echo "== C tests under AddressSanitizer + UBSan"
	ASAN_OPTIONS=detect_leaks=1 $(BUILD)/c/abi_static.asan
	ASAN_OPTIONS=detect_leaks=1 $(BUILD)/c/cm_scenarios.asan $(TEST_NET).4 $(TEST_NET).5
	ASAN_OPTIONS=detect_leaks=1 $(BUILD)/c/misuse.asan $(TEST_NET).24 $(TEST_NET).25
	@echo "== C tests with the library LD_PRELOADed"
	LD_LIBRARY_PATH=$(BUILD)/stub LD_PRELOAD=$(STAGE)/lib/libibcm.so \
		$(BUILD)/c/cm_scenarios.preload $(TEST_NET).6 $(TEST_NET).7
	@echo "== C tests under valgrind"
	CM_SCENARIOS_SLOW=1 $(VALGRIND) -q --error-exitcode=99 --trace-children=yes --leak-check=full \
		--show-possibly-lost=no --errors-for-leak-kinds=definite $(BUILD)/c/cm_scenarios $(TEST_NET).8 $(TEST_NET).9

# The verdict logic of the rdmacm matrix (interop/rdmacm/check.py) without a guest: the
# capture cut at the guests' marks, the side-channel ICRC rewrite, the checks (with the real
# `ibcm decode` on tests/vectors/rping.pcap) and the expectations summary; and the tables of
# scripts/bench-kernel.sh (interop/bench/test_bench_kernel.py: cmtime rows, timings, ratios).
.PHONY: test-interop
test-interop: lib
	python3 -m unittest discover -s interop/rdmacm -p 'test_*.py'
	python3 -m unittest discover -s interop/bench -p 'test_*.py'

# librdmacm.so.1: the crate's tests (ABI mirrors against <rdma/rdma_cma.h>,
# port space, addrinfo), then the artifact's exports and loading by a
# -z now binary built against the system librdmacm (rdmacm/tests/exports.sh).
# Then c-tests/rdmacm_api.c, built against rdma-core's <rdma/rdma_cma.h>
# and -lrdmacm and run on ours through LD_LIBRARY_PATH: plain, under
# ASan+UBSan, and under TSan (c-tests/rdmacm_tsan.supp: the Rust library is
# not instrumented).
RDMACM_RUN := IBCM_RDMACM_DEVICE=soft LD_LIBRARY_PATH=$(dir $(RDMACM_SO))
$(BUILD)/c/rdmacm_api: c-tests/rdmacm_api.c
	@mkdir -p $(BUILD)/c
	$(CC) $(CFLAGS_T) $< -o $@ -lrdmacm -lpthread
$(BUILD)/c/rdmacm_api.asan: c-tests/rdmacm_api.c
	@mkdir -p $(BUILD)/c
	$(CC) $(CFLAGS_T) -fsanitize=address,undefined -fno-omit-frame-pointer $< -o $@ -lrdmacm -lpthread
$(BUILD)/c/rdmacm_api.tsan: c-tests/rdmacm_api.c
	@mkdir -p $(BUILD)/c
	$(CC) $(CFLAGS_T) -fsanitize=thread $< -o $@ -lrdmacm -lpthread

test-rdmacm: rdmacm $(BUILD)/c/rdmacm_api $(BUILD)/c/rdmacm_api.asan $(BUILD)/c/rdmacm_api.tsan $(BUILD)/c/teardown
	$(CARGO) test --release -p ibcm-rdmacm
	bash rdmacm/tests/exports.sh $(RDMACM_SO) $(BUILD)/rdmacm
	@echo "== rdma_* surface (c-tests/rdmacm_api.c) on librdmacm.so.1"
	$(RDMACM_RUN) $(BUILD)/c/rdmacm_api $(TEST_NET).30 $(TEST_NET).31
	ASAN_OPTIONS=detect_leaks=1 $(RDMACM_RUN) $(BUILD)/c/rdmacm_api.asan $(TEST_NET).32 $(TEST_NET).33
	TSAN_OPTIONS="halt_on_error=1 die_after_fork=0 suppressions=$(CURDIR)/c-tests/rdmacm_tsan.supp" $(RDMACM_RUN) \
		setarch $$(uname -m) -R $(BUILD)/c/rdmacm_api.tsan $(TEST_NET).34 $(TEST_NET).35
	@echo "== cmtime's teardown, 50 connections (the bench-teardown program still runs)"
	IBCM_SERVICE=off $(RDMACM_RUN) sh c-tests/bench/teardown.sh $(BUILD)/c/teardown $(TEST_NET).36 $(TEST_NET).37 50

# The disconnect and destroy steps of cmtime on the host, QP-less (c-tests/bench/teardown.c,
# docs/PERFORMANCE.md §5 "Disconnect: the server's DREP path"): a
# measurement, not part of `make test` (test-rdmacm runs it once, small).
# TEARDOWN_N connections (1000); TEARDOWN_GAP_US (the client's pause after
# each disconnect), TEARDOWN_TRACE=DIR (perf: system calls and context
# switches per connection), TEARDOWN_SERVICE_PID (the service's context
# switches in the destroy step) and IBCM_SERVICE (off unless set) pass through.
TEARDOWN_N ?= 1000
$(BUILD)/c/teardown: c-tests/bench/teardown.c
	@mkdir -p $(BUILD)/c
	$(CC) $(CFLAGS_T) $< -o $@ -lrdmacm -lpthread
.PHONY: bench-teardown
bench-teardown: rdmacm $(BUILD)/c/teardown
	IBCM_SERVICE=$${IBCM_SERVICE:-off} $(RDMACM_RUN) \
		sh c-tests/bench/teardown.sh $(BUILD)/c/teardown $(TEST_NET).38 $(TEST_NET).39 $(TEARDOWN_N)

# Live interoperability with the Linux kernel CM (docs/INTEROP.md): a qemu
# guest with Soft-RoCE in a private network namespace. Needs root,
# /dev/net/tun and apt; otherwise it prints "skipped: <reason>" and succeeds.
.PHONY: interop
interop:
	$(CARGO) build --release --bins
	./interop/run.sh
	bash interop/verbs.sh
	bash interop/rdmacm.sh

# Network faults between network namespaces (docs/RELIABILITY.md): needs
# root and iproute2; prints "netns: SKIP: <reason>" and succeeds otherwise.
.PHONY: test-netns
test-netns: lib
	bash tests/netns/run.sh

# A wheel of the Python package with the library inside (ibcm/libibcm.so,
# debug info stripped), tagged for this platform (python/setup.py):
# `pip install build/wheel/ibcm-*.whl` is the only step on a matching host.
# Built from a copy of python/ so the source tree stays library-free.
WHEEL_DIR := $(BUILD)/wheel
wheel:
	$(CARGO) build --release --lib
	rm -rf $(WHEEL_DIR)/src $(WHEEL_DIR)/ibcm-*.whl
	mkdir -p $(WHEEL_DIR)/src
	cp -r python/ibcm python/pyproject.toml python/setup.py python/README.md $(WHEEL_DIR)/src/
	rm -rf $(WHEEL_DIR)/src/ibcm/__pycache__
	install -m 0755 target/release/libibcm.so $(WHEEL_DIR)/src/ibcm/libibcm.so
	strip --strip-debug $(WHEEL_DIR)/src/ibcm/libibcm.so
	python3 -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check \
		-w $(WHEEL_DIR) $(WHEEL_DIR)/src
	@ls $(WHEEL_DIR)/ibcm-*.whl

# The package and its examples must pass `mypy --strict` (typed API, py.typed).
test-python:
	python3 -m mypy --strict --cache-dir $(BUILD)/mypy-cache python/ibcm python/examples
	@if [ -d python/tests ]; then \
		IBCM_LIB=$(STAGE)/lib/libibcm.so python3 -m pytest -q python/tests; \
	else echo "== no Python tests yet"; fi

# The C scenarios, the rdma_* surface (c-tests/rdmacm_api.c) and the
# Python suite once more through the host CM service (`ibcm daemon` on a
# private socket, IBCM_SERVICE=required), in
# each of its modes (IBCM_SERVICE_MODE: engine, the engines in the
# service; forward, the engines in the processes, docs/SERVICE.md
# "Design B"); the multi-process service tests themselves are
# cli/tests/service.rs and cli/tests/service_forward.rs.
SVC_SOCK := $(abspath $(BUILD))/ibcmd-test.sock
test-service: $(BUILD)/c/cm_scenarios rdmacm $(BUILD)/c/rdmacm_api
	$(CARGO) build --release -p ibcm-cli
	set -e; for mode in engine forward; do \
	echo "== C scenarios, the rdma_* surface and the Python suite through the host CM service, IBCM_SERVICE_MODE=$$mode"; \
	rm -f $(SVC_SOCK); \
	target/release/ibcm daemon --foreground --socket $(SVC_SOCK) 2>$(BUILD)/ibcmd-test-$$mode.log & pid=$$!; \
	trap "kill $$pid" EXIT; \
	for i in $$(seq 200); do [ -S $(SVC_SOCK) ] && break; sleep 0.05; done; \
	IBCM_SERVICE=required IBCM_SERVICE_SOCKET=$(SVC_SOCK) IBCM_SERVICE_MODE=$$mode \
		$(BUILD)/c/cm_scenarios $(TEST_NET).10 $(TEST_NET).11; \
	IBCM_SERVICE=required IBCM_SERVICE_SOCKET=$(SVC_SOCK) IBCM_SERVICE_MODE=$$mode $(RDMACM_RUN) \
		$(BUILD)/c/rdmacm_api $(TEST_NET).12 $(TEST_NET).13; \
	IBCM_SERVICE=required IBCM_SERVICE_SOCKET=$(SVC_SOCK) IBCM_SERVICE_MODE=$$mode \
		IBCM_LIB=$(STAGE)/lib/libibcm.so python3 -m pytest -q --ignore=python/tests/test_wheel.py python/tests; \
	kill $$pid; wait $$pid 2>/dev/null || true; trap - EXIT; \
	done

clean:
	$(CARGO) clean
	rm -rf $(BUILD)

# Fuzzing (not part of `make test`; see docs/FUZZING.md): writes the seed
# corpora from tests/vectors, then runs every cargo-fuzz target in fuzz/ for
# FUZZ_SECONDS each. cargo-fuzz passes nightly -Z flags; RUSTC_BOOTSTRAP=1
# makes the stable toolchain accept them. The fuzzed code has no `unsafe`,
# so the default is no sanitizer (overflow checks and debug assertions stay
# on); FUZZ_SANITIZER=address works too.
FUZZ_SECONDS   ?= 60
FUZZ_TARGETS   ?= wire_mad roce_frame capture engine
FUZZ_SANITIZER ?= none

.PHONY: fuzz
fuzz:
	@$(CARGO) fuzz --version >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	$(CARGO) test --release --test fuzz_smoke generate_fuzz_corpus -- --ignored
	cd fuzz && for t in $(FUZZ_TARGETS); do \
		echo "== fuzz $$t for $(FUZZ_SECONDS) s"; \
		len=; [ $$t = engine ] && len=-max_len=8192; \
		RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run --sanitizer $(FUZZ_SANITIZER) $$t -- \
			-max_total_time=$(FUZZ_SECONDS) $$len -print_final_stats=1 \
			|| exit 1; \
	done

# Real RDMA devices in two Soft-RoCE qemu guests (interop/verbs.sh, root):
# kernel ucmatose/rping <-> ibcm over ib_umad, the -EBUSY refusal, ibcm <-> ibcm
# over ib_umad and over soft:<ip>@rxe0, GID changes through port events.
.PHONY: interop-verbs
interop-verbs:
	bash interop/verbs.sh

# The librdmacm drop-in proof (interop/rdmacm.sh, docs/INTEROP.md "The rdmacm matrix"): the
# unmodified rdmacm-utils and perftest tools between two Soft-RoCE guests, kernel CM against
# ibcm's librdmacm.so.1 (LD_PRELOAD) both ways and ibcm against itself over umad and over UDP.
# The cells expected to pass are listed in interop/rdmacm-expect.
.PHONY: interop-rdmacm
interop-rdmacm:
	bash interop/rdmacm.sh

# ibcm against the kernel CM on the same unmodified binaries (scripts/bench-kernel.sh,
# docs/PERFORMANCE.md "ibcm vs the kernel CM"): cmtime -c N, rping -C 1, ib_write_bw -R and
# ib_send_lat -R between two Soft-RoCE guests in every pairing, with ratios to kernel-kernel.
# A measurement (root, qemu, minutes): not part of `make test` or CI.
.PHONY: bench-kernel
bench-kernel:
	bash scripts/bench-kernel.sh $(BENCH_PAIRINGS)
