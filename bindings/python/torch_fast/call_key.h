// The key under which a registered plan is found: the arguments of a phase1_forward call as
// given (each tensor's rank, sizes, dtype and device, whether beta and stream_lengths are
// given, the options as their plain Python values) and the current stream of k_idx's device.
// It holds the facts that sdm_phase1's Python fast lookup (torch_impl._fast_key) holds, so a
// hit stands for the checks that the Python long way made when it registered the plan.
#ifndef SDMP1_TORCH_FAST_CALL_KEY_H
#define SDMP1_TORCH_FAST_CALL_KEY_H

#include <Python.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace sdmp1_torch {

// The arguments of a forward call as the module receives them (borrowed references).
struct CallArgs {
    PyObject* k_idx;
    PyObject* q_idx;
    PyObject* k_val;
    PyObject* q_val;
    PyObject* g;
    PyObject* beta;             // Py_None: not given
    PyObject* stream_lengths;   // Py_None: not given
    PyObject* num_parallel;
    PyObject* stream_offset;
    PyObject* num_keys;
    PyObject* valid_last;   // an int or None
    PyObject* need_read_groups;
    PyObject* rec_tile;
    PyObject* det_fields;   // an int or None
    PyObject* check;
};

// The number of CallArgs' members, in their order: the module's positional arguments.
constexpr Py_ssize_t kCallArgCount = 15;
CallArgs call_args(PyObject* const* args);

struct CallKey {
    // 6 tensors of 5 words, 12 option words: at most 42 used.
    static constexpr std::size_t kWords = 48;
    std::array<int64_t, kWords> words{};
    std::size_t size = 0;

    bool operator==(const CallKey& other) const { return size == other.size && words == other.words; }
};

struct CallKeyHash {
    std::size_t operator()(const CallKey& key) const;
};

// What make_call_key found out besides the key.
struct CallFacts {
    bool cuda = false;           // k_idx is a CUDA tensor
    int device_index = -1;       // its device's index (CUDA)
    std::uintptr_t stream = 0;   // the current stream of that device (0 on the CPU)
};

// Fills `key` and `facts` from `args`; false where the call does not fit a key (an input that
// is not a plain torch.Tensor or Parameter, an option not of its plain type or beyond int64,
// a rank above 4): the caller then falls back to the Python path, which says what is wrong.
// Raises nothing; may throw c10::Error (the current stream), which the caller catches.
bool make_call_key(const CallArgs& args, CallKey& key, CallFacts& facts);

}   // namespace sdmp1_torch

#endif
