// fuzz_api: a libFuzzer harness over the C API on the CPU backend.
//
// Each input is decoded (fuzz_case.cpp) into a descriptor, input arrays and a call sequence:
// shapes in and out of the limits (only small ones are executed, so a run takes well under a
// millisecond), ids in and out of their stream's range, NaN, infinite, huge and subnormal gates
// and values, NULL and misaligned pointers, undefined det_fields bits, structs of older and
// newer headers, both output modes, the library's and a failing allocator, plans destroyed and
// created again. It creates two plans of the request, with 1 thread and with n, and checks
// (api_contract.cpp) that every call returns a status the header documents for it with a
// message of its own on failure, that the views agree with their shapes, that both plans
// return the same status, on success the same output bytes, on bad data the same message,
// that a plan executed again on the same inputs gives the same bits, that a plan made from
// sdm_p1_plan_desc's descriptor has the same views, and that every allocated block is freed.
//
// The backward (C API 1.3): a case may make its plans backward plans (desc.backward, or an odd
// value: a forward-only plan, a refused one; grad_dtype the value dtype, float32 or a refused
// one) with 1 to 3 backward calls, decoded from the bytes after the rest (fuzz_case.h). After
// each forward execute the next call runs sdm_p1_execute_backward with: the forward's payload,
// NULL, a corrupted one (two words swapped, a word duplicated, a lane or token out of range,
// the padding or head bit flipped, unread bits changed, a misaligned pointer) or a stale one;
// any subset of the upstream gradients, sometimes with a non-differentiable field's (refused,
// named), with NaN, infinite, huge and subnormal values and NaN or garbage in the cells the
// backward never reads; any subset of the input gradients (NULL: not computed), sometimes one
// misaligned; one bad argument now and then (NULL plan, inputs or out, a bad count, grads NULL,
// a misaligned upstream, a reserved field set, beta NULL with a kspa gradient); the case's
// stream lengths. It checks that the status is documented for execute_backward, that when
// one argument is bad it is refused naming it, that otherwise the data decide as the header
// says (the forward's outcome on the same inputs; a payload by the header's rule, checked
// independently here, naming the chunk and position), that a failed call writes no byte of
// the gradient buffers (filled with a pattern first) and no call writes past them, that plans
// with 1 and n threads give the same status, message and bytes (their buffers filled with
// different patterns, so an element left unwritten shows too), that a second run gives the
// same bits, that the forward's payload (also with its unread bits changed) and NULL give the
// same bits, that zeroing the upstream cells never read changes nothing, and that padding
// tokens get +0.0 in every gradient, beta +0.0 without a kspa gradient, a repeat lane's gate
// +0.0, and everything +0.0 without any upstream gradient (finite values).
//
// A broken promise aborts; AddressSanitizer and UndefinedBehaviorSanitizer report the rest.
//
// Build (clang; run.sh test does this in build-fuzz):
//   CC=clang CXX=clang++ meson setup build-fuzz -Dfuzzing=true -Dcuda=disabled \
//       -Db_sanitize=address,undefined -Db_lundef=false --buildtype=debugoptimized
//   meson compile -C build-fuzz tests/fuzz/fuzz_api
// Run (new inputs go to the first folder; tests/fuzz/corpus is the committed seed corpus):
//   mkdir -p /tmp/corpus && build-fuzz/tests/fuzz/fuzz_api -max_total_time=120 -timeout=10 \
//       /tmp/corpus tests/fuzz/corpus
// Replay a corpus or one crash file: build-fuzz/tests/fuzz/fuzz_api FILE_OR_DIR... -runs=0
// (a directory: every file in it). Shrink a corpus into the seeds: -merge=1 NEW_DIR OLD_DIR.
// The seeds named backward-* reach the backward paths; tests/fuzz/make_backward_seeds.py
// writes them (python3 tests/fuzz/make_backward_seeds.py tests/fuzz/corpus), spelling out
// the bytes decode_case reads for each case: change it with the decoder's order of reads.
// Line coverage of src/: build with -Dc_args/-Dcpp_args/-Dc_link_args/-Dcpp_link_args
// '-fprofile-instr-generate -fcoverage-mapping', replay the corpus with -runs=0, then
// llvm-profdata merge and llvm-cov report (see tests/fuzz/coverage.sh).
// The same inputs against the CUDA backend: replay_cuda (replay_cuda.cpp).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api_contract.h"
#include "fuzz_case.h"
#include "sdm/phase1.h"

