# Thin wrapper over CMake. `make test` is the command the README and CI run.
BUILD ?= build
SAN_BUILD ?= build-san
FUZZ_SECONDS ?= 10
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local

.PHONY: all build test test-fast test-avx2 test-san test-tsan test-arm fuzz bench install clean

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

# Seconds one test may run before ctest fails it (the longest take about a minute): a hang
# fails its stage instead of running CI into its limit.
TEST_TIMEOUT ?= 600

# Every test: optimized build (and again with the AVX2 kernels), the same tests under ASan+UBSan,
# ThreadSanitizer, aarch64 under qemu, then the fuzz targets for a
# bounded time each; at the end, what was skipped in each build.
test: test-fast test-avx2 test-san test-tsan test-arm fuzz
	@echo "== skipped in make test (tests/test_util.h: a skip is never a pass) =="
	@for d in $(BUILD) $(SAN_BUILD) build-tsan build-arm; do (cd $$d && $(SKIP_SUMMARY)); done

# A test that cannot run (no model, no data, a CPU without a kernel's instructions) exits 77,
# which ctest reports as "Skipped" (SKIP_RETURN_CODE in CMakeLists.txt); a test that runs but
# leaves a part out prints "skip ..." and passes on the rest. After each ctest run, every such
# line the tests printed, with the ctest name in front, from ctest's log.
SKIP_SUMMARY = awk -v build="$$(basename "$$PWD")" \
	'/^[0-9]+\/[0-9]+ Testing: / { t = $$3 } \
	 /^skip / { if (!n++) print "skips reported by the tests in " build ":"; print "  " t ": " substr($$0, 6) } \
	 END { if (!n) print "no skips reported by the tests in " build }' \
	Testing/Temporary/LastTest.log 2>/dev/null || true

test-fast: build
	cd $(BUILD) && { ctest --output-on-failure --timeout $(TEST_TIMEOUT) -j $(JOBS); rc=$$?; $(SKIP_SUMMARY); exit $$rc; }

# The model's tests again as an AVX2-only CPU without AVX-VNNI runs them (the engine's and the
# library's AVX2 kernels: TQ_KERNELS=avx2 TQ_AVXVNNI=0), where the CPU has more than that: the
# tests that run the kernel sets the CPU picks through the whole model. The kernel and codec
# tests (test_kernels, test_quants, test_codec, test_attention, ...) test every set the CPU has
# against the reference in test-fast already, test_attention_avx2 the attention driver on the
# AVX2 tables, and the tools' tests no kernel set changes. Where the forcing changes nothing
# (`tq --version` names the codec, attention and weight kernels in use: the same with and
# without it, as on an AVX2 CPU without AVX-VNNI), the stage says so and skips.
AVX2_TESTS = ^(test_model|test_model_smollm2|test_model_kv|test_batch|test_contexts|test_context_fork|test_prompt_cache|test_tiny_model|test_weight_types|test_activation|test_thread_invariance)$$
AVX2_ENV = TQ_KERNELS=avx2 TQ_AVXVNNI=0
test-avx2: build
	@auto=$$($(BUILD)/tq --version) && forced=$$($(AVX2_ENV) $(BUILD)/tq --version) && \
	if [ "$$auto" = "$$forced" ]; then \
		echo "SKIP test-avx2: $(AVX2_ENV) picks what this CPU picks anyway ($$auto); test-fast ran it"; \
		exit 0; fi; \
	cd $(BUILD) && { $(AVX2_ENV) ctest --output-on-failure --timeout $(TEST_TIMEOUT) -j $(JOBS) -R '$(AVX2_TESTS)'; rc=$$?; $(SKIP_SUMMARY); exit $$rc; }

# Under ASan and UBSan everything but test_attention_ref, test_attention with every kernel
# forced to the scalar reference (TQ_FORCE_REF=1; 130 s under ASan): test_attention runs the
# reference kernels beside every SIMD table under the sanitizers, and test-fast runs the
# forced-reference decode.
SAN_SKIP = ^(test_attention_ref)$$
test-san:
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_SANITIZE=ON
	cmake --build $(SAN_BUILD) -j $(JOBS)
	cd $(SAN_BUILD) && { ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure --timeout $(TEST_TIMEOUT) -j $(JOBS) -E '$(SAN_SKIP)'; rc=$$?; $(SKIP_SUMMARY); exit $$rc; }

test-tsan:
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_TSAN=ON
	cmake --build build-tsan -j $(JOBS) --target test_attention test_kvcache_fork test_kvcache test_contexts test_context_fork test_threadpool test_batch tq
	cd build-tsan && { ctest --output-on-failure --timeout $(TEST_TIMEOUT) -R 'test_attention_threads|test_kvcache_fork_threads|test_kvcache_pool|test_contexts|test_context_fork|test_threadpool|test_batch|tq_serve'; rc=$$?; $(SKIP_SUMMARY); exit $$rc; }

# The library and its kernel tests cross-built for aarch64 (gcc-aarch64-linux-gnu) and run under
# qemu-aarch64-static: the NEON kernels against the scalar reference, bit for bit where the x86
# ones are, and the library's own tests that stay short under emulation.
ARM_TESTS = test_kernels|test_quants|test_attention_kernels|test_attention_kernels_armv80|test_golden|test_errors|test_abi|test_key_transform|test_kvcache|test_cachefile|test_sink
test-arm:
	cmake -S . -B build-arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DTQ_LIB_ONLY=ON \
		-DCMAKE_BUILD_TYPE=Release
	cmake --build build-arm -j $(JOBS)
	cd build-arm && { ctest --output-on-failure --timeout $(TEST_TIMEOUT) -j $(JOBS) -R '^($(ARM_TESTS))$$'; rc=$$?; $(SKIP_SUMMARY); exit $$rc; }

fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS)

bench: build
	$(BUILD)/tq codec-bench --dim 128 --bits 2,3,3.5,4,8 --n 200000

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) build-tsan build-arm build-fuzz
