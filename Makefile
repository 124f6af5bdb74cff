# ferry — one non-recursive Makefile.
#
#   make            build build/$(VARIANT)/bin/{ferry-replicator,ferry-hydrator,ferry}
#   make check      install missing Debian packages (as root), build, run every test
#                   (strict: a skip fails; STRICT=0 allows skips)
#   make asan       ASan+UBSan build in build/asan (make check VARIANT=asan runs on it)
#   make fuzz       libFuzzer (clang) on every fuzz target, FUZZ_SECONDS each
#   make demo       run the quickstart: replicator + hydrator on loopback
#   make deps       install missing Debian packages (as root) or print the apt-get line
#   make lint       check include rules between folders
#   make install    install programs (PREFIX=/usr/local, DESTDIR supported)
#   make clean
#
# Variants live in build/<variant>/: release (default), debug, asan.

VARIANT ?= release
B ?= build/$(VARIANT)
PREFIX ?= /usr/local

# Every library comes through pkg-config, except http-parser, whose Debian
# package ships no .pc file; it is linked as -lhttp_parser. Each program
# links what it uses (README, "Why each dependency"); the tests link all.
REPL_PKGS := libuv sqlite3 liblz4 libzstd libssl libcrypto jansson
HYD_PKGS  := libuv libcurl sqlite3 liblz4 libzstd fuse3 libssl libcrypto libxxhash jansson
TOOL_PKGS := libuv libcurl sqlite3 liblz4 libzstd libcrypto libxxhash jansson
PKGS := $(sort $(REPL_PKGS) $(HYD_PKGS) $(TOOL_PKGS) cmocka)

# Debian packages the build, the tests and the demo need
# (python3-prometheus-client: tests/e2e/310-metrics.sh parses /metrics;
# awscli, s3cmd, python3-boto3: tests/e2e/320-s3.sh's S3 clients;
# nginx-light, varnish: tests/e2e/330 and 340 serve a published store
# and cache through a real nginx and Varnish; openssh-client is the ssh
# transport's, openssh-server tests/e2e/400-ssh-transport.sh's sshd).
DEB_PKGS := gcc make pkg-config libuv1-dev libcurl4-openssl-dev \
	libsqlite3-dev liblz4-dev libzstd-dev libfuse3-dev fuse3 libssl-dev \
	libcmocka-dev libhttp-parser-dev libxxhash-dev libjansson-dev attr sqlite3 curl \
	python3 python3-prometheus-client rsync clang-format openssl \
	iproute2 psmisc procps zstd awscli s3cmd python3-boto3 nginx-light varnish \
	openssh-client openssh-server
# make bench / bench-micro only: the peer tools, their web server, the
# time(1) that reports peak RSS, the chart.
BENCH_PKGS := rclone casync nginx-light time gnuplot-nox linux-perf

CC ?= gcc
WARN := -Wall -Wextra -Wshadow -Wformat=2 -Wmissing-prototypes -Wvla -Werror
BASE_CFLAGS := -std=gnu11 $(WARN) -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 \
	-DFUSE_USE_VERSION=312 -I. -MMD -MP -pthread

ifeq ($(VARIANT),release)
OPT := -O2 -g
else ifeq ($(VARIANT),debug)
OPT := -O0 -g3
else ifeq ($(VARIANT),asan)
OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=undefined
SAN_LDFLAGS := -fsanitize=address,undefined
else ifeq ($(VARIANT),fuzz)
# make fuzz: clang, every library with libFuzzer's coverage, ASan+UBSan.
# -Wformat-nonliteral: clang flags the logger's vsnprintf, which gcc's
# -Wformat=2 leaves alone (the format is the caller's checked literal).
CC := clang
OPT := -O1 -g -fno-omit-frame-pointer \
	-fsanitize=address,undefined,fuzzer-no-link \
	-fno-sanitize-recover=undefined -Wno-format-nonliteral
SAN_LDFLAGS := -fsanitize=address,undefined
else
$(error unknown VARIANT=$(VARIANT): use release, debug, asan or fuzz)
endif

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lhttp_parser
REPL_LIBS = $(shell pkg-config --libs $(REPL_PKGS) 2>/dev/null) -lhttp_parser -lm
HYD_LIBS = $(shell pkg-config --libs $(HYD_PKGS) 2>/dev/null) -lhttp_parser -lm
TOOL_LIBS = $(shell pkg-config --libs $(TOOL_PKGS) 2>/dev/null) -lm

CFLAGS ?=
LDFLAGS ?=
ALL_CFLAGS = $(BASE_CFLAGS) $(OPT) $(PKG_CFLAGS) $(CFLAGS)
ALL_LDFLAGS = -pthread $(SAN_LDFLAGS) $(LDFLAGS)
LIBS = $(PKG_LIBS) -lm

