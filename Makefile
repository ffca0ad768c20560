# bankml: plain GNU make. `make` builds ./bankml, `make test` runs every test,
# `make check-asan` the same suite under AddressSanitizer and UBSan, `make bench` the benchmarks.
CXX      ?= g++
OPT      ?= -O2
CXXFLAGS ?= $(OPT) -g
# Baseline x86-64 on purpose: faster instruction sets are chosen at run time per function.
# -ffp-contract=off: a multiply-add is fused only where the code says std::fma or an FMA intrinsic,
# never by the compiler in target("fma") functions, so the bits follow the written order.
BASEFLAGS := -std=c++20 -ffp-contract=off -Wall -Wextra -pthread -Isrc -Itests -MMD -MP
LDFLAGS  ?=
# libstdc++/libgcc static, glibc dynamic: a fully static binary crashes when it dlopens the Vulkan loader.
LINKFLAGS := -static-libstdc++ -static-libgcc -pthread
LDLIBS   := -ldl

BUILD    ?= build
SRCS     := $(shell find src -name '*.cpp' | sort)
TSRCS    := $(sort $(wildcard tests/*.cpp))
OBJS     := $(SRCS:%.cpp=$(BUILD)/%.o)
TOBJS    := $(TSRCS:%.cpp=$(BUILD)/%.o)
MAINOBJ  := $(BUILD)/bankml.o
TESTBIN  := $(BUILD)/bankml_tests

# One binary for any x86-64 Linux with glibc GLIBC_FLOOR or later (docs/modules/build.md): ./bankml links
# against stubs of glibc's libraries that export each symbol only at its newest version not above
# the floor, plus local definitions of the few newer symbols the compiler's own libraries call.
# libpthread and libdl stay needed: before glibc 2.34 pthread_create and dlopen live there.
# -z now binds every symbol at start, so a missing one stops the program before it does anything.
GLIBC_FLOOR ?= 2.17
STUBS    := $(BUILD)/glibc-$(GLIBC_FLOOR)
COMPATOBJ := $(BUILD)/support/glibc-compat.o
PORTABLE := -L$(STUBS) -Wl,--wrap=__libc_start_main -Wl,-z,now \
            -Wl,--push-state,--no-as-needed -lpthread -ldl -Wl,--pop-state
# Debian 11's C library (glibc 2.31), unpacked by `make old-glibc` or .ci/run, for the tests that run
# ./bankml through an old loader; the tests skip without it unless BANKML_REQUIRE_OLD_GLIBC=1.
OLD_GLIBC ?= $(HOME)/.cache/bankml/debian11-libc

ASANBUILD := build-asan
ASANFLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

VULKAN_H := $(firstword $(wildcard /usr/include/vulkan/vulkan.h /usr/local/include/vulkan/vulkan.h))

.PHONY: all test check-asan fuzz bench run clean vulkan-headers old-glibc
all: bankml

# The Vulkan headers are the one build-time package: install them when we can, else say how.
vulkan-headers:
ifeq ($(VULKAN_H),)
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "bankml: installing the Vulkan headers (libvulkan-dev)"; \
	  (apt-get install -y -qq libvulkan-dev >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq libvulkan-dev >/dev/null)) \
	  || { echo "bankml: could not install libvulkan-dev; run: sudo apt-get install -y libvulkan-dev" >&2; exit 1; }; \
	else echo "bankml: the Vulkan headers are missing; run: sudo apt-get install -y libvulkan-dev" >&2; exit 1; fi
endif

bankml: $(MAINOBJ) $(OBJS) $(COMPATOBJ) $(STUBS)/libc.so.6 scripts/glibc-check.sh
	$(CXX) $(LDFLAGS) -o $@ $(MAINOBJ) $(OBJS) $(COMPATOBJ) $(LINKFLAGS) $(PORTABLE) $(LDLIBS)
	@scripts/glibc-check.sh $@ $(GLIBC_FLOOR)

$(STUBS)/libc.so.6: scripts/glibc-stubs.sh
	scripts/glibc-stubs.sh $(STUBS) $(GLIBC_FLOOR) $(CC)

$(COMPATOBJ): support/glibc-compat.c Makefile
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -Wall -Wextra -c $< -o $@

$(BUILD)/%.o: %.cpp Makefile | vulkan-headers
	@mkdir -p $(dir $@)
	$(CXX) $(BASEFLAGS) $(CXXFLAGS) -c $< -o $@

$(TESTBIN): $(TOBJS) $(OBJS)
	$(CXX) $(LDFLAGS) -o $@ $^ $(LINKFLAGS) $(LDLIBS)

# T=pattern runs only the tests whose names contain the pattern. The binary is needed by CLI tests.
test: bankml $(TESTBIN)
	BANKML_BIN=$(CURDIR)/bankml BANKML_GLIBC_FLOOR=$(GLIBC_FLOOR) BANKML_OLD_GLIBC=$(OLD_GLIBC) ./$(TESTBIN) $(T)

old-glibc:
	scripts/old-glibc.sh $(OLD_GLIBC)

check-asan:
	$(MAKE) BUILD=$(ASANBUILD) CXXFLAGS="$(ASANFLAGS)" LDFLAGS="-fsanitize=address,undefined" \
	  LINKFLAGS="-pthread" $(ASANBUILD)/bankml_tests $(ASANBUILD)/bankml-asan
	ASAN_OPTIONS=detect_leaks=1:suppressions=$(CURDIR)/tests/asan.supp LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  BANKML_FUZZ_SEED=$(BANKML_FUZZ_SEED) BANKML_FUZZ_COUNT=$(BANKML_FUZZ_COUNT) \
	  BANKML_BIN=$(CURDIR)/$(ASANBUILD)/bankml-asan BANKML_ASAN=1 ./$(ASANBUILD)/bankml_tests $(T)

$(ASANBUILD)/bankml-asan: $(ASANBUILD)/bankml.o $(SRCS:%.cpp=$(ASANBUILD)/%.o)
	$(CXX) $(LDFLAGS) -o $@ $^ $(LINKFLAGS) $(LDLIBS)

# `make fuzz SEED=7 COUNT=20000`: the GGUF fuzz tests of `make test`, with that many seeded byte
# flips, under AddressSanitizer and UBSan.
SEED  ?= 1
COUNT ?= 20000
fuzz:
	$(MAKE) check-asan T=fuzz_gguf BANKML_FUZZ_SEED=$(SEED) BANKML_FUZZ_COUNT=$(COUNT)

bench: bankml
	./bankml bench pool
	./bankml bench memory
	./bankml bench kernels

# `make run`: the model benchmark on the embedded default (a synthetic 1.7B Q1_0 model).
run: bankml
	./bankml bench

clean:
	rm -rf $(BUILD) $(ASANBUILD) bankml

-include $(shell find $(BUILD) $(ASANBUILD) -name '*.d' 2>/dev/null)
