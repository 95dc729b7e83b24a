/*
 * tests/fuzz/fuzz_heap.c - libFuzzer target over the open + verify + read
 * path (tests/fuzz/fuzz_path.h says what an input means).  Built and run by
 * `make fuzz` (clang, ASan + UBSan); not part of the Criterion suite.  The
 * seeds are read from AH_FUZZ_SEEDS (default tests/fuzz/seeds); the damaged
 * heap is written to a private file under /dev/shm.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/fuzz/fuzz_path.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char work[64], lock[80];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *seeds = getenv("AH_FUZZ_SEEDS");

	(void)argc;
	(void)argv;
	snprintf(work, sizeof work, "/dev/shm/ah-fuzz-%d", (int)getpid());
	snprintf(lock, sizeof lock, "%s-lock", work);
	if (fz_load_seeds(seeds ? seeds : "tests/fuzz/seeds", work) <= 0) {
		fprintf(stderr, "fuzz_heap: no seed heaps\n");
		exit(1);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (fz_run(data, size, work) < 0)
		abort();
	unlink(work);
	unlink(lock);
	return 0;
}
