/* The tests' random numbers (C and C++). */
#ifndef SDM_P1_TESTS_SPLITMIX64_H
#define SDM_P1_TESTS_SPLITMIX64_H

#include <stdint.h>

/* splitmix64: the next word of a stream of 64-bit words from *state, the same on every
 * platform (the tests' random data; no libc generator or C++ distribution, whose results
 * differ between implementations). */
static inline uint64_t splitmix64(uint64_t* state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif /* SDM_P1_TESTS_SPLITMIX64_H */
