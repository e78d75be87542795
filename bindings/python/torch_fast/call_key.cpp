#include "call_key.h"

#include <torch/csrc/autograd/python_variable.h>

#include "current_stream.h"

namespace sdmp1_torch {

CallArgs call_args(PyObject* const* a) {
    return CallArgs{a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14]};
}

std::size_t CallKeyHash::operator()(const CallKey& key) const {
    // FNV-1a over the words: the key is small and hashed once a call.
    uint64_t h = 1469598103934665603ULL;
    for (std::size_t i = 0; i < key.size; ++i) {
        h ^= static_cast<uint64_t>(key.words[i]);
        h *= 1099511628211ULL;
    }
    return static_cast<std::size_t>(h);
}

namespace {

class KeyWriter {
public:
    explicit KeyWriter(CallKey& key) : key_(key) { key_.size = 0; }
    bool put(int64_t word) {
        if (key_.size == CallKey::kWords) return false;
        key_.words[key_.size++] = word;
        return true;
    }

private:
    CallKey& key_;
};

// A tensor's facts: one word of rank, dtype and device, then its sizes. Only plain tensors
// (torch.Tensor, nn.Parameter): a subclass may dispatch itself, which the Python path honours.
bool put_tensor(KeyWriter& w, PyObject* obj, const at::Tensor** out) {
    if (!THPVariable_CheckExact(obj)) return false;
    const at::Tensor& t = THPVariable_Unpack(obj);
    const int64_t dim = t.dim();
    if (dim > 4) return false;
    const c10::Device device = t.device();
    const int64_t head = dim | (static_cast<int64_t>(t.scalar_type()) << 8) |
                         (static_cast<int64_t>(device.type()) << 16) |
                         (static_cast<int64_t>(static_cast<uint8_t>(device.index())) << 24);
    if (!w.put(head)) return false;
    for (int64_t i = 0; i < dim; ++i) {
        if (!w.put(t.size(i))) return false;
    }
    if (out != nullptr) *out = &t;
    return true;
}

// An int option (exactly int: a bool or an int subclass is not what the key stands for) as
// its value, with `none_ok` None as a word of its own.
bool put_int(KeyWriter& w, PyObject* obj, bool none_ok) {
    if (none_ok && obj == Py_None) return w.put(1) && w.put(0);
    if (!PyLong_CheckExact(obj)) return false;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return false;
    }
    return (!none_ok || w.put(0)) && w.put(v);
}

bool put_bool(KeyWriter& w, PyObject* obj) {
    if (obj != Py_True && obj != Py_False) return false;
    return w.put(obj == Py_True ? 1 : 0);
}

}   // namespace

bool make_call_key(const CallArgs& a, CallKey& key, CallFacts& facts) {
    KeyWriter w(key);
    const at::Tensor* k_idx = nullptr;
    if (!put_tensor(w, a.k_idx, &k_idx) || !put_tensor(w, a.q_idx, nullptr) || !put_tensor(w, a.k_val, nullptr) ||
        !put_tensor(w, a.q_val, nullptr) || !put_tensor(w, a.g, nullptr)) {
        return false;
    }
    if (a.beta == Py_None) {
        if (!w.put(-1)) return false;
    } else if (!put_tensor(w, a.beta, nullptr)) {
        return false;
    }
    if (!w.put(a.stream_lengths == Py_None ? 0 : 1)) return false;
    if (!put_int(w, a.num_parallel, false) || !put_int(w, a.stream_offset, false) || !put_int(w, a.num_keys, false) ||
        !put_int(w, a.valid_last, true) || !put_bool(w, a.need_read_groups) || !put_int(w, a.rec_tile, false) ||
        !put_int(w, a.det_fields, true) || !put_bool(w, a.check)) {
        return false;
    }
    const c10::Device device = k_idx->device();
    facts.cuda = device.is_cuda();
    facts.device_index = device.index();
    facts.stream = facts.cuda ? current_cuda_stream(device) : 0;
    return w.put(static_cast<int64_t>(facts.stream));
}

}   // namespace sdmp1_torch
