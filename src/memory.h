// Memory of a plan: the caller's allocator, or the default one of the plan's backend.
#ifndef SDM_P1_MEMORY_H
#define SDM_P1_MEMORY_H

#include <cstddef>

#include "sdm/phase1.h"

namespace sdm_p1 {

// One block from the allocator, freed with the object (move-only).
class Block {
public:
    Block() = default;
    Block(const sdm_p1_allocator& allocator, size_t bytes);   // throws OUT_OF_MEMORY
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

// The default allocator of a backend (aligned host memory for the CPU).
sdm_p1_allocator default_allocator(sdm_p1_backend backend);

}  // namespace sdm_p1

#endif  // SDM_P1_MEMORY_H
