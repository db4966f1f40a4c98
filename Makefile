# nibble — top-level driver. `make` builds, `make test` runs every test, `make run`
# serves the embedded default model and benchmarks it. See README.md.
JOBS        ?= $(shell nproc)
BUILD       ?= build
ASAN_BUILD  ?= build-asan
FUZZ_BUILD  ?= build-fuzz
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all build deps test test-main test-asan test-fuzz test-gpu run clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# Every test that needs no GPU, then the unit tests again under ASan+UBSan, then the
# fuzz harnesses for a bounded number of iterations. GPU tests skip (exit 77) without one.
test: deps
	$(MAKE) build
	$(MAKE) test-main test-asan test-fuzz

test-main:
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

test-asan:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DNIBBLE_CUDA=OFF -DNIBBLE_SANITIZE=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L unit $(CTEST_FLAGS)

test-fuzz:
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DNIBBLE_CUDA=OFF -DNIBBLE_FUZZ=ON
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target nb_fuzz_all
	cd $(FUZZ_BUILD) && ctest --output-on-failure -j $(JOBS) -L fuzz $(CTEST_FLAGS)

# On the GPU machine: only the tests labelled gpu.
test-gpu: build
	cd $(BUILD) && ctest --output-on-failure -L gpu $(CTEST_FLAGS)

run: deps
	$(MAKE) build
	@scripts/run.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
