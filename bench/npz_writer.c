/* A minimal writer of NumPy .npz files: npz_writer.h says what it writes and its limits.
 *
 * The layout (PKWARE's APPNOTE.TXT, the parts a stored archive needs; all fields little-endian):
 *   per entry: a local file header (signature 0x04034b50, 30 bytes + the entry's name), then
 *   the entry's bytes: the .npy header and the array's data;
 *   then per entry a central directory header (signature 0x02014b50, 46 bytes + the name),
 *   and the end of central directory record (signature 0x06054b50, 22 bytes).
 * The data is in memory before its entry is written, so each local header carries its CRC-32
 * and sizes (no data descriptor). Times and dates are fixed (1980-01-01 00:00): the same
 * arrays give the same file.
 *
 * The .npy header (NumPy's format version 1.0): the magic "\x93NUMPY", the version bytes 1 and
 * 0, a little-endian uint16 header length, then a Python dict literal such as
 *   {'descr': '<i4', 'fortran_order': False, 'shape': (8192, 64, 32), }
 * padded with spaces and ended by '\n' so that the data starts at a multiple of 64 bytes. */
#include "npz_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kMaxEntries = 65535, kMaxName = 60, kMaxDims = 8 };

typedef struct Entry {
    char name[kMaxName + 5]; /* with ".npy" */
    uint32_t crc, size, offset;
} Entry;

struct NpzWriter {
    FILE* f;
    char* path;
    Entry* entries;
    int count, cap;
    uint64_t offset; /* bytes written so far */
    int failed;
};

/* ---- CRC-32 ------------------------------------------------------------------------------ */

static uint32_t crc_table[256];
static int crc_table_ready;

