/* SPDX-License-Identifier: MIT */
/*
 * test_fuzz_replay.c - every input of the fuzz seed corpus (tests/fuzz/corpus/<target>/),
 * replayed through the same model as the libFuzzer targets, in every build (the targets
 * themselves need clang: the fuzz preset).  Inputs that once found a bug are kept in
 * the corpus under the name of what they found, so each is a regular test from then on
 * (docs/testing.md, "Fuzzing").
 */
#include <dirent.h>

#include "harness.h"
#include "../fuzz/fuzz_model.h"

static int replay_dir(const char *dir, void (*target)(const uint8_t *, size_t))
{
	DIR *d = opendir(dir);
	REQUIRE(d != NULL);
	struct dirent *e;
	int n = 0;
	static uint8_t buf[1 << 16];
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		FILE *f = fopen(path, "rb");
		if (!f)
			continue;
		size_t len = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		target(buf, len); /* aborts with a message on any disagreement */
		n++;
	}
	closedir(d);
	return n;
}

static void t_replay(void)
{
	const char *src = getenv("SHEAF_TEST_SRCDIR");
	REQUIRE(src != NULL);
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/fuzz_cache", src);
	int a = replay_dir(dir, fz_target_cache);
	snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/fuzz_malloc", src);
	int b = replay_dir(dir, fz_target_malloc);
	printf("# replayed %d fuzz_cache and %d fuzz_malloc inputs\n", a, b);
	CHECK(a > 0 && b > 0);
}

int main(void)
{
	RUN(t_replay);
	return th_done();
}