namespace {

using namespace fuzz;

// The harness's allocator: fails its k-th allocation, and every block over 64 MiB (the
// outputs of plans far too large to run), counts the blocks out, and may hand out blocks
// 8 bytes off malloc's (which no plan accepts).
struct Allocations {
    uint32_t fail_at = 0;
    uint32_t calls = 0;
    int live = 0;
    size_t offset = 0;
};

constexpr size_t kLargestBlock = size_t{64} << 20;

int capped_alloc(void* ctx, void** ptr, size_t bytes, void*) {
    auto* a = static_cast<Allocations*>(ctx);
    if (++a->calls == a->fail_at || bytes > kLargestBlock) return 1;
    void* p = std::malloc(bytes + a->offset);   // 16-byte aligned, as the CPU backend needs
    if (p == nullptr) return 1;
    *ptr = static_cast<char*>(p) + a->offset;
    ++a->live;
    return 0;
}

void capped_free(void* ctx, void* ptr, size_t, void*) {
    auto* a = static_cast<Allocations*>(ctx);
    --a->live;
    std::free(static_cast<char*>(ptr) - a->offset);
}

bool refused_form(StructForm f) { return f == StructForm::NewerSet || f == StructForm::TooShort; }

const char* const kInputNames[kInputs] = {"k_idx", "q_idx", "k_val", "q_val", "g", "beta"};
const char* const kGradNames[kInputGrads] = {"k_val", "q_val", "g", "beta"};

// The bytes the input-gradient buffers hold before a backward: a refused call must leave them,
// a successful one overwrite every element (two runs of other patterns give the same bytes)
// and nothing in the kCanary bytes past them.
constexpr uint8_t kPatternA = 0xA5, kPatternB = 0x5C;
constexpr size_t kCanary = 16;

// One backward's outcome: the status, the message and each given buffer's bytes.
struct BackwardResult {
    sdm_p1_status status = SDM_P1_SUCCESS;
    std::string message;
    std::vector<uint8_t> grads[kInputGrads];
};

bool either_out_of_memory(sdm_p1_status a, sdm_p1_status b) {
    return a == SDM_P1_ERROR_OUT_OF_MEMORY || b == SDM_P1_ERROR_OUT_OF_MEMORY;
}

// One plan of the case and the caller buffers it writes to.
struct Plan {
    int32_t threads = 1;
    sdm_p1_status created = SDM_P1_SUCCESS;
    sdm_p1_plan* plan = nullptr;
    sdm_p1_desc resolved{};
    sdm_p1_tensor views[SDM_P1_FIELD_COUNT]{};
    std::vector<std::vector<uint8_t>> storage;   // SDM_P1_OUTPUTS_CALLER buffers
    void* buffers[SDM_P1_FIELD_COUNT]{};
};

class Session {
public:
    explicit Session(Case& c) : c_(c) {
        alloc_.fail_at = c.fail_allocation;
        alloc_.offset = c.allocator == AllocatorKind::Misaligned ? 8 : 0;
        one_.threads = 1;
        many_.threads = c.threads;
    }
    ~Session() {
        destroy(one_);
        destroy(many_);
        destroy(wide_);
        if (alloc_.live != 0) broken(std::to_string(alloc_.live) + " allocated blocks never freed");
    }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    void run() {
        create(one_);
        create(many_);
        // The plans differ in num_threads only, which may be out of range for the second.
        const bool threads_valid = many_.threads >= SDM_P1_UNSET;
        if (threads_valid && one_.created != many_.created && !either_out_of_memory(one_.created, many_.created)) {
            broken(std::string("the 1-thread plan's creation gave ") + sdm_p1_status_string(one_.created) +
                   ", the n-thread plan's " + sdm_p1_status_string(many_.created));
        }
        for (const Step& s : c_.steps) {
            switch (s.op) {
                case Op::Execute:
                    step_execute();
                    break;
                case Op::Poke:
                    poke(c_, s.arg);
                    inputs_changed_ = true;
                    break;
                case Op::Recreate:
                    step_recreate();
                    break;
                case Op::Misuse:
                    step_misuse(s.arg);
                    break;
                case Op::DescRoundTrip:
                    step_round_trip();
                    break;
                case Op::DropBuffer:
                    step_drop_buffer(s.arg);
                    break;
                case Op::Count:
                    break;
            }
        }
    }

private:
    sdm_p1_desc request(int32_t threads) {
        sdm_p1_desc d = c_.desc;
        d.num_threads = threads;
        if (c_.allocator != AllocatorKind::Default) {
            d.allocator.ctx = &alloc_;
            d.allocator.alloc = capped_alloc;
            d.allocator.free = c_.allocator == AllocatorKind::HalfSet ? nullptr : capped_free;
        }
        return d;
    }

    void create(Plan& p) {
        DescBuffer buf = sized_desc(request(p.threads), c_.desc_form);
        p.created =
            checked(Call::Create, "sdm_p1_plan_create", false, [&] { return sdm_p1_plan_create(&p.plan, &buf.desc); });
        if (p.created != SDM_P1_SUCCESS) {
            if (p.plan != nullptr) broken("sdm_p1_plan_create failed but left *plan set");
            if (refused_form(c_.desc_form) && p.created != SDM_P1_ERROR_INVALID_ARGUMENT) {
                broken("a desc the struct-size rule refuses gave another status than INVALID_ARGUMENT");
            }
            const bool forward_only = c_.desc.backward == 0 || c_.desc.backward == SDM_P1_UNSET;
            if (forward_only && std::strstr(sdm_p1_last_error(), "grad_dtype") != nullptr) {
                broken("grad_dtype is ignored without backward, but a forward-only plan was refused for it");
            }
            return;
        }
        if (refused_form(c_.desc_form)) broken("a desc the struct-size rule refuses was accepted");
        if (c_.allocator == AllocatorKind::HalfSet) broken("an allocator without free was accepted");
        if (c_.allocator == AllocatorKind::Misaligned) broken("an allocator's misaligned block was accepted");
        // The resolved options, written into a newer header's longer struct: never past ours.
        const sdm_p1_desc initialized = SDM_P1_DESC_INITIALIZER;
        DescBuffer r = sized_desc(initialized, StructForm::Newer);
        r.newer[0] = r.newer[1] = 0xABABABABABABABABull;
        checked(Call::Query, "sdm_p1_plan_desc", false, [&] { return sdm_p1_plan_desc(p.plan, &r.desc); });
        if (r.desc.struct_size != sizeof(sdm_p1_desc) || r.newer[0] != 0xABABABABABABABABull ||
            r.newer[1] != r.newer[0]) {
            broken("sdm_p1_plan_desc wrote past the fields this library knows");
        }
        p.resolved = r.desc;
        if (p.resolved.backward != (c_.desc.backward == 1 ? 1 : 0)) broken("sdm_p1_plan_desc misreports backward");
        const int32_t grads_f32 =
            c_.desc.grad_dtype == SDM_P1_DTYPE_FLOAT32 ? SDM_P1_DTYPE_FLOAT32 : c_.desc.value_dtype;
        if (c_.desc.backward == 1 && p.resolved.grad_dtype != grads_f32) {
            broken("sdm_p1_plan_desc reports grad_dtype " + std::to_string(p.resolved.grad_dtype) + " for " +
                   std::to_string(c_.desc.grad_dtype));
        }
        const sdm_p1_allocator given = request(p.threads).allocator;
        if (p.resolved.allocator.ctx != given.ctx || p.resolved.allocator.alloc != given.alloc ||
            p.resolved.allocator.free != given.free) {
            broken("sdm_p1_plan_desc does not report the allocator as given");
        }
        if (p.resolved.backend != SDM_P1_BACKEND_CPU) {
            destroy(p);   // AUTO found a GPU: this harness runs host memory only
            p.created = SDM_P1_ERROR_BACKEND_UNAVAILABLE;
            return;
        }
        if (p.resolved.num_threads < 1 || p.resolved.num_threads > p.resolved.N) {
            broken("resolved num_threads " + std::to_string(p.resolved.num_threads) + " outside 1..N");
        }
        checked(Call::Query, "sdm_p1_outputs", false,
                [&] { return sdm_p1_outputs(p.plan, p.views, SDM_P1_FIELD_COUNT); });
        check_views(p.views, p.resolved);
        size_t workspace = 0;
        checked(Call::Query, "sdm_p1_workspace_size", false, [&] { return sdm_p1_workspace_size(p.plan, &workspace); });
        p.storage.assign(SDM_P1_FIELD_COUNT, {});
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            const bool caller = p.resolved.output_mode == SDM_P1_OUTPUTS_CALLER;
            if (caller && c_.runnable && p.views[f].requested) p.storage[f].resize(p.views[f].bytes + 8);
            p.buffers[f] = p.storage[f].empty() ? nullptr : p.storage[f].data();
        }
    }

