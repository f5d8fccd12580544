/* fuzz_main.c — the libFuzzer entry point: each input is one node
 * (fuzz_node.h). Built by CMake with TPU_FUZZ=ON (clang); scripts/test.sh
 * runs it for a bounded time from the saved corpus. */
#include "fuzz_node.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return tpu_fuzz_node(data, size); }
