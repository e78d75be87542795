/* A minimal writer of NumPy .npz files, for the benchmark's --save-inputs.
 *
 * An .npz file is a zip archive whose entries are .npy files, one an array, each named after
 * its array ("k_idx" is stored as "k_idx.npy"); numpy.load(path) opens it as a mapping from
 * those names to arrays. This writer stores every entry uncompressed (zip method 0, "stored")
 * with its CRC-32, in .npy format version 1.0, C order, so the file is the arrays' bytes plus
 * small headers. Limits: at most 4 GiB - 1 an archive (no zip64) and 65535 entries; names of
 * letters, digits and '_' (at most 60 characters); shapes of at most 8 dimensions.
 *
 *   NpzWriter* z = npz_open("S1.npz");
 *   const int64_t shape[3] = {N, C, W};
 *   npz_add(z, "k_idx", NPZ_INT32, 3, shape, k_idx);
 *   npz_add_int64_scalar(z, "num_keys", num_keys);
 *   if (npz_close(z) != 0) ...   (always call it: it writes the archive's directory, frees z)
 *
 * Element types are written in the host's byte order, which the .npy header names ('<' or
 * '>'), so numpy reads them back on any host. Each function returns 0 on success; after a
 * failure (a message on stderr) the later calls do nothing and npz_close returns nonzero. One
 * thread at a time (the CRC table is built on first use). */
#ifndef SDMP1_BENCH_NPZ_WRITER_H
#define SDMP1_BENCH_NPZ_WRITER_H

#include <stddef.h>
#include <stdint.h>

typedef enum NpzType { NPZ_INT32, NPZ_INT64, NPZ_UINT16, NPZ_FLOAT32 } NpzType;

typedef struct NpzWriter NpzWriter;

/* Creates (or truncates) the archive at path: NULL where the file cannot be opened. */
NpzWriter* npz_open(const char* path);

/* Adds the array `name` of `ndim` dimensions `shape` (ndim 0: a scalar, one element), its
 * elements of `type` contiguous in C order at `data`. */
int npz_add(NpzWriter* z, const char* name, NpzType type, int ndim, const int64_t* shape, const void* data);

/* Adds a 0-dimensional int64 array holding v. */
int npz_add_int64_scalar(NpzWriter* z, const char* name, int64_t v);

/* Writes the central directory, closes the file and frees z (NULL: does nothing, returns 1);
 * 0 where every step since npz_open succeeded. */
int npz_close(NpzWriter* z);

/* The CRC-32 of zip (and gzip, PNG): reflected polynomial 0xEDB88320, initial value and final
 * XOR 0xFFFFFFFF. Pass crc = 0 for the first block and the previous result to continue. */
uint32_t npz_crc32(uint32_t crc, const void* data, size_t bytes);

#endif
