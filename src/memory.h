// A block of a plan's memory from an allocator (the caller's, or its backend's default).
#ifndef SDM_P1_MEMORY_H
#define SDM_P1_MEMORY_H

#include <cstddef>

#include "sdm/phase1.h"

namespace sdm_p1 {

// One block from the allocator, freed with the object (move-only).
class Block {
public:
    Block() = default;
    // Throws OUT_OF_MEMORY when the allocator fails, INVALID_ARGUMENT when its block is not
    // aligned to `align` bytes.
    Block(const sdm_p1_allocator& allocator, size_t bytes, size_t align);
    ~Block();
    Block(Block&& other) noexcept;
    Block& operator=(Block&& other) noexcept;
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;

    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }

private:
    void release() noexcept;

    sdm_p1_allocator allocator_{};
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

}   // namespace sdm_p1

#endif   // SDM_P1_MEMORY_H
