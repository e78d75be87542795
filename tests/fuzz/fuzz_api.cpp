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
        if (s1 != SDM_P1_SUCCESS || sn != SDM_P1_SUCCESS) return;
        const Outputs outn = outputs_of(many_);
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            if (out1[f] != outn[f]) {
                broken(std::string("output '") + one_.views[f].name + "' differs between 1 thread and " +
                       std::to_string(many_.resolved.num_threads));
            }
        }
        if (!inputs_changed_ && last_one_ != out1) broken("a plan executed again on the same inputs gave other bits");
        last_one_ = out1;
        inputs_changed_ = false;
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
};

}   // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Case c = decode_case(data, size);
    Session session(c);
    session.run();
    return 0;
}