# Sources: each folder is a static library; *_main.c files are programs.
CAT_SRC  := $(sort $(wildcard catalog/*.c catalog/base/*.c catalog/httpd/*.c))
REPL_SRC := $(sort $(wildcard replicator/*/*.c))
HYD_SRC  := $(sort $(wildcard hydrator/*/*.c))
# ferry-hydrator's own room: hyd_main.c and what it alone uses
HYD_MAIN_SRC := $(sort $(wildcard hydrator/*.c))
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
BENCH_SRC := $(sort $(wildcard tests/bench/*.c))

obj = $(patsubst %.c,$(B)/%.o,$(1))

CAT_LIB  := $(B)/lib/libferry_catalog.a
REPL_LIB := $(B)/lib/libferry_replicator.a
HYD_LIB  := $(B)/lib/libferry_hydrator.a
ALL_LIBS := $(HYD_LIB) $(REPL_LIB) $(CAT_LIB)

PROGS := $(B)/bin/ferry-replicator $(B)/bin/ferry-hydrator $(B)/bin/ferry
UNITS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))
TSUP_OBJ := $(B)/tests/unit/tsupport.o
FUZZERS := $(patsubst tests/fuzz/%.c,$(B)/fuzz/%,$(FUZZ_SRC))
BENCH_PROGS := $(patsubst tests/bench/%.c,$(B)/bench/%,$(BENCH_SRC))

.PHONY: all check check-run asan demo deps deps-bench deps-fuzz bench bench-micro fuzz fuzz-targets lint install clean tests

all: $(PROGS)

tests: $(PROGS) $(UNITS) $(FUZZERS) $(BENCH_PROGS) $(B)/bench/rttproxy

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(CAT_LIB): $(call obj,$(CAT_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(REPL_LIB): $(call obj,$(REPL_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(HYD_LIB): $(call obj,$(HYD_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(B)/bin/ferry-replicator: $(call obj,replicator/repl_main.c) $(REPL_LIB) $(CAT_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(REPL_LIBS)
$(B)/bin/ferry-hydrator: $(call obj,$(HYD_MAIN_SRC)) $(HYD_LIB) $(CAT_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(HYD_LIBS)

TOOLS_SRC := $(sort $(wildcard tools/*.c))
$(B)/bin/ferry: $(call obj,$(TOOLS_SRC)) $(HYD_LIB) $(REPL_LIB) $(CAT_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(TOOL_LIBS)

# Unit tests link every library; each is one cmocka program.
$(B)/tests/%: $(B)/tests/unit/%.o $(TSUP_OBJ) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(TSUP_OBJ) $(ALL_LIBS) $(LIBS)

# Fuzz targets: LLVMFuzzerTestOneInput plus tests/fuzz_driver/fuzz_replay.c,
# a driver that replays a corpus directory and checks each input's verdict
# against its ok_/bad_ name (used by make check).
$(B)/fuzz/%: $(B)/tests/fuzz/%.o $(B)/tests/fuzz_driver/fuzz_replay.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(B)/tests/fuzz_driver/fuzz_replay.o $(ALL_LIBS) $(LIBS)

# make fuzz: the same targets linked with libFuzzer (VARIANT=fuzz: clang,
# coverage in every library), each run for FUZZ_SECONDS from a scratch copy
# of its corpus (tests/fuzz/run.sh); a crash, a leak or a sanitizer report
# fails it and leaves the input under build/fuzz/artifacts/.
FUZZ_SECONDS ?= 60
$(B)/libfuzzer/%: $(B)/tests/fuzz/%.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -fsanitize=fuzzer -o $@ $< $(ALL_LIBS) $(LIBS)
fuzz-targets: $(patsubst tests/fuzz/%.c,$(B)/libfuzzer/%,$(FUZZ_SRC))
fuzz: deps-fuzz
	$(MAKE) VARIANT=fuzz fuzz-targets
	tests/fuzz/run.sh build/fuzz $(FUZZ_SECONDS)

# Helpers of make bench-micro (built with the tests, so CI compiles them).
$(B)/bench/%: $(B)/tests/bench/%.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(ALL_LIBS) $(LIBS)
# make bench's round-trip injector (bench/rttproxy.c): libc only.
$(B)/bench/rttproxy: bench/rttproxy.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -D_GNU_SOURCE $(OPT) $(CFLAGS) $(ALL_LDFLAGS) -o $@ $<
$(B)/tests/fuzz_driver/fuzz_replay.o: tests/fuzz_driver/fuzz_replay.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

asan:
	$(MAKE) VARIANT=asan all tests

# make check: the README's test command. Release build first, then the same
# suite against the ASan+UBSan build. Strict (tests/run.sh --strict): a test
# that skips fails, as does a suite that finds no test; STRICT=0 lets skips
# pass (a machine that cannot mount FUSE).
STRICT ?= 1
RUN_FLAGS := $(if $(filter 0,$(STRICT)),,--strict)
check: deps
	$(MAKE) VARIANT=$(VARIANT) lint tests
	tests/run.sh $(RUN_FLAGS) $(B)
ifeq ($(VARIANT),release)
ifneq ($(FERRY_SKIP_ASAN),1)
	$(MAKE) VARIANT=asan tests
	tests/run.sh $(RUN_FLAGS) build/asan
endif
endif

demo: deps
	$(MAKE) VARIANT=$(VARIANT) all
	examples/quickstart.sh $(B)

deps:
	@tools/deps.sh $(DEB_PKGS)

deps-bench: deps
	@tools/deps.sh $(BENCH_PKGS)

deps-fuzz: deps
	@tools/deps.sh clang

# make bench: ferry against rsync, rclone and casync over a shaped link
# (needs root; see bench/run.sh for the knobs). make bench-micro: the hot
# paths against this machine's limits. Both write under build/bench/.
NEED_ROOT = @[ "$$(id -u)" = 0 ] || { echo "make $@ needs root: network namespaces, tbf and FUSE mounts (run it as root)" >&2; exit 2; }

bench:
	$(NEED_ROOT)
	$(MAKE) deps-bench
	$(MAKE) VARIANT=release all build/release/bench/rttproxy
	bench/run.sh build/release

bench-micro:
	$(NEED_ROOT)
	$(MAKE) deps-bench
	$(MAKE) VARIANT=release all $(patsubst $(B)/%,build/release/%,$(BENCH_PROGS))
	bench/micro.sh build/release

lint:
	@tools/lint.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 docs/man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/

clean:
	rm -rf build

-include $(shell find $(B) -name '*.d' 2>/dev/null)
