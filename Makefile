# arrheap - plain Makefile.  `make` builds the library and tools into build/;
# `make test` runs the Criterion suite; `make asan|ubsan|tsan` run it under a
# sanitizer in build-<san>/.  Every target installs missing Debian packages
# first (`make deps`).  See README.md.

# Builds run a job per core unless -j is given (CI's `make test` included).
ifeq ($(filter -j% --jobs%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif

PREFIX ?= /usr/local
BUILD ?= build
CC ?= cc
PKGS := liblmdb-dev libjemalloc-dev libxxhash-dev libcriterion-dev lmdb-utils rclone

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wpointer-arith -Wundef
ifeq ($(CI),true)
WARN += -Werror
endif
OPT ?= -O2 -g
SAN ?=
CFLAGS_ALL := -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) -fPIC -I. -Iinclude $(SAN) $(CFLAGS)
LDLIBS_ALL := -llmdb -lpthread -lm $(LDLIBS)

LIB_SRC := $(wildcard heap/*.c) $(wildcard arrangement/*.c) $(wildcard txn/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
# tools/engine (the operators: arrange_by, reduce, join) is public-API-only
# code shared by the tools like tools/common.
TOOL_COMMON := $(wildcard tools/common/*.c) $(wildcard tools/engine/*.c)
TOOL_COMMON_OBJ := $(TOOL_COMMON:%.c=$(BUILD)/obj/%.o)
TEST_SRC := $(wildcard tests/*/*.c tests/*/*/*.c)
TEST_SRC := $(filter-out tests/fuzz/%,$(TEST_SRC))
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
TOOLS := $(BUILD)/ah-load $(BUILD)/ah-dump $(BUILD)/ah-snapshot
HDRS := $(wildcard include/*.h heap/*.h arrangement/*.h txn/*.h tools/common/*.h tools/engine/*.h tests/*.h tests/*/*.h tests/*/*/*.h)

# ---- ah-pgsync (PostgreSQL logical replication engine, tools/pg/) ----------
# Links libpq; `make demo` runs tools/demo.sh against a throwaway cluster.
PKGS += postgresql postgresql-contrib libpq-dev
PG_INC := $(shell pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)
PG_SRC := $(wildcard tools/pg/*.c)
PG_OBJ := $(PG_SRC:%.c=$(BUILD)/obj/%.o)
HDRS += $(wildcard tools/pg/*.h)
TOOLS += $(BUILD)/ah-pgsync
CFLAGS_ALL += -I$(PG_INC)
.DEFAULT_GOAL := all
$(BUILD)/ah-pgsync: $(BUILD)/obj/tools/ah-pgsync.o $(PG_OBJ) $(TOOL_COMMON_OBJ) $(BUILD)/libarrheap.a
	$(CC) $(SAN) -o $@ $^ $(LDLIBS_ALL) -lpq
# ---- end ah-pgsync ----------------------------------------------------------

.PHONY: all deps ship-deps test asan ubsan tsan clean install demo torture cases
# Keep object files make considers intermediate (tools), so nothing rebuilds twice.
.SECONDARY:
all: deps $(BUILD)/libarrheap.a $(BUILD)/libarrheap.so $(BUILD)/arrheap.pc $(TOOLS)

deps:
	@missing=""; for p in $(PKGS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null || exit 1; \
	  else echo "missing packages; run: sudo apt-get install -y$$missing"; exit 1; fi; fi

# A change of flags rebuilds everything.
$(BUILD)/.flags: FORCE
	@mkdir -p $(BUILD); echo '$(CC) $(CFLAGS_ALL) $(LDLIBS_ALL)' | cmp -s - $@ || echo '$(CC) $(CFLAGS_ALL) $(LDLIBS_ALL)' > $@
FORCE:

$(BUILD)/obj/%.o: %.c $(HDRS) $(BUILD)/.flags | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# the AVX2 XXH3 of pages and chunks (heap/hash.c), called only on CPUs with
# AVX2
$(BUILD)/obj/heap/hash.o: CFLAGS_ALL += -mavx2

# Tests by what they may see (conventions §7).  tests/api, tests/crash,
# tests/stress, tests/misuse and tests/holds see only the public header: they are
# compiled without -I. (and without libpq's include path), so an
# #include "heap/heap.h" or "tools/common/..." there does not compile.
# Their helpers are tests/lib (public API only).  The other kinds (unit,
# fault, format, dump, pg, cases) may see internals and get -I. as well.
PUBLIC_TEST_DIRS := tests/api tests/crash tests/stress tests/misuse tests/holds
PUBLIC_TEST_OBJ := $(filter $(addsuffix /%,$(addprefix $(BUILD)/obj/,$(PUBLIC_TEST_DIRS))),$(TEST_OBJ))
CFLAGS_PUBLIC_TEST := $(filter-out -I. -I$(PG_INC),$(CFLAGS_ALL)) -Itests/lib
$(PUBLIC_TEST_OBJ): $(BUILD)/obj/%.o: %.c $(HDRS) $(BUILD)/.flags | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_PUBLIC_TEST) -c $< -o $@
$(filter-out $(PUBLIC_TEST_OBJ),$(TEST_OBJ)): $(BUILD)/obj/%.o: %.c $(HDRS) $(BUILD)/.flags | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests/lib -c $< -o $@

# The pool's jemalloc is the library's own copy (ARCHITECTURE.md section 7):
# Debian's libjemalloc_pic.a (libjemalloc-dev), partially linked from the four
# entry points heap/pool.c calls, those renamed ahj_* and every other symbol
# made local, so that linking arrheap leaves the process's malloc (and an
# application's own jemalloc) alone.  Its load-time constructor stays: a
# jemalloc that initialized lazily, at the first write, let a fork() on
# another thread during that initialization leave the child with
# jemalloc's init lock held (measured: 15 hung children in 200 trials;
# tests/api/test_malloc.c).  Sanitizer builds, whose pool uses the system
# malloc (-DAH_POOL_SYSTEM_MALLOC), carry none.
JEMALLOC_PIC = $(shell $(CC) -print-file-name=libjemalloc_pic.a)
JE_API := mallocx rallocx sdallocx mallctl
ifeq ($(findstring AH_POOL_SYSTEM_MALLOC,$(SAN) $(CFLAGS)),)
JE_OBJ := $(BUILD)/obj/jemalloc_priv.o
endif
$(BUILD)/obj/jemalloc_priv.o: Makefile | deps
	@mkdir -p $(dir $@)
	$(LD) -r -o $@.part $(addprefix -u ,$(JE_API)) $(JEMALLOC_PIC)
	objcopy $(foreach s,$(JE_API),--redefine-sym $(s)=ahj_$(s) -G ahj_$(s)) $@.part $@
	rm -f $@.part

# libarrheap.a is one object, partially linked from the library's objects
# and the private jemalloc, whose only global names are the public ah_*
# (as libarrheap.so's version script exports): a program that links it
# statically may use any other name (pool_create, run_sort, txn_begin, ...)
# for itself.  The suite's unit tests call the internals: they link the
# plain archive of the objects, which is not installed.
$(BUILD)/obj/libarrheap.o: $(LIB_OBJ) $(JE_OBJ)
	$(LD) -r -o $@.part $^
	objcopy --wildcard --keep-global-symbol='ah_*' $@.part $@
	rm -f $@.part
$(BUILD)/libarrheap.a: $(BUILD)/obj/libarrheap.o
	rm -f $@; ar rcs $@ $^
$(BUILD)/obj/libarrheap-internal.a: $(LIB_OBJ) $(JE_OBJ)
	rm -f $@; ar rcs $@ $^

$(BUILD)/libarrheap.so: $(LIB_OBJ) $(JE_OBJ) arrheap.map
	$(CC) $(SAN) -shared -Wl,--version-script=arrheap.map -Wl,-soname,libarrheap.so.0 -o $@ $(LIB_OBJ) $(JE_OBJ) $(LDLIBS_ALL)

$(BUILD)/arrheap.pc: arrheap.pc.in Makefile
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(shell sed -n 's/.*AH_VERSION_STRING "\(.*\)"/\1/p' include/arrheap.h)|' $< > $@

$(BUILD)/ah-%: $(BUILD)/obj/tools/ah-%.o $(TOOL_COMMON_OBJ) $(BUILD)/libarrheap.a
	$(CC) $(SAN) -o $@ $^ $(LDLIBS_ALL)

# ah-pgsync's pieces that need no libpq (row encoding, table records, the
# views' parser, arithmetic and compiler) are unit-tested in the suite.
PG_PURE_OBJ := $(addprefix $(BUILD)/obj/tools/pg/,row.o tables.o decimal.o viewsql.o views.o)
$(BUILD)/tests/suite: $(TEST_OBJ) $(TOOL_COMMON_OBJ) $(PG_PURE_OBJ) $(BUILD)/obj/libarrheap-internal.a
	@mkdir -p $(dir $@)
	$(CC) $(SAN) -o $@ $^ $(LDLIBS_ALL) -lcriterion

# The shipping test (tests/ship) runs an S3 server from npm (s3rver, pinned
# by tests/ship/package-lock.json; ARCHITECTURE.md section 11).  `make test`
# runs `npm ci` there only when node_modules is missing, as `make deps` does
# for Debian packages; npm itself comes from Debian's npm when absent.
SHIP_MODULES := tests/ship/node_modules/.package-lock.json
ship-deps: $(SHIP_MODULES)
$(SHIP_MODULES): | deps
	@command -v npm >/dev/null || $(MAKE) --no-print-directory deps PKGS='nodejs npm'
	cd tests/ship && npm ci --no-audit --no-fund --loglevel=error

# The suite finds the tools and the cases through these variables.
TEST_ENV = AH_BUILD=$(abspath $(BUILD)) AH_SRC=$(abspath .) AH_SAN='$(SAN)' \
	LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
CRITERION_FLAGS ?= -j2

test: all $(BUILD)/tests/suite | $(SHIP_MODULES)
	$(TEST_ENV) $(BUILD)/tests/suite $(CRITERION_FLAGS)

torture: all $(BUILD)/tests/suite | $(SHIP_MODULES)
	$(TEST_ENV) AH_TORTURE=1 $(BUILD)/tests/suite $(CRITERION_FLAGS)

cases: all
	bash tests/cases/run.sh tests/cases $(BUILD)

asan:
	$(MAKE) BUILD=build-asan SAN='-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -DAH_POOL_SYSTEM_MALLOC' test
ubsan:
	$(MAKE) BUILD=build-ubsan SAN='-fsanitize=undefined -fno-sanitize-recover=undefined -DAH_POOL_SYSTEM_MALLOC' test
tsan: tsan-run

# KEEP=1 keeps the heap and the (stopped) cluster and says where.
demo: all
	KEEP=$(KEEP) bash tools/demo.sh $(BUILD)

# `make demo-restore`: the machine running ah-pgsync is lost mid-run and a
# heap restored from incremental snapshots (ah-snapshot) resumes the stream
# (tools/demo-restore.sh; SCALE=5 SECS=40 INTERVAL=3, KEEP=1 as for demo).
SCALE ?= 5
SECS ?= 40
INTERVAL ?= 3
.PHONY: demo-restore
demo-restore: all
	@$(MAKE) --no-print-directory deps PKGS=jq
	SCALE=$(SCALE) SECS=$(SECS) INTERVAL=$(INTERVAL) KEEP=$(KEEP) bash tools/demo-restore.sh $(BUILD)

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 644 include/arrheap.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libarrheap.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libarrheap.so $(DESTDIR)$(PREFIX)/lib/libarrheap.so.0
	ln -sf libarrheap.so.0 $(DESTDIR)$(PREFIX)/lib/libarrheap.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(shell sed -n 's/.*AH_VERSION_STRING "\(.*\)"/\1/p' include/arrheap.h)|' arrheap.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/arrheap.pc
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 tools/ah-dump.1 tools/ah-load.1 tools/ah-pgsync.1 tools/ah-snapshot.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	# the library carries a copy of jemalloc (BSD-2-Clause): its notice
	install -d $(DESTDIR)$(PREFIX)/share/doc/arrheap
	install -m 644 /usr/share/doc/libjemalloc-dev/copyright $(DESTDIR)$(PREFIX)/share/doc/arrheap/jemalloc-copyright

clean:
	rm -rf build build-asan build-ubsan build-tsan

# ---- ah-dump (issue 5): its command files, and the heap fuzzer ----------
# `make fuzz` runs libFuzzer (clang) over the open + verify + read path with
# mutated heap files for FUZZ_TIME seconds, seeded from tests/fuzz/corpus;
# crashes land in tests/fuzz/crashers.  `make test` replays both folders
# (live::fuzz_regressions in tests/dump/test_live.c), so every crasher stays a regression test.
DUMP_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/dump/*.c))
$(DUMP_OBJ) $(BUILD)/obj/tools/ah-dump.o: tools/dump/dump.h
$(BUILD)/ah-dump: $(BUILD)/obj/tools/ah-dump.o $(DUMP_OBJ) $(TOOL_COMMON_OBJ) $(BUILD)/libarrheap.a
	$(CC) $(SAN) -o $@ $^ $(LDLIBS_ALL)

FUZZ_TIME ?= 600
FUZZ_CC ?= clang
FUZZ_SAN := -fsanitize=address,undefined -fno-omit-frame-pointer
.PHONY: fuzz fuzz-build
fuzz-build:
	$(MAKE) BUILD=build-fuzz CC=$(FUZZ_CC) SAN='$(FUZZ_SAN) -fsanitize=fuzzer-no-link -DAH_POOL_SYSTEM_MALLOC' build-fuzz/libarrheap.a
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -O1 -g -I. -Iinclude $(FUZZ_SAN) -fsanitize=fuzzer \
	  -o build-fuzz/fuzz_heap tests/fuzz/fuzz_heap.c build-fuzz/libarrheap.a $(LDLIBS_ALL)
fuzz: fuzz-build
	@mkdir -p build-fuzz/corpus tests/fuzz/crashers
	build-fuzz/fuzz_heap -max_total_time=$(FUZZ_TIME) -rss_limit_mb=4096 -timeout=20 \
	  -artifact_prefix=tests/fuzz/crashers/ build-fuzz/corpus tests/fuzz/corpus

# ---- benchmarks (bench/, BENCHMARKS.md) --------------------------------------
# `make bench-quick`: 1M and 10M updates (about 6 minutes); `make bench`: 1M,
# 10M and 100M (about 90 minutes; needs ~32 GB free under build/bench/data,
# checked first, removed at the end) plus
# the perf/callgrind profiles of arrheap's ingest and merge.  Output in
# build/bench/: the table (stdout, table.md), results.json, startup.png.
# BENCH_PKGS are installed by these targets only, never by `make deps`, so
# `make test` does not pull RocksDB or gnuplot.  (gnuplot-nox: Debian's gnuplot
# without X, whose png terminal draws the plot.)
BENCH_PKGS := librocksdb-dev gnuplot-nox
# `make bench` also profiles (bench/profile.sh): perf and callgrind.
BENCH_PROFILE_PKGS := linux-perf valgrind
BENCH_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard bench/*.c))
BENCH_BINS := $(addprefix $(BUILD)/bench/,ah-bench ah-bench-arrheap ah-bench-rocksdb ah-bench-lmdb ah-bench-snapshot)
BENCH_ARGS ?=
.PHONY: bench bench-quick bench-deps bench-build
$(BENCH_OBJ): bench/bench.h bench/driver.h | bench-deps
bench-deps:
	@$(MAKE) --no-print-directory deps PKGS='$(BENCH_PKGS)'
bench-build: $(BENCH_BINS)
$(BUILD)/bench/ah-bench: $(BUILD)/obj/bench/driver.o $(BUILD)/obj/bench/report.o $(BUILD)/obj/bench/common.o
	@mkdir -p $(dir $@); $(CC) -o $@ $^ -lm
# ah-bench-arrheap, like the other systems' programs, runs on the C
# library's malloc; arrheap's pool brings its own jemalloc (libarrheap.a).
$(BUILD)/bench/ah-bench-arrheap: $(BUILD)/obj/bench/arrheap.o $(BUILD)/obj/bench/common.o $(BUILD)/libarrheap.a
	@mkdir -p $(dir $@); $(CC) -o $@ $^ $(LDLIBS_ALL)
$(BUILD)/bench/ah-bench-rocksdb: $(BUILD)/obj/bench/rocksdb.o $(BUILD)/obj/bench/common.o
	@mkdir -p $(dir $@); $(CC) -o $@ $^ -lrocksdb
$(BUILD)/bench/ah-bench-lmdb: $(BUILD)/obj/bench/lmdb.o $(BUILD)/obj/bench/common.o
	@mkdir -p $(dir $@); $(CC) -o $@ $^ -llmdb
$(BUILD)/bench/ah-bench-snapshot: $(BUILD)/obj/bench/snapshot.o $(BUILD)/libarrheap.a
	@mkdir -p $(dir $@); $(CC) -o $@ $^ $(LDLIBS_ALL)
# `make bench-snapshot`: push and restore costs (issue 15), 10M updates,
# 10 pushes, about a minute; SNAP_UPDATES and SNAP_PUSHES change them.
SNAP_UPDATES ?= 10000000
SNAP_PUSHES ?= 10
.PHONY: bench-snapshot
bench-snapshot: $(BUILD)/bench/ah-bench-snapshot
	rm -rf $(BUILD)/bench/snap && mkdir -p $(BUILD)/bench/snap
	$(BUILD)/bench/ah-bench-snapshot $(BUILD)/bench/snap $(SNAP_UPDATES) $(SNAP_PUSHES)
	@[ -n "$(KEEP)" ] || rm -rf $(BUILD)/bench/snap
# `make bench-views` (issue 14): pgbench tps with and without the views,
# view maintenance per input update, restart to the first view answer
# against recomputing the views (bench/views.sh; a throwaway cluster per
# scale, as make demo).  SCALES="10 100" SECS=60 by default (about 9
# minutes on 2 cores, most of it scale 100's copies and the engine with
# views catching up after pgbench); PERF_SECS=N also profiles the engine with perf
# for N s of the with-views run.  Writes $(BUILD)/bench/views-SCALE.txt
# (and views-SCALE.perf.txt).  Not part of `make test`.
SCALES ?= 10 100
PERF_SECS ?= 0
# SECS given on the command line or in the environment wins; otherwise 60
# (demo-restore's default of SECS is 40)
BENCH_VIEWS_SECS = $(if $(filter command line environment,$(origin SECS)),$(SECS),60)
.PHONY: bench-views
bench-views: all
	SCALES='$(SCALES)' SECS=$(BENCH_VIEWS_SECS) PERF_SECS=$(PERF_SECS) KEEP=$(KEEP) bash bench/views.sh $(BUILD)
bench-quick: bench-deps bench-build
	bash bench/bench.sh $(BUILD) --sizes 1000000,10000000 $(BENCH_ARGS)
bench: bench-deps bench-build
	@$(MAKE) --no-print-directory deps PKGS='$(BENCH_PROFILE_PKGS)'
	bash bench/bench.sh $(BUILD) --sizes 1000000,10000000,100000000 $(BENCH_ARGS)
	bash bench/profile.sh $(BUILD)
# ---- end benchmarks ----------------------------------------------------------

# ---- reliability (issue 7) ---------------------------------------------------
# `make tsan`: Criterion cannot start under ThreadSanitizer (its BoxFort arena
# wants fixed addresses that TSan reserves: Snaipe/Criterion#274), so the
# threaded tests are built against the stand-in header in tests/tsan/ into one
# runner (tests/tsan/driver.c), with the library built under TSan.  Any TSan
# report fails the run (exitcode 66).  `make fixture` rewrites the committed
# format fixture (tests/fixtures/heap-v1 and its .expect) from its generator.
TSAN_SAN := -fsanitize=thread -DAH_POOL_SYSTEM_MALLOC
TSAN_TESTS := tests/tsan/driver.c tests/stress/test_concurrency.c \
	tests/stress/test_readers.c tests/stress/test_writers.c tests/misuse/test_misuse.c \
	tests/api/test_snapshots.c tests/api/test_point_reads.c tests/stress/test_merge_par.c \
	tests/unit/test_bgmerge_whole.c
.PHONY: tsan-run fixture
tsan-run: deps
	$(MAKE) BUILD=build-tsan SAN='$(TSAN_SAN)' build-tsan/obj/libarrheap-internal.a
	@mkdir -p build-tsan/tsan
	$(CC) -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) -DAH_TSAN_DRIVER -Itests/tsan -Itests/lib -Iinclude -I. \
	  $(TSAN_SAN) -o build-tsan/tsan/driver $(TSAN_TESTS) build-tsan/obj/libarrheap-internal.a -llmdb -lpthread -lm
	TSAN_OPTIONS='exitcode=66 halt_on_error=1 suppressions=$(abspath tests/tsan/lmdb.supp) $(TSAN_OPTIONS)' AH_SRC=$(abspath .) build-tsan/tsan/driver
fixture: all $(BUILD)/tests/suite
	$(TEST_ENV) AH_FIXTURE_REGEN=1 $(BUILD)/tests/suite --filter 'format/fixture_generator'
# ---- end reliability ---------------------------------------------------------