    void destroy(Plan& p) {
        if (p.plan == nullptr) return;
        checked(Call::Destroy, "sdm_p1_plan_destroy", false, [&] { return sdm_p1_plan_destroy(p.plan); });
        p.plan = nullptr;
    }

    bool caller_mode(const Plan& p) const { return p.resolved.output_mode == SDM_P1_OUTPUTS_CALLER; }

    // The case's inputs in the struct form it chose; `outputs`, `count` as sdm_p1_execute's.
    sdm_p1_status execute(Plan& p, void* const* outputs, int32_t count) {
        InputsBuffer in = sized_inputs(host_inputs(c_), c_.inputs_form);
        const sdm_p1_status s = checked(Call::Execute, "sdm_p1_execute", false,
                                        [&] { return sdm_p1_execute(p.plan, &in.in, outputs, count, nullptr); });
        if (refused_form(c_.inputs_form) && s != SDM_P1_ERROR_INVALID_ARGUMENT) {
            broken("inputs the struct-size rule refuses gave another status than INVALID_ARGUMENT");
        }
        if (s == SDM_P1_ERROR_INVALID_INPUT) {
            const std::string m = sdm_p1_last_error();
            if (m.find("k_idx[") == std::string::npos && m.find("q_idx[") == std::string::npos &&
                m.find("g[") == std::string::npos && m.find("stream_lengths[") == std::string::npos) {
                broken("INVALID_INPUT without the offending element named");
            }
        }
        return s;
    }

    sdm_p1_status execute(Plan& p) {
        return caller_mode(p) ? execute(p, p.buffers, SDM_P1_FIELD_COUNT) : execute(p, nullptr, 0);
    }

    Outputs outputs_of(const Plan& p) const { return host_outputs(p.views, caller_mode(p) ? p.buffers : nullptr); }

