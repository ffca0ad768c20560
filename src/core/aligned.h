// Vectors whose data starts on a 64-byte boundary: a cache line, and a whole 32- or 64-byte vector
// register. The heap gives 16 bytes (and a large block mapped by itself starts 16 bytes past its
// page), where half of a loop's 32-byte loads, and every 64-byte one, would span two lines.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace bankml {

template <class T>
struct Aligned64 {
    using value_type = T;
    Aligned64() = default;
    template <class U>
    Aligned64(const Aligned64<U>&) {}
    T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
    void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
    template <class U>
    bool operator==(const Aligned64<U>&) const { return true; }
};

template <class T>
using AlignedVector = std::vector<T, Aligned64<T>>;

}  // namespace bankml
