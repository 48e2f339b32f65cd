# Thin wrapper over CMake. `make test` is the command the README and CI run.
BUILD ?= build
SAN_BUILD ?= build-san
FUZZ_SECONDS ?= 30
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local

.PHONY: all build test test-fast test-san test-tsan fuzz bench install clean

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

# Every test: optimized build, the same tests under ASan+UBSan, then the fuzz targets for a
# bounded time each.
test: test-fast test-san test-tsan fuzz

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-san:
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_SANITIZE=ON
	cmake --build $(SAN_BUILD) -j $(JOBS)
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS)

test-tsan:
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_TSAN=ON
	cmake --build build-tsan -j $(JOBS) --target test_attention
	cd build-tsan && ctest --output-on-failure -R test_attention_threads

fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS)

bench: build
	$(BUILD)/tq codec-bench --dim 128 --bits 2,3,3.5,4,8 --n 200000

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) build-tsan build-fuzz
