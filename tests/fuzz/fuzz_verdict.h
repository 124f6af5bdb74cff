/*
 * tests/fuzz/fuzz_verdict.h — how a fuzz target tells the corpus replay
 * whether it accepted its input.
 *
 * Every LLVMFuzzerTestOneInput in tests/fuzz/ calls fuzz_report() once per
 * input with its verdict: 1 when the code under test accepted the input
 * (a frame decoded, a batch answer complete, a catalog opened, a name
 * allowed), 0 when it refused it. The replay driver
 * (tests/fuzz_driver/fuzz_replay.c) defines fuzz_verdict() and checks the
 * verdict against the input's name: ok_* must be accepted, bad_* refused.
 * Under libFuzzer nothing defines it (a weak reference, so NULL) and
 * fuzz_report() does nothing: the targets stay plain libFuzzer targets,
 * whose return value must stay 0.
 */
#ifndef FERRY_TESTS_FUZZ_VERDICT_H
#define FERRY_TESTS_FUZZ_VERDICT_H

void fuzz_verdict(int accepted) __attribute__((weak));

static inline void fuzz_report(int accepted)
{
	if (fuzz_verdict)
		fuzz_verdict(accepted);
}

#endif