    // Both plans on the same inputs: the same status, the same bits or the same message.
    void step_execute() {
        if (!c_.runnable || one_.plan == nullptr || many_.plan == nullptr) return;
        const sdm_p1_status s1 = execute(one_);
        const std::string message1 = sdm_p1_last_error();
        const Outputs out1 = s1 == SDM_P1_SUCCESS ? outputs_of(one_) : Outputs();
        const sdm_p1_status sn = execute(many_);
        if (s1 != sn && !either_out_of_memory(s1, sn)) {
            broken(std::string("1 thread: ") + sdm_p1_status_string(s1) + " (" + message1 + "), " +
                   std::to_string(many_.resolved.num_threads) + " threads: " + sdm_p1_status_string(sn));
        }
        if (s1 == SDM_P1_ERROR_INVALID_INPUT && message1 != sdm_p1_last_error()) {
            broken("1 thread and n threads name different bad inputs: " + message1);
        }
        if (s1 == SDM_P1_SUCCESS && sn == SDM_P1_SUCCESS) {
            const Outputs outn = outputs_of(many_);
            for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
                if (out1[f] != outn[f]) {
                    broken(std::string("output '") + one_.views[f].name + "' differs between 1 thread and " +
                           std::to_string(many_.resolved.num_threads));
                }
            }
            if (!inputs_changed_ && last_one_ != out1) {
                broken("a plan executed again on the same inputs gave other bits");
            }
            last_one_ = out1;
            inputs_changed_ = false;
        }
        step_backward(s1, message1, out1);
    }

    // ---- The backward (C API 1.3) ------------------------------------------------------------

    // The bytes of input gradient `which` of plan p (its resolved grad_dtype).
    size_t grad_bytes(const Plan& p, int which) const {
        const sdm_p1_desc& d = c_.desc;
        const size_t tokens = static_cast<size_t>(d.N * d.C);
        const size_t value = p.resolved.grad_dtype == SDM_P1_DTYPE_BFLOAT16 ? 2 : 4;
        switch (which) {
            case gK:
                return tokens * static_cast<size_t>(d.W) * value;
            case gQ:
                return tokens * static_cast<size_t>(d.R) * value;
            case gG:
                return tokens * static_cast<size_t>(d.gate_width) * 4;
            default:
                return tokens * 4;
        }
    }

    // The first given upstream gradient below the call's count (the one MisalignedUpstream
    // shifts), or -1.
    static int first_given_upstream(const BackwardCall& call) {
        for (int f = 0; f < call.count; ++f) {
            if (!call.up[f].empty() && differentiable(f)) return f;
        }
        return -1;
    }

    // Whether the call's kspa gradient is in effect (given, below count, grads not NULL).
    static bool kspa_given(const BackwardCall& call) {
        return call.misuse != BackwardMisuse::NullGrads && call.misuse != BackwardMisuse::BadCount &&
               call.count > SDM_P1_FIELD_KSPA && !call.up[SDM_P1_FIELD_KSPA].empty();
    }

    // One sdm_p1_execute_backward of `call` on plan p with `payload`, its buffers filled with
    // `pattern` first: the status, the message, each given buffer's bytes. Checks that no byte
    // past a buffer was written, and that a failed call wrote no byte at all.
    BackwardResult run_backward(Plan& p, const BackwardCall& call, const int32_t* payload, bool zero_unread,
                                uint8_t pattern) {
        BackwardResult r;
        std::vector<uint8_t> storage[kInputGrads];
        void* buffer[kInputGrads] = {};
        for (int g = 0; g < kInputGrads; ++g) {
            if ((call.requested >> g & 1u) == 0) continue;
            storage[g].assign(grad_bytes(p, g) + kCanary, pattern);
            buffer[g] = storage[g].data() + ((call.misaligned >> g & 1u) != 0 ? 1 : 0);
        }
        sdm_p1_input_grads plain = SDM_P1_INPUT_GRADS_INITIALIZER;
        plain.k_val = buffer[gK];
        plain.q_val = buffer[gQ];
        plain.g = static_cast<float*>(buffer[gG]);
        plain.beta = static_cast<float*>(buffer[gBeta]);
        plain.reserved = call.misuse == BackwardMisuse::OutReserved ? 1u : 0u;
        InputGradsBuffer out = sized_input_grads(plain, call.out_form);

        std::vector<std::vector<uint8_t>> zeroed;
        zeroed.reserve(SDM_P1_FIELD_COUNT);
        const void* grads[SDM_P1_FIELD_COUNT + 1] = {};
        const int shifted = call.misuse == BackwardMisuse::MisalignedUpstream ? first_given_upstream(call) : -1;
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            const std::vector<uint8_t>* up = &call.up[f];
            if (up->empty()) continue;
            if (zero_unread && differentiable(f)) {
                zeroed.push_back(*up);
                const size_t element = upstream_element_bytes(c_.desc, f);
                for (size_t i = 0; i < up->size() / element; ++i) {
                    if (unread_upstream(c_, f, i)) std::memset(zeroed.back().data() + i * element, 0, element);
                }
                up = &zeroed.back();
            }
            grads[f] = up->data() + (f == shifted ? 1 : 0);
        }
        int32_t count = call.count;
        if (call.misuse == BackwardMisuse::BadCount) count = (call.corrupt_arg & 1u) != 0 ? -1 : SDM_P1_FIELD_COUNT + 1;
        if (call.misuse == BackwardMisuse::NullGrads && count == 0) count = 1;

        InputsBuffer in = sized_inputs(host_inputs(c_), c_.inputs_form);
        if (call.misuse == BackwardMisuse::DropBeta) in.in.beta = nullptr;
        if (call.misuse == BackwardMisuse::InputsReserved) in.in.reserved = 1;
        sdm_p1_plan* plan = call.misuse == BackwardMisuse::NullPlan ? nullptr : p.plan;
        const sdm_p1_inputs* inputs = call.misuse == BackwardMisuse::NullInputs ? nullptr : &in.in;
        const void* const* grads_arg = call.misuse == BackwardMisuse::NullGrads ? nullptr : grads;
        const sdm_p1_input_grads* out_arg = call.misuse == BackwardMisuse::NullOut ? nullptr : &out.out;
        r.status = checked(Call::Backward, "sdm_p1_execute_backward", false, [&] {
            return sdm_p1_execute_backward(plan, inputs, payload, grads_arg, count, out_arg, nullptr);
        });
        if (r.status != SDM_P1_SUCCESS) r.message = sdm_p1_last_error();
        for (int g = 0; g < kInputGrads; ++g) {
            if (storage[g].empty()) continue;
            const size_t start = r.status == SDM_P1_SUCCESS ? grad_bytes(p, g) : 0;
            for (size_t i = start; i < storage[g].size(); ++i) {
                if (storage[g][i] != pattern) {
                    broken(std::string("sdm_p1_execute_backward (") + sdm_p1_status_string(r.status) + ") wrote " +
                           kGradNames[g] + " byte " + std::to_string(i) +
                           (start == 0 ? " of a refused call" : " past the buffer"));
                }
            }
            if (r.status == SDM_P1_SUCCESS) r.grads[g].assign(storage[g].begin(), storage[g].begin() + start);
        }
        return r;
    }

    // What the header says a backward of `call` with `payload` gives: an argument problem (the
    // message naming it when it is the only one), else the data's outcome where it is known:
    // that of this step's forward (`forward`, `forward_message`) on the same inputs.
    struct Expected {
        int problems = 0;
        std::string needle;   // names the only argument problem
        bool known = false;   // no argument problem and the data's outcome known:
        sdm_p1_status status = SDM_P1_SUCCESS;
        std::string message_part;   // ... with this in the message
    };

    Expected expected_backward(const Plan& p, const BackwardCall& call, const int32_t* payload, sdm_p1_status forward,
                               const std::string& forward_message) const {
        Expected e;
        auto problem = [&](bool is, const std::string& needle) {
            if (!is) return;
            ++e.problems;
            e.needle = needle;
        };
        const BackwardMisuse m = call.misuse;
        const bool grads_ok = m != BackwardMisuse::BadCount && m != BackwardMisuse::NullGrads;
        problem(m == BackwardMisuse::NullPlan, "plan is NULL");
        problem(p.resolved.backward != 1, "the plan was created without sdm_p1_desc.backward = 1");
        problem(!grads_ok, "count = ");
        if (grads_ok && call.nondiff_field >= 0 && call.nondiff_field < call.count) {
            const int f = call.nondiff_field;
            problem(true,
                    "grads[" + std::to_string(f) + "] (" + p.views[f].name + "): the output is not differentiable");
        }
        if (m == BackwardMisuse::MisalignedUpstream && first_given_upstream(call) >= 0) {
            const int f = first_given_upstream(call);
            problem(true, "grads[" + std::to_string(f) + "] (" + p.views[f].name + ") is not aligned");
        }
        problem(m == BackwardMisuse::NullInputs, "inputs is NULL");
        problem(refused_form(c_.inputs_form), "inputs->struct_size");
        problem(m == BackwardMisuse::InputsReserved, "inputs->reserved = 1 must be 0");
        const bool kspa = kspa_given(call);
        // With a payload the ids are both given (and checked against it) or neither: one alone
        // is refused as NULL ("inputs->q_idx is NULL but inputs->k_idx is not").
        const bool ids = payload == nullptr || ids_given(c_);
        for (int i = 0; i < kInputs; ++i) {
            const bool needed =
                i == kVal || i == qVal || i == gGate || ((i == kIdx || i == qIdx) && ids) || (i == bBeta && kspa);
            if (!needed) continue;
            const bool null = (c_.null_inputs >> i & 1u) != 0 || (i == bBeta && m == BackwardMisuse::DropBeta);
            const std::string name = std::string("inputs->") + kInputNames[i];
            if (null) problem(true, i == bBeta ? "which needs beta, but inputs->beta is NULL" : name + " is NULL");
            if (!null && (c_.misaligned_inputs >> i & 1u) != 0) problem(true, name + " is not aligned");
        }
        const bool lengths_given = !c_.arrays[kLengths].empty();
        problem(lengths_given && c_.lengths_dtype != SDM_P1_DTYPE_INT32 && c_.lengths_dtype != SDM_P1_DTYPE_INT64,
                "inputs->stream_lengths_dtype");
        problem(payload != nullptr && reinterpret_cast<uintptr_t>(payload) % 4 != 0, "payload is not aligned");
        problem(m == BackwardMisuse::NullOut, "out is NULL");
        problem(refused_form(call.out_form), "out->struct_size");
        problem(m == BackwardMisuse::OutReserved, "out->reserved = 1 must be 0");
        for (int g = 0; g < kInputGrads; ++g) {
            problem((call.requested & call.misaligned) >> g & 1u,
                    std::string("out->") + kGradNames[g] + " is not aligned");
        }
        if (e.problems != 0) return e;
        if (lengths_given && valid_tokens(c_, 0) < 0) {
            e.known = true;
            e.status = SDM_P1_ERROR_INVALID_INPUT;
            e.message_part = "sdm_p1_execute_backward: stream_lengths[";
            return e;
        }
        if (forward == SDM_P1_SUCCESS) {   // the data are good: the payload decides
            e.known = true;
            e.message_part = payload == nullptr ? ""
                                                : payload_violation(c_, payload, p.views[SDM_P1_FIELD_PAYLOAD].shape[1],
                                                                    ids_given(c_));
            e.status = e.message_part.empty() ? SDM_P1_SUCCESS : SDM_P1_ERROR_INVALID_INPUT;
            if (!e.message_part.empty()) e.message_part = "sdm_p1_execute_backward: " + e.message_part + " = ";
        } else if (forward == SDM_P1_ERROR_INVALID_INPUT && payload == nullptr) {   // the same checks
            const std::string prefix = "sdm_p1_execute: ";
            if (forward_message.compare(0, prefix.size(), prefix) != 0) broken("a forward's message lacks its name");
            e.known = true;
            e.status = SDM_P1_ERROR_INVALID_INPUT;
            e.message_part = "sdm_p1_execute_backward: " + forward_message.substr(prefix.size());
        }
        return e;
    }

    void check_expected(const Expected& e, const BackwardResult& r, const char* what) const {
        auto fail = [&](const std::string& want) {
            broken(std::string("sdm_p1_execute_backward (") + what + ") gave " + sdm_p1_status_string(r.status) + " (" +
                   r.message + "), not " + want);
        };
        if (r.status == SDM_P1_ERROR_OUT_OF_MEMORY) return;
        if (r.status != SDM_P1_SUCCESS && r.message.compare(0, 23, "sdm_p1_execute_backward") != 0) {
            fail("a message that names sdm_p1_execute_backward");
        }
        if (e.problems != 0) {
            if (r.status != SDM_P1_ERROR_INVALID_ARGUMENT) fail("INVALID_ARGUMENT");
            if (e.problems == 1 && r.message.find(e.needle) == std::string::npos)
                fail("a message with '" + e.needle + "'");
            return;
        }
        if (r.status == SDM_P1_ERROR_INVALID_ARGUMENT) fail("success or INVALID_INPUT: every argument is good");
        if (!e.known) return;
        if (r.status != e.status) fail(sdm_p1_status_string(e.status) + std::string(" ") + e.message_part);
        if (r.status != SDM_P1_SUCCESS && r.message.find(e.message_part) == std::string::npos) {
            fail("a message with '" + e.message_part + "'");
        }
    }

    // The exact properties of a successful backward: padding tokens get +0.0 in every gradient;
    // without a kspa gradient so does beta; with valid ids and the true sort, a repeat lane's
    // per-write gate gets +0.0; without any upstream gradient (and finite values) everything.
    void check_zeros(const Plan& p, const BackwardCall& call, const BackwardResult& r, bool true_sort) const {
        const sdm_p1_desc& d = c_.desc;
        const size_t value = p.resolved.grad_dtype == SDM_P1_DTYPE_BFLOAT16 ? 2 : 4;
        const size_t per_token[kInputGrads] = {static_cast<size_t>(d.W) * value, static_cast<size_t>(d.R) * value,
                                               static_cast<size_t>(d.gate_width) * 4, 4};
        auto zero = [](const std::vector<uint8_t>& v, size_t from, size_t bytes) {
            for (size_t i = from; i < from + bytes; ++i) {
                if (v[i] != 0) return false;
            }
            return true;
        };
        if (valid_tokens(c_, 0) < 0) return;   // (then no backward succeeds)
        const bool no_upstream = grads_none(call);
        const bool finite = no_upstream && valid_values_finite();
        for (int64_t chunk = 0; chunk < d.N; ++chunk) {
            const int64_t tv = valid_tokens(c_, chunk);
            for (int64_t t = 0; t < d.C; ++t) {
                const size_t tok = static_cast<size_t>(chunk * d.C + t);
                for (int g = 0; g < kInputGrads; ++g) {
                    if (r.grads[g].empty()) continue;
                    const bool want_zero = t >= tv || (g == gBeta && !kspa_given(call)) || finite;
                    if (want_zero && !zero(r.grads[g], tok * per_token[g], per_token[g])) {
                        broken(std::string("gradient ") + kGradNames[g] + " of chunk " + std::to_string(chunk) +
                               ", token " + std::to_string(t) + " is not +0.0 (" +
                               (t >= tv                           ? "a padding token"
                                : g == gBeta && !kspa_given(call) ? "no kspa gradient"
                                                                  : "no upstream gradient") +
                               ")");
                    }
                }
                if (!true_sort || t >= tv || r.grads[gG].empty() || d.gate_width != d.W) continue;
                for (int64_t l = 1; l < d.W; ++l) {
                    bool repeat = false;
                    for (int64_t e = 0; e < l; ++e) repeat |= k_id(tok, e) == k_id(tok, l);
                    if (repeat &&
                        !zero(r.grads[gG], (tok * static_cast<size_t>(d.W) + static_cast<size_t>(l)) * 4, 4)) {
                        broken("the gate gradient of repeat lane " + std::to_string(l) + " of chunk " +
                               std::to_string(chunk) + ", token " + std::to_string(t) + " is not +0.0");
                    }
                }
            }
        }
    }

    // Whether no upstream gradient is in effect (none given below count, or grads refused).
    static bool grads_none(const BackwardCall& call) {
        for (int f = 0; f < call.count; ++f) {
            if (differentiable(f) && !call.up[f].empty()) return false;
        }
        return true;
    }

    int64_t k_id(size_t token, int64_t lane) const {
        const size_t i = token * static_cast<size_t>(c_.desc.W) + static_cast<size_t>(lane);
        if (c_.desc.index_dtype == SDM_P1_DTYPE_INT64) {
            int64_t v;
            std::memcpy(&v, c_.arrays[kIdx].data() + i * 8, 8);
            return v;
        }
        int32_t v;
        std::memcpy(&v, c_.arrays[kIdx].data() + i * 4, 4);
        return v;
    }

    // Every k_val and q_val of a valid token finite.
    bool valid_values_finite() const {
        const sdm_p1_desc& d = c_.desc;
        const bool bf16 = d.value_dtype == SDM_P1_DTYPE_BFLOAT16;
        for (int input : {kVal, qVal}) {
            const int64_t lanes = input == kVal ? d.W : d.R;
            for (int64_t tok = 0; tok < d.N * d.C; ++tok) {
                if (tok % d.C >= valid_tokens(c_, tok / d.C)) continue;
                for (int64_t l = 0; l < lanes; ++l) {
                    const size_t i = static_cast<size_t>(tok * lanes + l);
                    uint32_t bits = 0;
                    if (bf16) {
                        uint16_t h;
                        std::memcpy(&h, c_.arrays[input].data() + i * 2, 2);
                        bits = static_cast<uint32_t>(h) << 16;
                    } else {
                        std::memcpy(&bits, c_.arrays[input].data() + i * 4, 4);
                    }
                    if ((bits & 0x7F800000u) == 0x7F800000u) return false;
                }
            }
        }
        return true;
    }

    static bool same_grads(const BackwardResult& a, const BackwardResult& b) {
        for (int g = 0; g < kInputGrads; ++g) {
            if (a.grads[g] != b.grads[g]) return false;
        }
        return true;
    }

    // bfloat16 gradients of k_val and q_val are the float32 ones (of a plan with grad_dtype
    // FLOAT32, created at the first need) rounded to nearest even; those of g and beta the same.
    void check_rounding(const BackwardCall& call, const int32_t* payload, const BackwardResult& r1) {
        if (one_.resolved.grad_dtype != SDM_P1_DTYPE_BFLOAT16) return;
        if (!wide_tried_) {
            wide_tried_ = true;
            sdm_p1_desc d = request(1);
            d.grad_dtype = SDM_P1_DTYPE_FLOAT32;
            d.allocator = sdm_p1_allocator{nullptr, nullptr, nullptr};   // (small: a runnable case)
            wide_.created =
                checked(Call::Create, "sdm_p1_plan_create", false, [&] { return sdm_p1_plan_create(&wide_.plan, &d); });
            if (wide_.created == SDM_P1_ERROR_OUT_OF_MEMORY) return;
            if (wide_.created != SDM_P1_SUCCESS) broken("the plan's desc with grad_dtype FLOAT32 was refused");
            wide_.resolved = d;
            checked(Call::Query, "sdm_p1_plan_desc", false,
                    [&] { return sdm_p1_plan_desc(wide_.plan, &wide_.resolved); });
            checked(Call::Query, "sdm_p1_outputs", false,
                    [&] { return sdm_p1_outputs(wide_.plan, wide_.views, SDM_P1_FIELD_COUNT); });
            if (wide_.resolved.grad_dtype != SDM_P1_DTYPE_FLOAT32) broken("grad_dtype FLOAT32 not reported as such");
        }
        if (wide_.plan == nullptr) return;
        const BackwardResult w = run_backward(wide_, call, payload, false, kPatternA);
        if (w.status != r1.status) {
            broken(std::string("sdm_p1_execute_backward: grad_dtype FLOAT32 gave ") + sdm_p1_status_string(w.status) +
                   " (" + w.message + "), the bfloat16 gradients' plan SUCCESS");
        }
        for (int g = 0; g < kInputGrads; ++g) {
            if (g == gG || g == gBeta) {
                if (w.grads[g] != r1.grads[g])
                    broken(std::string("gradient ") + kGradNames[g] + " depends on grad_dtype");
                continue;
            }
            for (size_t i = 0; i < r1.grads[g].size() / 2; ++i) {
                uint32_t u;
                uint16_t h;
                std::memcpy(&u, w.grads[g].data() + 4 * i, 4);
                std::memcpy(&h, r1.grads[g].data() + 2 * i, 2);
                const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
                const uint16_t rounded =
                    nan ? uint16_t{0x7FC0} : static_cast<uint16_t>((u + 0x7FFFu + (u >> 16 & 1u)) >> 16);
                if (h != rounded) {
                    broken(std::string("bfloat16 gradient ") + kGradNames[g] + "[" + std::to_string(i) +
                           "] is not the float32 one rounded to nearest even");
                }
            }
        }
    }

    // After a forward execute (status `forward`, its outputs `out1` on success): the case's next
    // backward call on both plans, and again with the other payload, the never-read upstream
    // cells zeroed and a second time, each compared.
    void step_backward(sdm_p1_status forward, const std::string& forward_message, const Outputs& out1) {
        if (c_.backward.empty()) return;
        const BackwardCall& call = c_.backward[backward_calls_++ % c_.backward.size()];
        const bool forward_ok = forward == SDM_P1_SUCCESS;
        std::vector<int32_t> fwd;
        if (forward_ok) {
            const std::vector<uint8_t>& bytes = out1[SDM_P1_FIELD_PAYLOAD];
            fwd.resize(bytes.size() / 4);
            std::memcpy(fwd.data(), bytes.data(), bytes.size());
        }
        const int64_t row = one_.views[SDM_P1_FIELD_PAYLOAD].shape[1];
        std::vector<int32_t> payload;
        std::vector<uint8_t> odd;   // a misaligned copy
        const int32_t* pp = nullptr;
        bool true_sort = true;   // pp is the forward's sort (or NULL)
        switch (call.payload) {
            case PayloadMode::Forward:
                payload = fwd;
                break;
            case PayloadMode::Null:
                break;
            case PayloadMode::Corrupt:
                payload = fwd;
                if (!payload.empty()) corrupt_payload(c_, call, row, payload);
                true_sort = call.corruption == Corruption::Unread;
                break;
            case PayloadMode::Stale:
                payload = stale_;
                true_sort = false;
                break;
        }
        if (!payload.empty()) pp = payload.data();
        if (pp != nullptr && call.payload == PayloadMode::Corrupt && call.corruption == Corruption::Misaligned) {
            odd.assign(payload.size() * 4 + 4, 0);
            std::memcpy(odd.data() + 1, payload.data(), payload.size() * 4);
            pp = reinterpret_cast<const int32_t*>(odd.data() + 1);
        }
        if (forward_ok) stale_ = fwd;
        true_sort = true_sort && forward_ok;

        const BackwardResult r1 = run_backward(one_, call, pp, false, kPatternA);
        check_expected(expected_backward(one_, call, pp, forward, forward_message), r1, "1 thread");
        const BackwardResult rn = run_backward(many_, call, pp, false, kPatternB);
        if (either_out_of_memory(r1.status, rn.status)) return;
        const std::string n = std::to_string(many_.resolved.num_threads);
        if (r1.status != rn.status || r1.message != rn.message) {
            broken("sdm_p1_execute_backward: 1 thread gave " + std::string(sdm_p1_status_string(r1.status)) + " (" +
                   r1.message + "), " + n + " threads " + sdm_p1_status_string(rn.status) + " (" + rn.message + ")");
        }
        if (r1.status != SDM_P1_SUCCESS) return;
        // Buffers filled with other bytes first: also catches an element left unwritten.
        if (!same_grads(r1, rn)) {
            broken("sdm_p1_execute_backward: the gradients differ between 1 thread and " + n +
                   " (or an element was left unwritten)");
        }
        check_zeros(one_, call, r1, true_sort);
        check_rounding(call, pp, r1);
        if (call.twice) {
            const BackwardResult again = run_backward(one_, call, pp, false, kPatternB);
            if (again.status != SDM_P1_SUCCESS || !same_grads(again, r1)) {
                broken("sdm_p1_execute_backward executed again on the same inputs gave other bits");
            }
        }
        if (true_sort && forward_ok) {   // the forward's payload and NULL: the same bits
            const int32_t* other = pp == nullptr ? fwd.data() : nullptr;
            const BackwardResult r = run_backward(one_, call, other, false, kPatternB);
            check_expected(expected_backward(one_, call, other, forward, forward_message), r,
                           other == nullptr ? "NULL payload" : "the forward's payload");
            if (r.status == SDM_P1_SUCCESS && !same_grads(r, r1)) {
                broken(std::string("sdm_p1_execute_backward: the forward's payload") +
                       (call.payload == PayloadMode::Corrupt ? " (its unread bits changed)" : "") +
                       " and NULL give different gradients");
            }
        }
        // (Never read with the true sort: a wrong payload that passes pairs other cells.)
        if (call.check_unread && true_sort && valid_tokens(c_, 0) >= 0) {
            const BackwardResult r = run_backward(one_, call, pp, true, kPatternB);
            if (r.status != SDM_P1_SUCCESS || !same_grads(r, r1)) {
                broken("sdm_p1_execute_backward: the upstream cells it never reads changed its gradients");
            }
        }
    }

    // The n-thread plan destroyed and created again: the same outcome.
    void step_recreate() {
        const sdm_p1_status before = many_.created;
        destroy(many_);
        create(many_);
        if (before != many_.created && !either_out_of_memory(before, many_.created)) {
            broken("a plan created again from the same desc gave another status");
        }
    }

    // One call with a NULL or out-of-range argument: refused as the header says.
    void step_misuse(uint32_t arg) {
        sdm_p1_plan* plan = one_.plan;
        sdm_p1_tensor views[SDM_P1_FIELD_COUNT + 8];
        const sdm_p1_desc plain = request(1);
        const InputsBuffer in = sized_inputs(host_inputs(c_), StructForm::Plain);
        const unsigned which = arg % 12;
        // Runs `call`, a `kind` call of `function`, which must give `want`.
        auto expect = [which](sdm_p1_status want, Call kind, const char* function, auto call) {
            const sdm_p1_status got = checked(kind, function, false, call);
            if (got != want) {
                broken(std::string(function) + " (misuse " + std::to_string(which) + ") gave " +
                       sdm_p1_status_string(got) + ", not " + sdm_p1_status_string(want));
            }
        };
        const sdm_p1_status bad = SDM_P1_ERROR_INVALID_ARGUMENT;
        const char* create = "sdm_p1_plan_create";
        const char* execute = "sdm_p1_execute";
        const char* outputs = "sdm_p1_outputs";
        switch (which) {
            case 0:
                expect(bad, Call::Create, create, [&] { return sdm_p1_plan_create(nullptr, &plain); });
                break;
            case 1: {
                sdm_p1_plan* out = reinterpret_cast<sdm_p1_plan*>(&out);
                expect(bad, Call::Create, create, [&] { return sdm_p1_plan_create(&out, nullptr); });
                if (out != nullptr) broken("plan_create(&p, NULL) left p set");
                break;
            }
            case 2: {
                sdm_p1_desc d = plain;
                expect(bad, Call::Query, "sdm_p1_plan_desc", [&] { return sdm_p1_plan_desc(nullptr, &d); });
                if (plan) expect(bad, Call::Query, "sdm_p1_plan_desc", [&] { return sdm_p1_plan_desc(plan, nullptr); });
                break;
            }
            case 3: {
                size_t bytes = 0;
                expect(bad, Call::Query, "sdm_p1_workspace_size",
                       [&] { return sdm_p1_workspace_size(nullptr, &bytes); });
                if (plan)
                    expect(bad, Call::Query, "sdm_p1_workspace_size",
                           [&] { return sdm_p1_workspace_size(plan, nullptr); });
                break;
            }
            case 4:
                expect(bad, Call::Query, outputs, [&] { return sdm_p1_outputs(nullptr, views, 3); });
                if (plan == nullptr) break;
                expect(bad, Call::Query, outputs, [&] { return sdm_p1_outputs(plan, nullptr, 3); });
                expect(bad, Call::Query, outputs, [&] { return sdm_p1_outputs(plan, views, -1); });
                break;
            case 5: {
                // More views than fields: the ones past SDM_P1_FIELD_COUNT stay as they were.
                std::memset(views, 0x5A, sizeof views);
                if (plan == nullptr) break;
                expect(SDM_P1_SUCCESS, Call::Query, outputs,
                       [&] { return sdm_p1_outputs(plan, views, SDM_P1_FIELD_COUNT + 8); });
                const auto* past = reinterpret_cast<const unsigned char*>(views + SDM_P1_FIELD_COUNT);
                for (size_t i = 0; i < 8 * sizeof(sdm_p1_tensor); ++i) {
                    if (past[i] != 0x5A) broken("sdm_p1_outputs wrote past SDM_P1_FIELD_COUNT views");
                }
                break;
            }
            case 6:
                expect(bad, Call::Execute, execute,
                       [&] { return sdm_p1_execute(nullptr, &in.in, nullptr, 0, nullptr); });
                break;
            case 7:
                if (plan)
                    expect(bad, Call::Execute, execute,
                           [&] { return sdm_p1_execute(plan, nullptr, nullptr, 0, nullptr); });
                break;
            case 8: {
                if (plan == nullptr) break;
                void* none[SDM_P1_FIELD_COUNT + 1] = {};
                const int32_t counts[] = {-1, SDM_P1_FIELD_COUNT + 1, 3};
                const int32_t count = counts[(arg >> 8) % 3];
                void* const* buffers = count == 3 ? nullptr : none;   // 3 with NULL outputs
                expect(bad, Call::Execute, execute,
                       [&] { return sdm_p1_execute(plan, &in.in, buffers, count, nullptr); });
                break;
            }
            case 9:
                expect(bad, Call::ExecuteStatus, "sdm_p1_execute_status",
                       [&] { return sdm_p1_execute_status(nullptr); });
                if (plan) {
                    expect(SDM_P1_SUCCESS, Call::ExecuteStatus, "sdm_p1_execute_status",
                           [&] { return sdm_p1_execute_status(plan); });   // the CPU reports in execute
                }
                break;
            case 10:
                expect(SDM_P1_SUCCESS, Call::Destroy, "sdm_p1_plan_destroy",
                       [&] { return sdm_p1_plan_destroy(nullptr); });
                if (sdm_p1_version_number() != SDM_P1_VERSION_NUMBER || sdm_p1_version_string() == nullptr) {
                    broken("the library's version is not the header's");
                }
                break;
            default: {
                expect(bad, Call::DeviceCount, "sdm_p1_cuda_device_count",
                       [&] { return sdm_p1_cuda_device_count(nullptr); });
                int32_t devices = -1;
                checked(Call::DeviceCount, "sdm_p1_cuda_device_count", false,
                        [&] { return sdm_p1_cuda_device_count(&devices); });
                if (devices < 0) broken("sdm_p1_cuda_device_count gave a negative count");
                break;
            }
        }
    }

    // A plan from the resolved descriptor of the first: the same options and views.
    void step_round_trip() {
        if (one_.plan == nullptr) return;
        sdm_p1_desc resolved = one_.resolved;
        sdm_p1_plan* again = nullptr;
        const sdm_p1_status s =
            checked(Call::Create, "sdm_p1_plan_create", false, [&] { return sdm_p1_plan_create(&again, &resolved); });
        if (s == SDM_P1_ERROR_OUT_OF_MEMORY) return;
        if (s != SDM_P1_SUCCESS) broken("a plan from sdm_p1_plan_desc's descriptor was refused");
        sdm_p1_desc twice = one_.resolved;
        sdm_p1_tensor views[SDM_P1_FIELD_COUNT];
        checked(Call::Query, "sdm_p1_plan_desc", false, [&] { return sdm_p1_plan_desc(again, &twice); });
        checked(Call::Query, "sdm_p1_outputs", false, [&] { return sdm_p1_outputs(again, views, SDM_P1_FIELD_COUNT); });
        checked(Call::Destroy, "sdm_p1_plan_destroy", false, [&] { return sdm_p1_plan_destroy(again); });
        if (!same_options(twice, one_.resolved, true)) broken("resolving a resolved desc changed it");
        if (!same_views(views, one_.views)) broken("a plan from the resolved desc has other views");
    }

    // An execute with one requested field's buffer NULL (caller mode) or misaligned: refused.
    // In plan mode a NULL falls back to the plan's buffer.
    void step_drop_buffer(uint32_t arg) {
        if (!c_.runnable || one_.plan == nullptr) return;
        std::vector<int> requested;
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            if (one_.views[f].requested) requested.push_back(f);
        }
        const int f = requested[arg % requested.size()];
        const bool misalign = (arg >> 8 & 1u) != 0 && dtype_size(one_.views[f].dtype) > 1;
        void* outputs[SDM_P1_FIELD_COUNT] = {};
        std::vector<uint8_t> scratch(one_.views[f].bytes + 8);
        if (caller_mode(one_)) std::memcpy(outputs, one_.buffers, sizeof outputs);
        if (misalign) {
            outputs[f] = scratch.data() + 1;
        } else if (!caller_mode(one_)) {
            execute(one_, outputs, static_cast<int32_t>(1 + (arg >> 9) % SDM_P1_FIELD_COUNT));   // all NULL
            inputs_changed_ = true;   // one plan ran; the next comparison starts afresh
            return;
        } else {
            outputs[f] = nullptr;
        }
        const sdm_p1_status s = execute(one_, outputs, SDM_P1_FIELD_COUNT);
        if (s != SDM_P1_ERROR_INVALID_ARGUMENT) {
            broken(std::string("an execute with output '") + one_.views[f].name + "' " +
                   (misalign ? "misaligned" : "NULL") + " gave " + sdm_p1_status_string(s));
        }
    }

    Case& c_;
    Allocations alloc_;
    Plan one_, many_;
    Outputs last_one_;
    bool inputs_changed_ = true;
    Plan wide_;   // grad_dtype FLOAT32 (bfloat16 values), for check_rounding
    bool wide_tried_ = false;
    size_t backward_calls_ = 0;    // backward calls made: the next is this one modulo their count
    std::vector<int32_t> stale_;   // the last successful forward's payload
};

}   // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Case c = decode_case(data, size);
    Session session(c);
    session.run();
    return 0;
}
