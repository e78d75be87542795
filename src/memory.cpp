#include "memory.h"

#include <cstdint>
#include <utility>

#include "errors.h"

namespace sdm_p1 {

Block::Block(const sdm_p1_allocator& allocator, size_t bytes, size_t align) : allocator_(allocator) {
    if (bytes == 0) return;
    void* p = nullptr;
    if (allocator_.alloc(allocator_.ctx, &p, bytes, nullptr) != 0 || p == nullptr) {
        fail(SDM_P1_ERROR_OUT_OF_MEMORY, "sdm_p1_plan_create: the allocator could not provide ", bytes, " bytes");
    }
    data_ = p;
    bytes_ = bytes;
    if (reinterpret_cast<uintptr_t>(p) % align != 0u) {
        release();   // the block goes back to the allocator before the error leaves
        fail(SDM_P1_ERROR_INVALID_ARGUMENT,
             "sdm_p1_plan_create: the allocator returned a block "
             "that is not aligned to ",
             align, " bytes");
    }
}

Block::~Block() { release(); }

Block::Block(Block&& other) noexcept
    : allocator_(other.allocator_),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

Block& Block::operator=(Block&& other) noexcept {
    if (this != &other) {
        release();
        allocator_ = other.allocator_;
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

void Block::release() noexcept {
    if (data_ != nullptr) allocator_.free(allocator_.ctx, data_, bytes_, nullptr);
    data_ = nullptr;
    bytes_ = 0;
}

}   // namespace sdm_p1