uint32_t npz_crc32(uint32_t crc, const void* data, size_t bytes) {
    const unsigned char* p = (const unsigned char*)data;
    size_t i;
    if (!crc_table_ready) {
        uint32_t n, c;
        int k;
        for (n = 0; n < 256; ++n) {
            c = n;
            for (k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            crc_table[n] = c;
        }
        crc_table_ready = 1;
    }
    crc = ~crc;
    for (i = 0; i < bytes; ++i) crc = crc_table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

/* ---- writing ----------------------------------------------------------------------------- */

static void put16(unsigned char* p, uint32_t v) {
    p[0] = (unsigned char)(v & 0xFFu);
    p[1] = (unsigned char)((v >> 8) & 0xFFu);
}

static void put32(unsigned char* p, uint32_t v) {
    put16(p, v & 0xFFFFu);
    put16(p + 2, v >> 16);
}

static int fail(NpzWriter* z, const char* what) {
    if (!z->failed) fprintf(stderr, "%s: %s\n", z->path, what);
    z->failed = 1;
    return 1;
}

static int write_bytes(NpzWriter* z, const void* data, size_t bytes) {
    if (z->failed) return 1;
    if (bytes > 0 && fwrite(data, 1, bytes, z->f) != bytes) return fail(z, "write failed");
    z->offset += bytes;
    return 0;
}

NpzWriter* npz_open(const char* path) {
    NpzWriter* z = calloc(1, sizeof *z);
    if (z == NULL) return NULL;
    z->path = malloc(strlen(path) + 1);
    z->f = fopen(path, "wb");
    if (z->path == NULL || z->f == NULL) {
        if (z->f == NULL) fprintf(stderr, "cannot write %s\n", path);
        if (z->f != NULL) fclose(z->f);
        free(z->path);
        free(z);
        return NULL;
    }
    strcpy(z->path, path);
    return z;
}

static int little_endian_host(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* The .npy header of an array (magic to '\n'): its length, 0 where it does not fit `cap`. */
static size_t npy_header(char* out, size_t cap, NpzType type, int ndim, const int64_t* shape) {
    static const char* const kDescr[] = {"i4", "i8", "u2", "f4"};
    char dict[400];
    size_t len, total, pad;
    int n, d;
    n = snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                 little_endian_host() ? '<' : '>', kDescr[type]);
    for (d = 0; d < ndim; ++d) {
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    len = (size_t)n;
    total = 10 + len + 1; /* magic, version, length; the dict; '\n' */
    pad = (64 - total % 64) % 64;
    total += pad;
    if (total > cap || total - 10 > 0xFFFFu) return 0;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    put16((unsigned char*)out + 8, (uint32_t)(total - 10));
    memcpy(out + 10, dict, len);
    memset(out + 10 + len, ' ', pad);
    out[total - 1] = '\n';
    return total;
}

int npz_add(NpzWriter* z, const char* name, NpzType type, int ndim, const int64_t* shape, const void* data) {
    static const size_t kSize[] = {4, 8, 2, 4};
    unsigned char local[30];
    char header[512];
    size_t header_len, name_len = strlen(name), i;
    uint64_t elements = 1, data_bytes, entry_bytes;
    uint32_t crc;
    Entry* e;
    int d;
    if (z == NULL || z->failed) return 1;
    if (name_len == 0 || name_len > kMaxName) return fail(z, "an array name is empty or too long");
    for (i = 0; i < name_len; ++i) {
        const char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            return fail(z, "an array name has a character other than letters, digits and '_'");
    }
    if (ndim < 0 || ndim > kMaxDims) return fail(z, "too many dimensions");
    for (d = 0; d < ndim; ++d) {
        if (shape[d] < 0) return fail(z, "a negative dimension");
        elements *= (uint64_t)shape[d];
    }
    data_bytes = elements * kSize[type];
    header_len = npy_header(header, sizeof header, type, ndim, shape);
    if (header_len == 0) return fail(z, "the .npy header is too long");
    entry_bytes = header_len + data_bytes;
    if (z->count == kMaxEntries) return fail(z, "too many entries for a zip without zip64");
    if (z->offset + sizeof local + name_len + 4 + entry_bytes > 0xFFFFFFFFu)
        return fail(z, "over 4 GiB: needs zip64, which this writer does not write");
    if (z->count == z->cap) {
        const int cap = z->cap ? 2 * z->cap : 16;
        Entry* grown = realloc(z->entries, (size_t)cap * sizeof *grown);
        if (grown == NULL) return fail(z, "out of memory");
        z->entries = grown;
        z->cap = cap;
    }
    crc = npz_crc32(0, header, header_len);
    crc = npz_crc32(crc, data, (size_t)data_bytes);
    e = &z->entries[z->count++];
    snprintf(e->name, sizeof e->name, "%s.npy", name);
    e->crc = crc;
    e->size = (uint32_t)entry_bytes;
    e->offset = (uint32_t)z->offset;
    put32(local, 0x04034b50u); /* local file header signature */
    put16(local + 4, 20);      /* version needed to extract: 2.0 */
    put16(local + 6, 0);       /* flags */
    put16(local + 8, 0);       /* method: stored */
    put16(local + 10, 0);      /* modification time 00:00:00 */
    put16(local + 12, 0x21);   /* modification date 1980-01-01 */
    put32(local + 14, crc);
    put32(local + 18, e->size); /* compressed size */
    put32(local + 22, e->size); /* uncompressed size */
    put16(local + 26, (uint32_t)strlen(e->name));
    put16(local + 28, 0); /* extra field length */
    write_bytes(z, local, sizeof local);
    write_bytes(z, e->name, strlen(e->name));
    write_bytes(z, header, header_len);
    return write_bytes(z, data, (size_t)data_bytes);
}

int npz_add_int64_scalar(NpzWriter* z, const char* name, int64_t v) { return npz_add(z, name, NPZ_INT64, 0, NULL, &v); }

int npz_close(NpzWriter* z) {
    unsigned char end[22];
    uint64_t dir_offset, dir_bytes;
    int i, failed;
    if (z == NULL) return 1;
    dir_offset = z->offset;
    for (i = 0; i < z->count && !z->failed; ++i) {
        const Entry* e = &z->entries[i];
        unsigned char central[46];
        put32(central, 0x02014b50u); /* central directory header signature */
        put16(central + 4, 20);      /* version made by: 2.0, MS-DOS attributes */
        put16(central + 6, 20);      /* version needed to extract */
        put16(central + 8, 0);       /* flags */
        put16(central + 10, 0);      /* method: stored */
        put16(central + 12, 0);      /* time */
        put16(central + 14, 0x21);   /* date */
        put32(central + 16, e->crc);
        put32(central + 20, e->size);
        put32(central + 24, e->size);
        put16(central + 28, (uint32_t)strlen(e->name));
        put16(central + 30, 0); /* extra field length */
        put16(central + 32, 0); /* comment length */
        put16(central + 34, 0); /* disk number start */
        put16(central + 36, 0); /* internal attributes */
        put32(central + 38, 0); /* external attributes */
        put32(central + 42, e->offset);
        write_bytes(z, central, sizeof central);
        write_bytes(z, e->name, strlen(e->name));
    }
    dir_bytes = z->offset - dir_offset;
    if (!z->failed && z->offset + sizeof end > 0xFFFFFFFFu) fail(z, "over 4 GiB: needs zip64");
    put32(end, 0x06054b50u); /* end of central directory signature */
    put16(end + 4, 0);       /* this disk */
    put16(end + 6, 0);       /* the disk with the central directory */
    put16(end + 8, (uint32_t)z->count);
    put16(end + 10, (uint32_t)z->count);
    put32(end + 12, (uint32_t)dir_bytes);
    put32(end + 16, (uint32_t)dir_offset);
    put16(end + 20, 0); /* comment length */
    write_bytes(z, end, sizeof end);
    if (fclose(z->f) != 0) fail(z, "close failed");
    failed = z->failed;
    free(z->entries);
    free(z->path);
    free(z);
    return failed;
}
