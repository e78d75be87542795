#include "outputs.h"

#include <ATen/ops/empty.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/autograd/python_variable.h>

namespace sdmp1_torch {

at::Tensor new_block(const at::Tensor& like, int64_t bytes) {
    return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(like.device()));
}

PyObject* carve(const at::Tensor& block, const std::vector<OutputSpec>& specs) {
    PyObject* list = PyList_New(static_cast<Py_ssize_t>(specs.size()));
    if (list == nullptr) return nullptr;
    const c10::Storage& storage = block.storage();
    const c10::DispatchKeySet keys = block.key_set();
    Py_ssize_t i = 0;
    for (const OutputSpec& s : specs) {
        // What as_strided's kernel does (at::native::as_strided_tensorimpl) once the dispatcher
        // is below ADInplaceOrView, without the dispatch and its bounds check, which the
        // plan's layout makes true: a new TensorImpl on the block's storage, key set and the
        // output's dtype (the byte block's storage serves any dtype: offsets are in elements
        // of the output's own dtype, as _PlanData computes them).
        auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(storage), keys,
                                                         c10::scalarTypeToTypeMeta(s.dtype));
        impl->set_sizes_and_strides(s.sizes, s.strides, s.offset);
        PyObject* t = THPVariable_Wrap(at::Tensor(std::move(impl)));
        if (t == nullptr) {
            Py_DECREF(list);
            return nullptr;
        }
        PyList_SET_ITEM(list, i++, t);
    }
    return list;
}

}   // namespace sdmp1_torch
