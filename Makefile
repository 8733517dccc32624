# dlcc build. `make` builds build/dlcc, build/libdlcc.a, build/libdlcc.so and the examples.
# `make test` runs the test suite; `make test-asan` runs it under ASan+UBSan (build-asan/).
CC      ?= cc
BUILD   ?= build
ONNX_PROTO ?= /usr/include/onnx/onnx.proto
OPT     ?= -O2
SAN     ?=
CFLAGS  ?=
# snprintf truncation is deliberate (messages are capped); gcc warns about it, clang has no such flag
WNO_TRUNC := $(shell $(CC) -Werror -Wno-format-truncation -E -x c /dev/null >/dev/null 2>&1 && echo -Wno-format-truncation)
CFLAGS  += -std=c11 $(OPT) -g -Wall -Wextra $(WNO_TRUNC) -fPIC -D_DEFAULT_SOURCE -D_FILE_OFFSET_BITS=64 $(SAN)
CPPFLAGS += -Iinclude -I$(BUILD)/gen -MMD -MP
LDFLAGS += $(SAN)
LDLIBS  += -lprotobuf-c -lm

LIB_SRC  := $(sort $(wildcard src/*/*.c))
TOOL_SRC := $(sort $(wildcard tools/*.c))
EX_SRC   := $(sort $(wildcard examples/*.c))
GEN_C    := $(BUILD)/gen/onnx.pb-c.c
RT_FILES := $(sort $(wildcard src/kernels/rt/*.h src/kernels/rt/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/onnx.pb-c.o $(BUILD)/obj/gen/rt-files.o
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
EX_BIN   := $(EX_SRC:examples/%.c=$(BUILD)/examples/%)
UNIT_SRC := $(sort $(wildcard tests/unit/*.c))
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

# Unit tests that compile the runtime kernels themselves (they include rt-lib.c) are also built
# once per instruction set, so every microkernel path is tested on one machine;
# tests/run-tests.sh runs the ones this CPU can execute. The avx2 build also runs every
# parallel path (DLRT_PAR_MIN=1).
ISA_UNITS := $(shell grep -l 'kernels/rt-lib.c' $(UNIT_SRC) 2>/dev/null)
ifeq ($(shell uname -m),x86_64)
ISA_BIN := $(foreach i,avx512 avx2 generic,$(ISA_UNITS:tests/unit/%.c=$(BUILD)/tests-isa/$(i)/%))
# the bfloat16 products (gemm-bf16.h) need AVX512-BF16, which x86-64-v4 lacks: their tests are
# built once more with it (and the parallel paths on every size, as the avx2 build)
ISA_BIN += $(BUILD)/tests-isa/avx512bf16/test_gemm_bf16 $(BUILD)/tests-isa/avx512bf16/test_conv_bf16
endif
ISA_CFLAGS := $(filter-out -O2,$(CFLAGS)) -O3 -pthread -DDLRT_THREADS -fopenmp-simd

all: $(BUILD)/dlcc $(BUILD)/libdlcc.a $(BUILD)/libdlcc.so $(EX_BIN) $(UNIT_BIN) $(ISA_BIN)

$(GEN_C): $(ONNX_PROTO)
	@mkdir -p $(BUILD)/gen
	protoc-c --c_out=$(BUILD)/gen -I$(dir $(ONNX_PROTO)) $(ONNX_PROTO)

$(BUILD)/obj/gen/onnx.pb-c.o: $(GEN_C)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(filter-out -Wextra,$(CFLAGS)) -c $< -o $@

# The runtime kernels' sources travel inside libdlcc as text (JIT builds and AOT bundles).
$(BUILD)/embed: build-aux/embed.c
	@mkdir -p $(dir $@)
	$(CC) -O1 -o $@ $<

$(BUILD)/gen/rt-files.c: $(RT_FILES) $(BUILD)/embed
	@mkdir -p $(BUILD)/gen
	$(BUILD)/embed $(RT_FILES) > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/gen/rt-files.o: $(BUILD)/gen/rt-files.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(GEN_C)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/libdlcc.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libdlcc.so: $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/dlcc: $(TOOL_OBJ) $(BUILD)/libdlcc.a
	$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libdlcc.a $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(BUILD)/libdlcc.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libdlcc.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libdlcc.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libdlcc.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests-isa/avx512/%: tests/unit/%.c $(BUILD)/libdlcc.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ISA_CFLAGS) -march=x86-64-v4 -o $@ $< $(BUILD)/libdlcc.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests-isa/avx512bf16/%: tests/unit/%.c $(BUILD)/libdlcc.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ISA_CFLAGS) -march=x86-64-v4 -mavx512bf16 -DDLRT_PAR_MIN=1 -o $@ $< $(BUILD)/libdlcc.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests-isa/avx2/%: tests/unit/%.c $(BUILD)/libdlcc.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ISA_CFLAGS) -march=x86-64-v3 -DDLRT_PAR_MIN=1 -o $@ $< $(BUILD)/libdlcc.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests-isa/generic/%: tests/unit/%.c $(BUILD)/libdlcc.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ISA_CFLAGS) -march=x86-64 -o $@ $< $(BUILD)/libdlcc.a $(LDFLAGS) $(LDLIBS)

# Installs build and test dependencies (Debian), then builds.
setup:
	bash scripts/setup.sh

demo: setup all
	bash scripts/demo.sh

test: setup all
	bash tests/run-tests.sh $(BUILD)

test-asan:
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" all
	DLCC_SANITIZED=1 bash tests/run-tests.sh build-asan

format:
	clang-format -i $(LIB_SRC) $(TOOL_SRC) $(EX_SRC) include/*.h src/*/*.h

clean:
	rm -rf build build-asan

.PHONY: all setup demo test test-asan format clean
-include $(shell find $(BUILD)/obj $(BUILD)/tests -name '*.d' 2>/dev/null)
