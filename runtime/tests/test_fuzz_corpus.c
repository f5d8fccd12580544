/* test_fuzz_corpus.c — replays the fuzz target's saved inputs
 * (runtime/fuzz/corpus/: crashers it found, each fixed since, and seeds) as
 * regression tests: every input must run to its end through the public API.
 * A crash or a sanitizer report fails the run. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/fuzz_node.h"
#include "test.h"

#ifndef TPU_FUZZ_CORPUS_DIR
#error "TPU_FUZZ_CORPUS_DIR names runtime/fuzz/corpus (set by CMake)"
#endif

static int replay_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return 0;
  uint8_t buf[1 << 14];
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  tpu_fuzz_node(buf, n);
  return 1;
}

TEST(fuzz_corpus_replays_every_saved_input) {
  DIR* dir = opendir(TPU_FUZZ_CORPUS_DIR);
  CHECK(dir != NULL);
  if (!dir) return;
  int count = 0;
  struct dirent* e;
  while ((e = readdir(dir)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", TPU_FUZZ_CORPUS_DIR, e->d_name);
    count += replay_file(path);
  }
  closedir(dir);
  CHECK(count > 0); /* the corpus is in the repository */
}
