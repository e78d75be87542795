// The CUDA backend against the CPU backend, in one process, through the public C API only:
// every output byte of every field, on seeded random and adversarial cases (the case
// families of the Python reference tests, the largest shapes, every det_fields set, the
// benchmark shapes), in both output modes (caller buffers also at the least alignment the API
// accepts); then the CUDA-specific promises: repeated executes and other streams give the
// same bits, CUDA graph capture and replay, the caller's allocator (used only at create /
// destroy), execute never waits for the stream, bad data reported by sdm_p1_execute_status
// with the CPU backend's message, and host pointers refused. The backward (families bwd_*):
// every gradient byte against the CPU backend's on the comparison families' cases, with the
// payload given and sorted again, and its promises (upstream subsets, zero and non-finite
// upstream, graphs, determinism, bad payloads and data, host pointers). Prints one line per
// family and "N passed, M failed"; exits 77 (a skip for meson) where there is no CUDA device.
//
//   test_cuda [--quick] [--seed S] [--only FAMILY] [--limit K] [--cpu-only] [--backward] [--verbose]
//   --quick     a reduced case set (for compute-sanitizer)
//   --cpu-only  runs the comparison cases on the CPU backend alone (checks the case set
//               without a GPU)
//   --backward  the backward's families alone (sdm_p1_execute_backward against the CPU
//               backend's, byte for byte, and its CUDA promises)
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "cuda_backward.h"
#include "cuda_bad_data.h"
#include "cuda_case_lists.h"
#include "cuda_cases.h"
#include "cuda_harness.h"
#include "sdm/phase1.h"

namespace {

using namespace cuda_test;

struct Options : ListOptions {
    bool cpu_only = false;
    bool backward_only = false;   // the backward's families alone
    bool verbose = false;
    std::string only;   // run this family alone
    size_t limit = 0;   // at most this many cases per comparison family (0: all)
};

// ---- one case on both backends ----------------------------------------------------------

// "" when the CUDA backend's outputs equal the CPU backend's byte for byte.
std::string compare_backends(const CaseSpec& s, OutMode mode, cudaStream_t stream) {
    const Encoded e = make_inputs(s).encode();
    const RunResult cpu = run_cpu(s, e);
    if (cpu.status != SDM_P1_SUCCESS) return "cpu: " + cpu.error;
    const DeviceInputs dev(e);
    const CudaPlan plan(s, mode);
    const sdm_p1_status st = plan.execute(dev.view(s.needs_beta()), stream);
    if (st != SDM_P1_SUCCESS) return api_error("cuda execute", st);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const RunResult gpu = plan.result();
    if (gpu.status != SDM_P1_SUCCESS) return "cuda execute_status: " + gpu.error;
    return compare_fields(cpu, gpu);
}

std::string cpu_alone(const CaseSpec& s) {
    const RunResult cpu = run_cpu(s, make_inputs(s).encode());
    return cpu.status == SDM_P1_SUCCESS ? "" : "cpu: " + cpu.error;
}

// A comparison family: each case once, the output mode rotating (plan, plan, caller, mixed,
// plan, plan, shifted caller buffers, mixed).
void run_cases(Tally& t, const std::string& family, const CaseList& cases, const Options& o, cudaStream_t stream) {
    if (!o.only.empty() && o.only != family) return;
    t.begin(family);
    for (size_t i = 0; i < cases.size() && (o.limit == 0 || i < o.limit); ++i) {
        const OutMode mode = i % 8 == 2   ? OutMode::Caller
                             : i % 8 == 6 ? OutMode::CallerShifted
                             : i % 4 == 3 ? OutMode::Mixed
                                          : OutMode::Plan;
        const auto t0 = std::chrono::steady_clock::now();
        t.run(describe(cases[i]) + " (" + mode_name(mode) + ")",
              [&] { return o.cpu_only ? cpu_alone(cases[i]) : compare_backends(cases[i], mode, stream); });
        if (o.verbose) {
            std::printf("  %.3f s  %s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                        describe(cases[i]).c_str());
        }
    }
    t.end();
}

// ---- shared helpers of the API families ---------------------------------------------------

CaseSpec api_case(const std::string& name, uint64_t seed) {
    CaseSpec s = spec(name, 6, 32, 8, 6, 40).streams(3, 1000).valid(21).key_mode(Keys::Random);
    s.gates_per_write().gate_kind(Gates::Mixed).value_kind(Values::Mixed).fields(SDM_P1_DET_ALL);
    s.seed = mix_seed(seed, name_seed(name));
    return s;
}

struct Stream {
    cudaStream_t s = nullptr;
    explicit Stream(unsigned flags = cudaStreamNonBlocking) { CUDA_CHECK(cudaStreamCreateWithFlags(&s, flags)); }
    ~Stream() { cudaStreamDestroy(s); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
};

// Executes (poisoned outputs first), synchronizes and compares with the CPU's result.
std::string execute_and_compare(const CudaPlan& plan, const sdm_p1_inputs& in, cudaStream_t stream,
                                const RunResult& cpu) {
    const sdm_p1_status st = plan.execute(in, stream);
    if (st != SDM_P1_SUCCESS) return api_error("execute", st);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const RunResult gpu = plan.result();
    if (gpu.status != SDM_P1_SUCCESS) return "execute_status: " + gpu.error;
    return compare_fields(cpu, gpu);
}

// Does `message` name `field` as a word (not inside a longer identifier)?
bool names(const std::string& message, const std::string& field) {
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (size_t p = message.find(field); p != std::string::npos; p = message.find(field, p + 1)) {
        const bool left = p == 0 || !ident(message[p - 1]);
        const bool right = p + field.size() >= message.size() || !ident(message[p + field.size()]);
        if (left && right) return true;
    }
    return false;
}

// ---- output modes, determinism, streams ----------------------------------------------------

void test_output_modes(Tally& t, const Options& o, cudaStream_t stream) {
    const CaseSpec s = api_case("modes", o.seed);
    for (OutMode m : {OutMode::Plan, OutMode::Caller, OutMode::CallerShifted, OutMode::Mixed}) {
        t.run(mode_name(m), [&] { return compare_backends(s, m, stream); });
    }
}

void test_determinism(Tally& t, const Options& o) {
    const CaseSpec s = api_case("determinism", o.seed);
    const Encoded e = make_inputs(s).encode();
    const RunResult cpu = run_cpu(s, e);
    const DeviceInputs dev(e);
    const sdm_p1_inputs in = dev.view(s.needs_beta());
    Stream created;
    {
        const CudaPlan plan(s, OutMode::Plan);
        for (int rep = 1; rep <= 3; ++rep) {
            t.run("execute #" + std::to_string(rep) + " of one plan",
                  [&] { return execute_and_compare(plan, in, created.s, cpu); });
        }
    }
    t.run("a fresh plan", [&] { return execute_and_compare(CudaPlan(s, OutMode::Plan), in, created.s, cpu); });
    Stream blocking(cudaStreamDefault);
    const std::pair<const char*, cudaStream_t> streams[] = {{"legacy default stream (NULL)", nullptr},
                                                            {"per-thread default stream", cudaStreamPerThread},
                                                            {"blocking stream", blocking.s},
                                                            {"non-blocking stream", created.s}};
    for (const auto& st : streams) {
        t.run(st.first, [&] { return execute_and_compare(CudaPlan(s, OutMode::Plan), in, st.second, cpu); });
    }
    // Two plans of different shapes enqueued back to back on one stream, then synchronized.
    t.run("two plans interleaved on one stream", [&] {
        CaseSpec s2 = api_case("determinism-2", o.seed);
        s2.C = 48;
        s2.R = 3;
        const Encoded e2 = make_inputs(s2).encode();
        const RunResult cpu2 = run_cpu(s2, e2);
        const DeviceInputs dev2(e2);
        const CudaPlan a(s, OutMode::Plan), b(s2, OutMode::Caller);
        if (a.execute(in, created.s) != SDM_P1_SUCCESS || b.execute(dev2.view(true), created.s) != SDM_P1_SUCCESS ||
            a.execute(in, created.s) != SDM_P1_SUCCESS) {
            return std::string("execute failed: ") + sdm_p1_last_error();
        }
        CUDA_CHECK(cudaStreamSynchronize(created.s));
        const std::string wa = compare_fields(cpu, a.result()), wb = compare_fields(cpu2, b.result());
        return wa.empty() ? wb : wa;
    });
    // Different plans from different host threads at once.
    t.run("two host threads, own plans and streams", [&] {
        std::string why[2];
        auto work = [&](int k) {
            try {
                Stream mine;
                why[k] = execute_and_compare(CudaPlan(s, k ? OutMode::Caller : OutMode::Plan), in, mine.s, cpu);
            } catch (const std::exception& ex) {
                why[k] = ex.what();
            }
        };
        std::thread t0(work, 0), t1(work, 1);
        t0.join();
        t1.join();
        return why[0].empty() ? why[1] : why[0];
    });
}

// ---- the stream is never waited for --------------------------------------------------------

// A host function that holds its stream until opened (or for at most 5 s).
struct HostGate {
    std::atomic<bool> open{false}, timed_out{false};
};

void CUDART_CB hold_stream(void* arg) {
    HostGate* g = static_cast<HostGate*>(arg);
    const auto start = std::chrono::steady_clock::now();
    while (!g->open.load()) {
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(5)) {
            g->timed_out = true;
            return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

void test_no_host_sync(Tally& t, const Options& o) {
    const CaseSpec s = api_case("no-host-sync", o.seed);
    const Encoded e = make_inputs(s).encode();
    const RunResult cpu = run_cpu(s, e);
    const DeviceInputs dev(e);
    for (unsigned flags : {cudaStreamDefault, cudaStreamNonBlocking}) {
        const char* what = flags == cudaStreamDefault ? "execute behind a held blocking stream"
                                                      : "execute behind a held non-blocking stream";
        t.run(what, [&] {
            Stream stream(flags);
            const CudaPlan plan(s, OutMode::Plan);
            HostGate gate;
            CUDA_CHECK(cudaLaunchHostFunc(stream.s, hold_stream, &gate));
            plan.poison(stream.s);
            const auto t0 = std::chrono::steady_clock::now();
            const sdm_p1_status st = plan.enqueue(dev.view(s.needs_beta()), stream.s);
            const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            const bool waited = gate.timed_out.load();
            gate.open = true;
            CUDA_CHECK(cudaStreamSynchronize(stream.s));
            if (st != SDM_P1_SUCCESS) return api_error("execute", st);
            if (waited) return "execute waited " + std::to_string(took) + " s for work queued before it";
            const RunResult gpu = plan.result();
            if (gpu.status != SDM_P1_SUCCESS) return "execute_status: " + gpu.error;
            return compare_fields(cpu, gpu);
        });
    }
}

// ---- CUDA graphs -------------------------------------------------------------------------

struct Graph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ~Graph() {
        if (exec != nullptr) cudaGraphExecDestroy(exec);
        if (graph != nullptr) cudaGraphDestroy(graph);
    }
};

// Captures one execute of `plan` on `stream` (global capture mode, the strictest).
std::string capture(const CudaPlan& plan, const sdm_p1_inputs& in, cudaStream_t stream, Graph& g) {
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const sdm_p1_status st = plan.enqueue(in, stream);
    const std::string error = st == SDM_P1_SUCCESS ? "" : api_error("execute during capture", st);
    const cudaError_t end = cudaStreamEndCapture(stream, &g.graph);   // always ends the capture
    if (!error.empty()) return error;
    CUDA_CHECK(end);
    CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
    return "";
}

// One replay on poisoned outputs; the result after synchronizing.
RunResult replay(const CudaPlan& plan, const Graph& g, cudaStream_t stream) {
    plan.poison(stream);
    CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return plan.result();
}

std::string same_outputs(const RunResult& cpu, const RunResult& gpu) {
    if (gpu.status != SDM_P1_SUCCESS) return "execute_status: " + gpu.error;
    return compare_fields(cpu, gpu);
}

void test_graph_capture(Tally& t, const Options& o) {
    const CaseSpec a = api_case("graph-a", o.seed), b = api_case("graph-b", o.seed);   // same shapes
    HostInputs bad_in = make_inputs(b);
    plant_bad_data(b, bad_in);
    const Encoded ea = make_inputs(a).encode(), eb = make_inputs(b).encode(), ebad = bad_in.encode();
    const RunResult cpu_a = run_cpu(a, ea), cpu_b = run_cpu(b, eb), cpu_bad = run_cpu(b, ebad);
    Stream stream;
    DeviceInputs dev(ea);
    for (OutMode mode : {OutMode::Plan, OutMode::Caller}) {
        const std::string m = std::string(" (") + mode_name(mode) + ")";
        const CudaPlan plan(a, mode);
        Graph g;
        dev.upload(ea);
        bool captured = false;
        t.run("capture" + m, [&] {
            const std::string why = capture(plan, dev.view(a.needs_beta()), stream.s, g);
            captured = why.empty();
            return why;
        });
        if (!captured) continue;
        t.run("replay 1" + m, [&] { return same_outputs(cpu_a, replay(plan, g, stream.s)); });
        t.run("replay 2" + m, [&] { return same_outputs(cpu_a, replay(plan, g, stream.s)); });
        t.run("replay on new input data" + m, [&] {
            dev.upload(eb);
            return same_outputs(cpu_b, replay(plan, g, stream.s));
        });
        t.run("replay on bad input data" + m, [&] {
            dev.upload(ebad);
            const RunResult r = replay(plan, g, stream.s);
            if (cpu_bad.status != SDM_P1_ERROR_INVALID_INPUT) return std::string("the CPU accepted the bad data");
            if (r.status != SDM_P1_ERROR_INVALID_INPUT)
                return std::string("execute_status: ") + sdm_p1_status_string(r.status);
            return r.error == cpu_bad.error ? std::string()
                                            : "message '" + r.error + "', the CPU's '" + cpu_bad.error + "'";
        });
        t.run("replay after bad data" + m, [&] {
            dev.upload(eb);
            return same_outputs(cpu_b, replay(plan, g, stream.s));
        });
    }
}

// One plan's executes on other arrays each time. The CUDA backend captures a plan's launches
// in a graph at its second execute and replays it, its nodes pointed at each execute's inputs
// and outputs (kernels/launch_graph.cu): inputs at two addresses, caller outputs at two
// addresses and shifted by an element (the lean kernel's scalar form, launched directly),
// two streams, an execute inside the caller's capture (launched directly) and executes after
// it. Every result is the CPU's, and every output byte of each execute is written (poisoned
// before). A lean plan (with spread slots: four kernels and two memsets a replay) and the
// API case (the general kernel, every field).
void test_replays(Tally& t, const Options& o) {
    const CaseSpec lean = spec("replays-lean", 8, 32, 8, 8, 65536)
                              .streams(2, 65536)
                              .key_mode(Keys::Distinct)
                              .hits(0.3)
                              .gate_kind(Gates::Logsigmoid)
                              .bfloat16();
    for (CaseSpec s : {lean, api_case("replays", o.seed)}) {
        s.seed = mix_seed(o.seed, name_seed(s.name));
        CaseSpec s2 = s;
        s2.seed = mix_seed(s.seed, 2);
        const Encoded ea = make_inputs(s).encode(), eb = make_inputs(s2).encode();
        const RunResult cpu_a = run_cpu(s, ea), cpu_b = run_cpu(s2, eb);
        const DeviceInputs dev_a(ea), dev_b(eb);
        const sdm_p1_inputs in_a = dev_a.view(s.needs_beta()), in_b = dev_b.view(s.needs_beta());
        Stream one, two;
        // The plan, and two more plans whose caller buffers it writes (their own plans unused).
        const CudaPlan plan(s, OutMode::Caller), other(s, OutMode::Caller), shifted(s, OutMode::CallerShifted);
        // `plan` executed on `in` into `into`'s buffers on `stream`; its result.
        const auto run = [&](const sdm_p1_inputs& in, const CudaPlan& into, cudaStream_t stream) {
            into.poison(stream);
            RunResult r;
            const sdm_p1_status st = sdm_p1_execute(plan.get(), &in, into.buffers(), SDM_P1_FIELD_COUNT, stream);
            if (st != SDM_P1_SUCCESS) {
                r.status = st;
                r.error = sdm_p1_last_error();
                return r;
            }
            CUDA_CHECK(cudaStreamSynchronize(stream));
            r = into.result();
            r.status = sdm_p1_execute_status(plan.get());
            if (r.status != SDM_P1_SUCCESS) r.error = sdm_p1_last_error();
            return r;
        };
        const std::string n = " (" + s.name + ")";
        t.run("a, own buffers" + n, [&] { return same_outputs(cpu_a, run(in_a, plan, one.s)); });
        t.run("b, other buffers" + n, [&] { return same_outputs(cpu_b, run(in_b, other, one.s)); });
        t.run("a, shifted buffers" + n, [&] { return same_outputs(cpu_a, run(in_a, shifted, one.s)); });
        t.run("b, own buffers, another stream" + n, [&] { return same_outputs(cpu_b, run(in_b, plan, two.s)); });
        t.run("a, other buffers, in the caller's capture" + n, [&] {
            Graph g;
            other.poison(two.s);
            CUDA_CHECK(cudaStreamSynchronize(two.s));
            CUDA_CHECK(cudaStreamBeginCapture(two.s, cudaStreamCaptureModeGlobal));
            const sdm_p1_status st = sdm_p1_execute(plan.get(), &in_a, other.buffers(), SDM_P1_FIELD_COUNT, two.s);
            const std::string error = st == SDM_P1_SUCCESS ? "" : api_error("execute during capture", st);
            const cudaError_t end = cudaStreamEndCapture(two.s, &g.graph);
            if (!error.empty()) return error;
            CUDA_CHECK(end);
            CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
            CUDA_CHECK(cudaGraphLaunch(g.exec, two.s));
            CUDA_CHECK(cudaStreamSynchronize(two.s));
            RunResult r = other.result();
            r.status = sdm_p1_execute_status(plan.get());
            return same_outputs(cpu_a, r);
        });
        t.run("b, own buffers, after the capture" + n, [&] { return same_outputs(cpu_b, run(in_b, plan, one.s)); });
        t.run("a, own buffers again" + n, [&] { return same_outputs(cpu_a, run(in_a, plan, one.s)); });
    }
}

// New per-stream lengths written into the same device buffer between replays of one graph:
// each replay gives the CPU's outputs for the lengths it read (bad ones its message). The
// inputs hold valid data everywhere, so only the lengths change what is valid.
void test_graph_lengths(Tally& t, const Options& o) {
    CaseSpec s = api_case("graph-lengths", o.seed);   // 3 streams of 2 chunks of 32 tokens
    const int64_t full = s.steps() * s.C;
    s.stream_lengths({full, full, full}, true);
    const Encoded e_full = make_inputs(s).encode();
    const std::vector<std::vector<int64_t>> lengths = {{40, 0, 64}, {1, 33, 32}, {0, 0, 0}, {64, -1, 65}, {5, 64, 31}};
    Stream stream;
    for (OutMode mode : {OutMode::Plan, OutMode::Caller}) {
        const std::string m = std::string(" (") + mode_name(mode) + ")";
        DeviceInputs dev(e_full);
        const CudaPlan plan(s, mode);
        Graph g;
        bool captured = false;
        t.run("capture" + m, [&] {
            const std::string why = capture(plan, dev.view(s.needs_beta()), stream.s, g);
            captured = why.empty();
            return why;
        });
        if (!captured) continue;
        for (const std::vector<int64_t>& l : lengths) {
            CaseSpec sl = s;
            sl.lengths = l;
            Encoded e = e_full;
            e.lengths = std::vector<unsigned char>(l.size() * sizeof(int64_t));
            std::memcpy(e.lengths.data(), l.data(), e.lengths.size());
            const RunResult cpu = run_cpu(sl, e);
            t.run("replay with lengths" + describe_lengths(sl) + m, [&] {
                dev.lengths.upload(e.lengths);
                const RunResult r = replay(plan, g, stream.s);
                if (cpu.status == SDM_P1_SUCCESS) return same_outputs(cpu, r);
                if (r.status != cpu.status)
                    return std::string("execute_status: ") + sdm_p1_status_string(r.status) + ", the CPU: " + cpu.error;
                return r.error == cpu.error ? std::string()
                                            : "message '" + r.error + "', the CPU's '" + cpu.error + "'";
            });
        }
    }
}

// ---- the caller's allocator --------------------------------------------------------------

// Device memory through cudaMalloc, counted; anything out of place is a violation.
struct CountingAllocator {
    int allocs = 0, frees = 0, live = 0;
    size_t live_bytes = 0;
    size_t misalign = 0;   // hand out blocks this many bytes past cudaMalloc's
    bool fail = false;
    bool forbid = false;   // set around executes: no call may come then
    std::string violations;

    sdm_p1_allocator get() { return sdm_p1_allocator{this, alloc, release}; }

    static int alloc(void* ctx, void** ptr, size_t bytes, void* stream) {
        CountingAllocator* a = static_cast<CountingAllocator*>(ctx);
        a->note_call("alloc", stream);
        if (a->fail) return 1;
        void* p = nullptr;
        if (cudaMalloc(&p, bytes + a->misalign) != cudaSuccess) return 1;
        *ptr = static_cast<char*>(p) + a->misalign;
        ++a->allocs;
        ++a->live;
        a->live_bytes += bytes;
        return 0;
    }
    static void release(void* ctx, void* ptr, size_t bytes, void* stream) {
        CountingAllocator* a = static_cast<CountingAllocator*>(ctx);
        a->note_call("free", stream);
        cudaFree(static_cast<char*>(ptr) - a->misalign);
        ++a->frees;
        --a->live;
        a->live_bytes -= bytes;
    }
    void note_call(const char* what, void* stream) {
        int device = -1;
        cudaGetDevice(&device);
        if (forbid) violations += std::string(what) + " during execute; ";
        if (stream != nullptr) violations += std::string(what) + " with a stream other than NULL; ";
        if (device != 0) violations += std::string(what) + " with device " + std::to_string(device) + " current; ";
    }
};

void test_allocator(Tally& t, const Options& o, cudaStream_t stream) {
    const CaseSpec s = api_case("allocator", o.seed);
    const Encoded e = make_inputs(s).encode();
    const RunResult cpu = run_cpu(s, e);
    const DeviceInputs dev(e);
    for (OutMode mode : {OutMode::Plan, OutMode::Caller}) {
        t.run(std::string("counted, ") + mode_name(mode), [&] {
            CountingAllocator counter;
            const sdm_p1_allocator alloc = counter.get();
            std::string why;
            {
                const CudaPlan plan(s, mode, &alloc);
                if (counter.allocs == 0) return std::string("the plan allocated nothing through the allocator");
                const int after_create = counter.allocs;
                for (int rep = 0; rep < 2 && why.empty(); ++rep) {
                    counter.forbid = true;
                    why = execute_and_compare(plan, dev.view(s.needs_beta()), stream, cpu);
                    counter.forbid = false;
                }
                if (why.empty() && (counter.allocs != after_create || counter.frees != 0))
                    why = "allocator called after create";
            }
            if (why.empty() && (counter.live != 0 || counter.live_bytes != 0 || counter.frees != counter.allocs)) {
                why = "after destroy: " + std::to_string(counter.live) + " blocks still live";
            }
            return why.empty() ? counter.violations : why;
        });
    }
    t.run("blocks not aligned to 256 bytes are refused", [&] {
        CountingAllocator counter;
        counter.misalign = 128;
        sdm_p1_desc d = make_desc(s, SDM_P1_BACKEND_CUDA);
        d.allocator = counter.get();
        sdm_p1_plan* plan = reinterpret_cast<sdm_p1_plan*>(&counter);
        const sdm_p1_status st = sdm_p1_plan_create(&plan, &d);
        if (st != SDM_P1_ERROR_INVALID_ARGUMENT || plan != nullptr) return api_error("plan_create", st);
        if (std::string(sdm_p1_last_error()).find("256") == std::string::npos)
            return std::string("message: ") + sdm_p1_last_error();
        return counter.live == 0 ? counter.violations : std::string("a refused block was not freed");
    });
    t.run("a failing allocator gives SDM_P1_ERROR_OUT_OF_MEMORY", [&] {
        CountingAllocator counter;
        counter.fail = true;
        sdm_p1_desc d = make_desc(s, SDM_P1_BACKEND_CUDA);
        d.allocator = counter.get();
        sdm_p1_plan* plan = nullptr;
        const sdm_p1_status st = sdm_p1_plan_create(&plan, &d);
        if (st != SDM_P1_ERROR_OUT_OF_MEMORY || plan != nullptr) return api_error("plan_create", st);
        return counter.live == 0 ? counter.violations : std::string("blocks leaked");
    });
}

// ---- bad data on the device -----------------------------------------------------------------

// One scenario on a plan that ran others before (each execute clears the last result).
std::string check_bad_data(const CaseSpec& s, const BadData& bad, const CudaPlan& plan, DeviceInputs& scratch,
                           const DeviceInputs& good, const RunResult& cpu_good, cudaStream_t stream) {
    HostInputs in = make_inputs(s);
    bad.plant(s, in);
    const Encoded e = in.encode();
    const RunResult cpu = run_cpu(s, e);
    scratch.upload(e);
    if (!bad.is_error) {
        if (cpu.status != SDM_P1_SUCCESS) return "cpu: " + cpu.error;
        return execute_and_compare(plan, scratch.view(s.needs_beta()), stream, cpu);
    }
    if (cpu.status != SDM_P1_ERROR_INVALID_INPUT)
        return std::string("the CPU gave ") + sdm_p1_status_string(cpu.status);
    const sdm_p1_status st = plan.execute(scratch.view(s.needs_beta()), stream);
    if (st != SDM_P1_SUCCESS) return api_error("execute (must succeed; the check runs on the device)", st);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const sdm_p1_status first = sdm_p1_execute_status(plan.get());
    const std::string message = sdm_p1_last_error();
    if (first != SDM_P1_ERROR_INVALID_INPUT) return std::string("execute_status: ") + sdm_p1_status_string(first);
    if (message != cpu.error) return "message '" + message + "', the CPU's '" + cpu.error + "'";
    // Asked again, from another thread: the same answer.
    sdm_p1_status again = SDM_P1_SUCCESS;
    std::string again_message;
    std::thread other([&] {
        again = sdm_p1_execute_status(plan.get());
        again_message = sdm_p1_last_error();
    });
    other.join();
    if (again != first || again_message != message)
        return "a second execute_status (another thread) differs: " + again_message;
    // The next good execute clears it.
    const std::string after = execute_and_compare(plan, good.view(s.needs_beta()), stream, cpu_good);
    return after.empty() ? "" : "the good execute after it: " + after;
}

void test_bad_data(Tally& t, const Options& o, cudaStream_t stream) {
    CaseSpec base = spec("bad-data", 8, 16, 4, 3, 40).streams(2, 1000).valid(11).key_mode(Keys::Random);
    base.gate_kind(Gates::Mixed).fields(SDM_P1_DET_ALL);
    CaseSpec perwrite = base, token = base;
    perwrite.gates_per_write();
    perwrite.seed = mix_seed(o.seed, 61);
    token.ids64().bfloat16();
    token.seed = mix_seed(o.seed, 62);
    // Lean plans (the default fields, num_keys >= 8 n): the lean kernel's own check of the ids
    // (kernels/lean/lean_load.cuh), with vector loads (W = R = 4).
    CaseSpec lean = spec("bad-data-lean", 8, 16, 4, 4, 4096).streams(2, 4096).valid(11).key_mode(Keys::Random);
    lean.gate_kind(Gates::Mixed);
    CaseSpec lean_perwrite = lean, lean_token = lean;
    lean_perwrite.gates_per_write();
    lean_perwrite.seed = mix_seed(o.seed, 63);
    lean_token.ids64().bfloat16();
    lean_token.seed = mix_seed(o.seed, 64);
    for (const CaseSpec& s : {perwrite, token, lean_perwrite, lean_token}) {
        const Encoded e = make_inputs(s).encode();
        const RunResult cpu_good = run_cpu(s, e);
        const DeviceInputs good(e);
        DeviceInputs scratch(e);
        const CudaPlan plan(s, OutMode::Plan);
        t.check(std::string("a plan never executed: SUCCESS (") + (s.idx64 ? "int64" : "int32") + ")",
                sdm_p1_execute_status(plan.get()) == SDM_P1_SUCCESS ? "" : sdm_p1_last_error());
        for (const BadData& bad : kBadData) {
            const std::string what = std::string(bad.name) +
                                     (s.per_write ? " (per-write gates, int32" : " (per-token gates, int64, bf16") +
                                     (s.det == SDM_P1_UNSET ? ", a lean plan)" : ")");
            t.run(what, [&] { return check_bad_data(s, bad, plan, scratch, good, cpu_good, stream); });
        }
    }
}

// Bad per-stream lengths (both element types): the CPU backend's message from
// sdm_p1_execute_status, and the next good execute clean.
void test_bad_lengths(Tally& t, const Options& o, cudaStream_t stream) {
    for (bool as64 : {false, true}) {
        CaseSpec s = spec("bad-lengths", 12, 16, 4, 3, 40)
                         .streams(3, 1000)
                         .key_mode(Keys::Random)
                         .gate_kind(Gates::Mixed)
                         .fields(SDM_P1_DET_ALL);
        s.stream_lengths({64, 17, 30}, as64);
        if (as64) s.ids64().gates_per_write();
        s.seed = mix_seed(o.seed, as64 ? 71 : 72);
        const Encoded e = make_inputs(s).encode();
        const RunResult cpu_good = run_cpu(s, e);
        const DeviceInputs good(e);
        DeviceInputs scratch(e);
        const CudaPlan plan(s, OutMode::Plan);
        for (const BadData& bad : kBadLengths) {
            const std::string what = std::string(bad.name) + (as64 ? " (int64 lengths)" : " (int32 lengths)");
            t.run(what, [&] { return check_bad_data(s, bad, plan, scratch, good, cpu_good, stream); });
        }
    }
}

// ---- bad arguments -------------------------------------------------------------------------

std::string expect_refused(sdm_p1_status st, const std::string& field) {
    if (st != SDM_P1_ERROR_INVALID_ARGUMENT)
        return std::string("got ") + sdm_p1_status_string(st) + ": " + sdm_p1_last_error();
    if (!field.empty() && !names(sdm_p1_last_error(), field))
        return std::string("the message does not name '") + field + "': " + sdm_p1_last_error();
    return "";
}

void test_bad_arguments(Tally& t, const Options& o, cudaStream_t stream) {
    const CaseSpec s = api_case("bad-arguments", o.seed);
    const Encoded e = make_inputs(s).encode();
    const RunResult cpu = run_cpu(s, e);
    const DeviceInputs dev(e);
    const sdm_p1_inputs good = dev.view(true), host = host_view(e, true);
    const CudaPlan plan(s, OutMode::Plan);
    const struct {
        const char* name;
        const void* sdm_p1_inputs::*member;
    } inputs[] = {{"k_idx", &sdm_p1_inputs::k_idx},
                  {"q_idx", &sdm_p1_inputs::q_idx},
                  {"k_val", &sdm_p1_inputs::k_val},
                  {"q_val", &sdm_p1_inputs::q_val}};
    for (const auto& f : inputs) {
        t.run(std::string("host memory as ") + f.name, [&] {
            sdm_p1_inputs in = good;
            in.*f.member = host.*f.member;
            return expect_refused(plan.enqueue(in, stream), f.name);
        });
    }
    t.run("host memory as g", [&] {
        sdm_p1_inputs in = good;
        in.g = host.g;
        return expect_refused(plan.enqueue(in, stream), "g");
    });
    t.run("host memory as beta", [&] {
        sdm_p1_inputs in = good;
        in.beta = host.beta;
        return expect_refused(plan.enqueue(in, stream), "beta");
    });
    t.run("host memory as stream_lengths", [&] {
        const int32_t lengths[3] = {64, 64, 64};
        sdm_p1_inputs in = good;
        in.stream_lengths = lengths;
        in.stream_lengths_dtype = SDM_P1_DTYPE_INT32;
        return expect_refused(plan.enqueue(in, stream), "stream_lengths");
    });
    t.run("a stack address as k_idx", [&] {
        int64_t local[4] = {0, 0, 0, 0};
        sdm_p1_inputs in = good;
        in.k_idx = local;
        return expect_refused(plan.enqueue(in, stream), "k_idx");
    });
    t.run("k_idx NULL", [&] {
        sdm_p1_inputs in = good;
        in.k_idx = nullptr;
        return expect_refused(plan.enqueue(in, stream), "k_idx");
    });
    t.run("g misaligned", [&] {
        sdm_p1_inputs in = good;
        in.g = reinterpret_cast<const float*>(static_cast<const char*>(dev.g.get()) + 2);
        return expect_refused(plan.enqueue(in, stream), "g");
    });
    t.run("host memory as a caller output buffer", [&] {
        const CudaPlan caller(s, OutMode::Caller);
        std::vector<unsigned char> host_out(caller.views()[SDM_P1_FIELD_QK].bytes);
        void* bufs[SDM_P1_FIELD_COUNT];
        std::memcpy(bufs, caller.buffers(), sizeof bufs);
        bufs[SDM_P1_FIELD_QK] = host_out.data();
        return expect_refused(sdm_p1_execute(caller.get(), &good, bufs, SDM_P1_FIELD_COUNT, stream), "qk");
    });
    // Pointers are checked at every execute, none remembered from the last one: memory freed
    // since may hold something else at the same address.
    t.run("device memory freed since the last execute is refused", [&] {
        sdm_p1_inputs in = good;
        {
            const DeviceInputs gone(e);
            in = gone.view(true);
            const sdm_p1_status st = plan.enqueue(in, stream);
            if (st != SDM_P1_SUCCESS) return std::string("the first execute failed: ") + sdm_p1_last_error();
            CUDA_CHECK(cudaStreamSynchronize(stream));
        }
        return expect_refused(plan.enqueue(in, stream), "k_idx");
    });
    t.run("the plan still works after refusals", [&] { return execute_and_compare(plan, good, stream, cpu); });
    t.run("a device ordinal past the last device", [&] {
        int count = 0;
        CUDA_CHECK(cudaGetDeviceCount(&count));
        sdm_p1_desc d = make_desc(s, SDM_P1_BACKEND_CUDA);
        d.device = count;
        sdm_p1_plan* p = nullptr;
        const sdm_p1_status st = sdm_p1_plan_create(&p, &d);
        sdm_p1_plan_destroy(p);
        return st != SDM_P1_SUCCESS && p == nullptr
                   ? ""
                   : std::string("plan_create accepted device ") + std::to_string(count);
    });
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    if (count >= 2) {
        t.run("inputs on device 1 for a plan on device 0", [&] {
            CUDA_CHECK(cudaSetDevice(1));
            std::string why;
            {
                const DeviceInputs other(e);
                CUDA_CHECK(cudaSetDevice(0));
                why = expect_refused(plan.enqueue(other.view(true), stream), "");
                CUDA_CHECK(cudaSetDevice(1));
            }
            CUDA_CHECK(cudaSetDevice(0));
            return why;
        });
    }
}

// ---- backend selection and small promises ------------------------------------------------------

void test_backend(Tally& t, const Options& o) {
    const CaseSpec s = api_case("backend", o.seed);
    t.run("AUTO picks CUDA, the current device resolved", [&] {
        sdm_p1_desc d = make_desc(s, SDM_P1_BACKEND_AUTO);
        sdm_p1_plan* plan = nullptr;
        sdm_p1_status st = sdm_p1_plan_create(&plan, &d);
        if (st != SDM_P1_SUCCESS) return api_error("plan_create", st);
        sdm_p1_desc r;
        st = sdm_p1_plan_desc(plan, &r);
        sdm_p1_plan_destroy(plan);
        if (st != SDM_P1_SUCCESS) return api_error("plan_desc", st);
        if (r.backend != SDM_P1_BACKEND_CUDA) return "backend " + std::to_string(r.backend);
        return r.device == 0 ? std::string() : "device " + std::to_string(r.device);
    });
    t.run("the plan's outputs are device memory of device 0", [&] {
        const CudaPlan plan(s, OutMode::Plan);
        for (int f = 0; f < SDM_P1_FIELD_COUNT; ++f) {
            if (!plan.views()[f].requested) continue;
            cudaPointerAttributes a{};
            CUDA_CHECK(cudaPointerGetAttributes(&a, plan.views()[f].data));
            if (a.type != cudaMemoryTypeDevice || a.device != 0)
                return std::string(plan.views()[f].name) + " is not device memory of device 0";
        }
        return std::string();
    });
    t.run("sdm_p1_cuda_device_count agrees with the runtime", [&] {
        int runtime = 0;
        int32_t lib = -1;
        CUDA_CHECK(cudaGetDeviceCount(&runtime));
        const sdm_p1_status st = sdm_p1_cuda_device_count(&lib);
        return st == SDM_P1_SUCCESS && lib == runtime ? std::string() : api_error("cuda_device_count", st);
    });
    t.run("execute_status of a CPU plan after a failed execute: SUCCESS", [&] {
        HostInputs in = make_inputs(s);
        in.g[0] = std::nanf("");
        const Encoded e = in.encode();
        const sdm_p1_desc d = make_desc(s, SDM_P1_BACKEND_CPU);
        sdm_p1_plan* plan = nullptr;
        sdm_p1_plan_create(&plan, &d);
        const sdm_p1_inputs hv = host_view(e, true);
        const sdm_p1_status ex = sdm_p1_execute(plan, &hv, nullptr, 0, nullptr);
        const sdm_p1_status st = sdm_p1_execute_status(plan);
        sdm_p1_plan_destroy(plan);
        return ex == SDM_P1_ERROR_INVALID_INPUT && st == SDM_P1_SUCCESS
                   ? ""
                   : std::string("got ") + sdm_p1_status_string(st);
    });
    t.run("library version 1.1 or later",
          [] { return sdm_p1_version_number() >= 10100 ? "" : std::string("version ") + sdm_p1_version_string(); });
}

// ---- what an execute costs the host --------------------------------------------------------

// Host time per sdm_p1_execute of a tiny plan (the pointer checks plus the launches), next
// to the cost of enqueuing a 4-byte cudaMemsetAsync. Printed, not checked.
void report_execute_cost(Tally& t, cudaStream_t stream) {
    CaseSpec s = spec("tiny", 1, 1, 1, 1, 4);
    const Encoded e = make_inputs(s).encode();
    const DeviceInputs dev(e);
    const CudaPlan plan(s, OutMode::Plan);
    const sdm_p1_inputs in = dev.view(false);
    DeviceBuffer word(4);
    auto per_call = [&](const std::function<bool()>& call) {
        double best = 1e30, total = 0;
        const int batches = 10, calls = 200;   // synchronize between batches: the queue stays short
        for (int b = -1; b < batches; ++b) {   // batch -1 warms up
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < calls; ++i) {
                if (!call()) throw std::runtime_error(std::string("call failed: ") + sdm_p1_last_error());
            }
            const double us =
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
            CUDA_CHECK(cudaStreamSynchronize(stream));
            if (b < 0) continue;
            total += us;
            best = std::min(best, us);
        }
        return std::make_pair(total / batches, best);
    };
    t.run("2000 executes of a 1x1x1x1 plan", [&] {
        const auto ex = per_call([&] { return plan.enqueue(in, stream) == SDM_P1_SUCCESS; });
        const auto ms = per_call([&] { return cudaMemsetAsync(word.get(), 0, 4, stream) == cudaSuccess; });
        std::printf(
            "  host time per sdm_p1_execute (tiny plan, its pointer checks and launches): mean %.2f us, "
            "best batch %.2f us; per 4-byte cudaMemsetAsync: mean %.2f us\n",
            ex.first, ex.second, ms.first);
        return std::string();
    });
}

// ---- main ------------------------------------------------------------------------------------

// Whether a device is there for the CUDA backend; prints why not.
bool device_present() {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        std::printf("cudaGetDeviceCount: %d devices (%s)\n", count, cudaGetErrorString(err));
        return false;
    }
    int32_t lib = 0;
    const sdm_p1_status st = sdm_p1_cuda_device_count(&lib);
    if (st != SDM_P1_SUCCESS || lib == 0) {
        std::printf("sdm_p1_cuda_device_count: %d (%s)\n", lib, sdm_p1_status_string(st));
        return false;
    }
    return true;
}

void print_header(const Options& o) {
    std::printf("libsdmp1 %s, seed %llu%s%s\n", sdm_p1_version_string(), (unsigned long long)o.seed,
                o.quick ? ", quick" : "", o.cpu_only ? ", CPU backend only" : "");
    if (o.cpu_only) return;
    cudaDeviceProp p{};
    int driver = 0, runtime = 0;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    std::printf("device 0: %s, sm_%d%d, %d SMs; driver API %d, runtime %d\n", p.name, p.major, p.minor,
                p.multiProcessorCount, driver, runtime);
}

bool parse(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") {
            o.quick = true;
        } else if (a == "--cpu-only") {
            o.cpu_only = true;
        } else if (a == "--backward") {
            o.backward_only = true;
        } else if (a == "--verbose" || a == "-v") {
            o.verbose = true;
        } else if (a == "--seed" && i + 1 < argc) {
            o.seed = std::strtoull(argv[++i], nullptr, 0);
        } else if (a == "--only" && i + 1 < argc) {
            o.only = argv[++i];
        } else if (a == "--limit" && i + 1 < argc) {
            o.limit = std::strtoull(argv[++i], nullptr, 0);
        } else {
            std::printf(
                "usage: %s [--quick] [--seed S] [--only FAMILY] [--limit K] [--cpu-only] [--backward] [--verbose]\n",
                argv[0]);
            return false;
        }
    }
    return true;
}

void run_comparison_families(Tally& t, const Options& o, cudaStream_t stream) {
    run_cases(t, "cover", cover_cases(o), o, stream);
    run_cases(t, "grid", grid_cases(o), o, stream);
    run_cases(t, "random", random_cases(o), o, stream);
    run_cases(t, "det_fields", det_field_cases(o), o, stream);
    run_cases(t, "rec_tile", rec_tile_cases(o), o, stream);
    run_cases(t, "gates", gate_cases(o), o, stream);
    run_cases(t, "values", value_cases(o), o, stream);
    run_cases(t, "streams", stream_cases(o), o, stream);
    run_cases(t, "largest", largest_cases(o), o, stream);
    run_cases(t, "bench_shapes", bench_shape_cases(o), o, stream);
    run_cases(t, "two_blocks", two_block_cases(o), o, stream);
    run_cases(t, "skewed", skewed_cases(o), o, stream);
    run_cases(t, "lengths", length_cases(o), o, stream);
    run_cases(t, "lean", lean_cases(o), o, stream);
    run_cases(t, "lean_skewed", lean_skewed_cases(o), o, stream);
    run_cases(t, "lean_records", lean_record_cases(o), o, stream);
}

// The spread path (kernels/spread/): SDMP1_SPREAD_TERMS, read at plan creation, set to 0
// hands every chunk on the pair sums' warp path to the spread kernel, so the skewed, lengths
// and spread cases run it on every hot chunk; then the spread cases at the default threshold,
// and a chunk of known terms at the threshold and one term below it (handed over, summed in
// place). spread_few_slots caps the slots at 3 (SDMP1_SPREAD_SLOTS): whole and split chunks
// race for them (whole ones from the pool's start, split ones from its end) and the rest sum
// in place. The bits must be the CPU backend's every time.
void run_spread_families(Tally& t, const Options& o, cudaStream_t stream) {
    setenv("SDMP1_SPREAD_TERMS", "0", 1);
    run_cases(t, "spread_skewed", skewed_cases(o), o, stream);
    run_cases(t, "spread_lengths", length_cases(o), o, stream);
    run_cases(t, "spread_all", spread_cases(o), o, stream);
    setenv("SDMP1_SPREAD_SLOTS", "3", 1);
    run_cases(t, "spread_few_slots", spread_cases(o), o, stream);
    unsetenv("SDMP1_SPREAD_SLOTS");
    unsetenv("SDMP1_SPREAD_TERMS");
    run_cases(t, "spread", spread_cases(o), o, stream);
    if (!o.only.empty() && o.only != "spread_threshold") return;
    t.begin("spread_threshold");
    const int64_t C = 8, W = 32, R = 32;
    const uint64_t terms = one_slot_chunk_terms(C, W, R);
    for (uint64_t threshold : {terms, terms + 1}) {
        setenv("SDMP1_SPREAD_TERMS", std::to_string(threshold).c_str(), 1);
        CaseSpec s = one_slot_chunks(6, C, W, R);
        s.seed = mix_seed(o.seed, threshold);
        t.run("one slot, " + std::to_string(terms) + " terms a chunk, threshold " + std::to_string(threshold),
              [&] { return compare_backends(s, OutMode::Plan, stream); });
    }
    unsetenv("SDMP1_SPREAD_TERMS");
    t.end();
}

// What SDMP1_LOG=1 makes the creation of a plan of case s print on stderr (captured in a file).
std::string plan_log(const CaseSpec& s) {
    std::fflush(stderr);
    FILE* const file = std::tmpfile();
    if (file == nullptr) throw std::runtime_error("tmpfile failed");
    const int saved = dup(2);
    dup2(fileno(file), 2);
    setenv("SDMP1_LOG", "1", 1);
    std::string error;
    try {
        const CudaPlan plan(s, OutMode::Plan);
    } catch (const std::exception& e) {
        error = e.what();
    }
    unsetenv("SDMP1_LOG");
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string text(static_cast<size_t>(std::ftell(file)), '\0');
    std::rewind(file);
    text.resize(std::fread(&text[0], 1, text.size(), file));
    std::fclose(file);
    if (!error.empty()) throw std::runtime_error(error);
    return text;
}

// SDMP1_LOG=1: the plan's line, then a line a stage naming the kernel policy's instantiation
// (kernels/instantiations.txt) and why (kernels/policy/): S1's shape (the lean kernel first, the
// general kernel on what it leaves) and S8's (N = 128: spread slots), each with a backward.
void test_plan_log(Tally& t, const Options&) {
    CaseSpec s1 = spec("log-S1", 264, 64, 32, 32, 65536);
    s1.backward = true;
    CaseSpec s8 = spec("log-S8", 128, 128, 64, 64, 262144);
    s8.backward = true;
    const std::string l1 = plan_log(s1), l8 = plan_log(s8);
    std::printf("%s%s", l1.c_str(), l8.c_str());
    // "" where the log has every part, else the first it lacks.
    const auto has = [](const std::string& text, std::initializer_list<const char*> parts) -> std::string {
        for (const char* part : parts) {
            if (text.find(part) == std::string::npos) return std::string("no \"") + part + "\" in the log";
        }
        return "";
    };
    t.run("S1: the plan's line",
          [&] { return has(l1, {"libsdmp1: plan N=264 C=64 W=32 R=32 keys=65536: kernel lean ("}); });
    t.run("S1: the lean kernel's instantiation and why", [&] {
        return has(l1,
                   {"libsdmp1:   lean             lean::lean_kernel<int32_t, float, false, 256>: the shipped fields"});
    });
    t.run("S1: the general kernel on the chunks the lean kernel leaves", [&] {
        return has(l1, {"libsdmp1:   general          phase1_kernel<", ": the chunks the lean kernel leaves; "});
    });
    t.run("S1: the wide-log kernel and no spread slots", [&] {
        return has(l1, {"libsdmp1:   wide-log         phase1_kernel<", "libsdmp1:   spread           none: "});
    });
    t.run("S1: the backward's kernels", [&] {
        return has(
            l1, {"libsdmp1: backward lean (", "libsdmp1:   lean backward    lbwd::lean_backward_kernel<false, 256>: ",
                 "libsdmp1:   general backward backward_kernel<false>: ",
                 "libsdmp1:   sorting backward backward_kernel<true>: "});
    });
    t.run("S8: spread slots and the general kernel with the hand-over", [&] {
        return has(l8, {"libsdmp1:   spread           spread_kernel<uint16_t, false>: N = 128 <= 2 x the general grid",
                        "libsdmp1:   spread split     spread_kernel<uint16_t, true>: ", ", false, false, true, true>: ",
                        "compiled with the hand-over"});
    });
}

// One API family; an exception outside its checks (in its setup) counts as a failed check.
void family(Tally& t, const Options& o, const char* name, const std::function<void()>& body) {
    if (!o.only.empty() && o.only != name) return;
    t.begin(name);
    try {
        body();
    } catch (const std::exception& e) {
        t.check("setup", std::string("exception: ") + e.what());
    }
    t.end();
}

// ---- the backward -----------------------------------------------------------------------------

// The backward of a comparison family's cases, the way it is run rotating: every upstream
// gradient with the forward's payload, or sorted again (payload NULL); the pair sums' upstream
// alone (a, qk, krec, kspa) with float32 value gradients; the per-entry upstream alone;
// upstream values with NaN and infinities; two of the four gradients.
BackwardSpec rotating_backward(size_t i, uint64_t seed) {
    BackwardSpec b;
    b.seed = mix_seed(seed, i);
    switch (i % 6) {
        case 1:
            b.payload = false;
            break;
        case 2:
            b.given = 1u << SDM_P1_FIELD_A | 1u << SDM_P1_FIELD_QK | 1u << SDM_P1_FIELD_KREC | 1u << SDM_P1_FIELD_KSPA;
            break;
        case 3:
            b.given = ~(1u << SDM_P1_FIELD_A | 1u << SDM_P1_FIELD_QK | 1u << SDM_P1_FIELD_KSPA);
            b.payload = false;
            break;
        case 4:
            b.kind = Upstream::NonFinite;
            break;
        case 5:
            b.outputs = kGradK | kGradG;
            break;
        default:
            break;
    }
    return b;
}

void run_backward_cases(Tally& t, const std::string& family, const CaseList& cases, const Options& o,
                        cudaStream_t stream) {
    if (!o.only.empty() && o.only != family) return;
    t.begin(family);
    for (size_t i = 0; i < cases.size() && (o.limit == 0 || i < o.limit); ++i) {
        CaseSpec s = cases[i];
        const BackwardSpec b = rotating_backward(i, o.seed);
        s.grad_f32 = i % 6 == 2 && s.bf16;
        const auto t0 = std::chrono::steady_clock::now();
        t.run(describe(s) + describe(b), [&] { return compare_backward(s, b, stream); });
        if (o.verbose) {
            std::printf("  %.3f s  %s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                        describe(s).c_str());
        }
    }
    t.end();
}

// The lean backward's limits (lean_backward_cases), each case twice with the forward's
// payload (the lean backward runs only with it): every upstream gradient and every input
// gradient, then the case's rotating variant with the payload given.
void run_lean_backward_cases(Tally& t, const std::string& family, const CaseList& cases, const Options& o,
                             cudaStream_t stream) {
    if (!o.only.empty() && o.only != family) return;
    t.begin(family);
    for (size_t i = 0; i < cases.size() && (o.limit == 0 || i < o.limit); ++i) {
        CaseSpec s = cases[i];
        BackwardSpec every;
        every.seed = mix_seed(o.seed, i);
        BackwardSpec rotating = rotating_backward(i, o.seed);
        rotating.payload = true;
        t.run(describe(s) + describe(every), [&] { return compare_backward(s, every, stream); });
        s.grad_f32 = s.bf16 && i % 2 == 1;
        t.run(describe(s) + describe(rotating), [&] { return compare_backward(s, rotating, stream); });
    }
    t.end();
}

// The largest chunks, without the one whose every id is on one slot (4.3 G pair terms, twice
// over in the backward: minutes on the CPU backend).
CaseList backward_largest_cases(const Options& o) {
    CaseList out;
    for (const CaseSpec& s : largest_cases(o)) {
        if (s.name != "C256-W256-R256-one-slot") out.push_back(s);
    }
    return out;
}

void run_backward_families(Tally& t, const Options& o, cudaStream_t stream) {
    run_backward_cases(t, "bwd_cover", cover_cases(o), o, stream);
    run_backward_cases(t, "bwd_grid", grid_cases(o), o, stream);
    run_backward_cases(t, "bwd_random", random_cases(o), o, stream);
    run_backward_cases(t, "bwd_det_fields", det_field_cases(o), o, stream);
    run_backward_cases(t, "bwd_rec_tile", rec_tile_cases(o), o, stream);
    run_backward_cases(t, "bwd_gates", gate_cases(o), o, stream);
    run_backward_cases(t, "bwd_values", value_cases(o), o, stream);
    run_backward_cases(t, "bwd_streams", stream_cases(o), o, stream);
    run_backward_cases(t, "bwd_skewed", skewed_cases(o), o, stream);
    run_backward_cases(t, "bwd_lengths", length_cases(o), o, stream);
    run_backward_cases(t, "bwd_two_blocks", two_block_cases(o), o, stream);
    run_backward_cases(t, "bwd_bench_shapes", bench_shape_cases(o), o, stream);
    run_backward_cases(t, "bwd_lean", lean_cases(o), o, stream);
    run_backward_cases(t, "bwd_largest", backward_largest_cases(o), o, stream);
    run_lean_backward_cases(t, "bwd_lean_limits", lean_backward_cases(o), o, stream);
}

CaseSpec backward_case(const std::string& name, uint64_t seed, bool bf16) {
    CaseSpec s = spec(name, 6, 32, 8, 6, 40).streams(3, 1000).valid(21).key_mode(Keys::Random);
    s.gate_kind(Gates::Mixed).value_kind(Values::Mixed);
    if (bf16) {
        s.bfloat16();
    } else {
        s.gates_per_write();
    }
    s.seed = mix_seed(seed, name_seed(name));
    s.backward = true;
    return s;
}

// Upstream subsets (none, each alone, all), zero upstream (+0.0 everywhere), NaN and
// infinite upstream, payload given and NULL, float32 gradients of bfloat16 values, each
// gradient alone and none (nothing written), a forward between backwards of one plan.
void test_backward_api(Tally& t, const Options& o, cudaStream_t stream) {
    for (bool bf16 : {false, true}) {
        const CaseSpec s = backward_case(bf16 ? "bwd-api-bf16" : "bwd-api-f32", o.seed, bf16);
        const std::string dt = bf16 ? " (bf16, per-token gates)" : " (f32, per-write gates)";
        for (bool payload : {true, false}) {
            const std::string p = payload ? ", payload" : ", sorted again";
            BackwardSpec b;
            b.payload = payload;
            b.given = 0;
            t.run("no upstream gradient" + p + dt, [&] { return compare_backward(s, b, stream); });
            for (int f : kDifferentiable) {
                b.given = 1u << f;
                t.run("upstream " + std::to_string(f) + " alone" + p + dt,
                      [&] { return compare_backward(s, b, stream); });
            }
            b.given = kAllUpstream;
            for (Upstream kind : {Upstream::Normal, Upstream::Zero, Upstream::NonFinite}) {
                b.kind = kind;
                t.run(std::string("every upstream, ") + describe(b) + dt,
                      [&] { return compare_backward(s, b, stream); });
            }
            b.kind = Upstream::Normal;
            for (unsigned out : {kGradK, kGradQ, kGradG, kGradBeta}) {
                b.outputs = out;
                t.run("gradient " + std::to_string(out) + " alone" + p + dt,
                      [&] { return compare_backward(s, b, stream); });
            }
            b.outputs = kGradAll;
            if (bf16) {
                CaseSpec f32 = s;
                f32.grad_f32 = true;
                t.run("float32 gradients of bfloat16 values" + p, [&] { return compare_backward(f32, b, stream); });
            }
        }
        t.run("zero upstream gives +0.0 everywhere" + dt, [&] {
            BackwardSpec b;
            b.kind = Upstream::Zero;
            CaseSpec z = s;
            z.value_kind(Values::Normal);
            const Encoded e = make_inputs(z).encode();
            const std::vector<Bytes> up = make_upstream(z, b);
            const DeviceInputs dev(e);
            const CudaBackward gpu(z, up);
            const GradResult r = gpu.run(dev.view(true), gpu.forward(dev, stream), kGradAll, stream);
            if (r.status != SDM_P1_SUCCESS) return r.error;
            for (int w = 0; w < 4; ++w) {
                for (unsigned char c : r.grads[w]) {
                    if (c != 0) return std::string(grad_name(w)) + " holds a byte that is not 0";
                }
            }
            return std::string();
        });
        t.run("no gradient requested: success, nothing written" + dt, [&] {
            const Encoded e = make_inputs(s).encode();
            const BackwardSpec b;
            const std::vector<Bytes> up = make_upstream(s, b);
            const DeviceInputs dev(e);
            const CudaBackward gpu(s, up);
            for (const int32_t* payload : {gpu.forward(dev, stream), static_cast<const int32_t*>(nullptr)}) {
                const GradResult none = gpu.run(dev.view(true), payload, 0, stream);
                if (none.status != SDM_P1_SUCCESS) return none.error;
                const GradResult after = gpu.result(kGradAll);
                for (int w = 0; w < 4; ++w) {
                    for (unsigned char c : after.grads[w]) {
                        if (c != 0xA5) return std::string(grad_name(w)) + " was written";
                    }
                }
            }
            return std::string();
        });
        t.run("forward, backward, forward on one plan" + dt, [&] {
            const Encoded e = make_inputs(s).encode();
            const RunResult cpu = run_cpu(s, e);
            const BackwardSpec b;
            const std::vector<Bytes> up = make_upstream(s, b);
            const GradResult cpu_grads = run_cpu_backward(s, e, b, up);
            const DeviceInputs dev(e);
            const CudaBackward gpu(s, up);
            const GradResult r = gpu.run(dev.view(true), gpu.forward(dev, stream), kGradAll, stream);
            if (r.status != SDM_P1_SUCCESS) return r.error;
            std::string why = compare_grads(s, cpu_grads, r);
            if (!why.empty()) return why;
            why = execute_and_compare(gpu.plan(), dev.view(s.needs_beta()), stream, cpu);
            if (!why.empty()) return "the forward after it: " + why;
            return compare_grads(s, cpu_grads, gpu.run(dev.view(true), nullptr, kGradAll, stream));
        });
    }
}

// Two backwards of one plan, fresh plans, other streams: the same bits as the CPU's.
void test_backward_determinism(Tally& t, const Options& o) {
    const CaseSpec s = backward_case("bwd-determinism", o.seed, false);
    const Encoded e = make_inputs(s).encode();
    const BackwardSpec b;
    const std::vector<Bytes> up = make_upstream(s, b);
    const GradResult cpu = run_cpu_backward(s, e, b, up);
    const DeviceInputs dev(e);
    Stream created, blocking(cudaStreamDefault);
    const CudaBackward gpu(s, up);
    const int32_t* payload = gpu.forward(dev, created.s);
    for (int rep = 1; rep <= 3; ++rep) {
        t.run("backward #" + std::to_string(rep) + " of one plan",
              [&] { return compare_grads(s, cpu, gpu.run(dev.view(true), payload, kGradAll, created.s)); });
    }
    // The plan's launch sequences in turn (kernels/launch_graph.cu keeps a graph for each): the
    // payload NULL (sorted again) and given, on inputs at another address.
    const DeviceInputs moved(e);
    t.run("payload NULL, inputs moved",
          [&] { return compare_grads(s, cpu, gpu.run(moved.view(true), nullptr, kGradAll, created.s)); });
    t.run("payload given, inputs moved",
          [&] { return compare_grads(s, cpu, gpu.run(moved.view(true), payload, kGradAll, created.s)); });
    t.run("payload NULL again",
          [&] { return compare_grads(s, cpu, gpu.run(dev.view(true), nullptr, kGradAll, created.s)); });
    const std::pair<const char*, cudaStream_t> streams[] = {{"legacy default stream (NULL)", nullptr},
                                                            {"per-thread default stream", cudaStreamPerThread},
                                                            {"blocking stream", blocking.s}};
    for (const auto& st : streams) {
        t.run(st.first, [&] {
            const CudaBackward fresh(s, up);
            return compare_grads(s, cpu, fresh.run(dev.view(true), fresh.forward(dev, st.second), kGradAll, st.second));
        });
    }
}

// Captures one backward on `stream` (global capture mode).
std::string capture_backward(const CudaBackward& gpu, const sdm_p1_inputs& in, const int32_t* payload,
                             cudaStream_t stream, Graph& g) {
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const sdm_p1_status st = gpu.enqueue(in, payload, kGradAll, stream);
    const std::string error = st == SDM_P1_SUCCESS ? "" : api_error("execute_backward during capture", st);
    const cudaError_t end = cudaStreamEndCapture(stream, &g.graph);
    if (!error.empty()) return error;
    CUDA_CHECK(end);
    CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
    return "";
}

GradResult replay_backward(const CudaBackward& gpu, const Graph& g, cudaStream_t stream) {
    gpu.poison(stream);
    CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return gpu.result(kGradAll);
}

// A backward captured in a graph (payload given and NULL): replays give the CPU's bits, on
// new input data too, and a bad gate's message.
void test_backward_graph(Tally& t, const Options& o) {
    const CaseSpec a = backward_case("bwd-graph-a", o.seed, true), b = backward_case("bwd-graph-b", o.seed, true);
    // b's data with a's ids: the new input data of a graph that keeps a's payload (a payload
    // is checked against the ids given with it).
    HostInputs b_in = make_inputs(b);
    b_in.k_ids = make_inputs(a).k_ids;
    b_in.q_ids = make_inputs(a).q_ids;
    HostInputs bad_in = b_in;
    bad_in.g[static_cast<size_t>(2 * b.C + 5)] = std::nanf("");
    const Encoded ea = make_inputs(a).encode(), eb = b_in.encode(), ebad = bad_in.encode();
    const BackwardSpec spec_b;
    const std::vector<Bytes> up = make_upstream(a, spec_b);
    Stream stream;
    for (bool with_payload : {true, false}) {
        const std::string m = with_payload ? " (payload)" : " (sorted again)";
        BackwardSpec bs;
        bs.payload = with_payload;
        std::vector<int32_t> payload_a;
        const GradResult cpu_a = run_cpu_backward(a, ea, bs, up, &payload_a);
        // The same upstream gradients for the second inputs; the payload is the first's when
        // given (the graph keeps its pointer), on the CPU too. b's own ids with it: refused.
        const GradResult cpu_b = run_cpu_backward(b, eb, bs, up, nullptr, with_payload ? payload_a.data() : nullptr);
        const GradResult cpu_bad =
            run_cpu_backward(b, ebad, bs, up, nullptr, with_payload ? payload_a.data() : nullptr);
        const Encoded eb_ids = make_inputs(b).encode();
        const GradResult cpu_other_ids = run_cpu_backward(b, eb_ids, bs, up, nullptr, payload_a.data());
        DeviceInputs dev(ea);
        const CudaBackward gpu(a, up);
        const int32_t* payload = with_payload ? gpu.forward(dev, stream.s) : nullptr;
        Graph g;
        bool captured = false;
        t.run("capture" + m, [&] {
            const std::string why = capture_backward(gpu, dev.view(true), payload, stream.s, g);
            captured = why.empty();
            return why;
        });
        if (!captured) continue;
        t.run("replay 1" + m, [&] { return compare_grads(a, cpu_a, replay_backward(gpu, g, stream.s)); });
        t.run("replay 2" + m, [&] { return compare_grads(a, cpu_a, replay_backward(gpu, g, stream.s)); });
        t.run("replay on new input data" + m, [&] {
            dev.upload(eb);
            const GradResult r = replay_backward(gpu, g, stream.s);
            if (cpu_b.status != SDM_P1_SUCCESS) return "cpu: " + cpu_b.error;
            if (r.status != SDM_P1_SUCCESS) return "execute_status: " + r.error;
            return compare_grads(b, cpu_b, r);
        });
        t.run("replay on a bad gate" + m, [&] {
            dev.upload(ebad);
            const GradResult r = replay_backward(gpu, g, stream.s);
            if (cpu_bad.status != SDM_P1_ERROR_INVALID_INPUT) return std::string("the CPU accepted the bad data");
            if (r.status != SDM_P1_ERROR_INVALID_INPUT)
                return std::string("execute_status: ") + sdm_p1_status_string(r.status);
            return r.error == cpu_bad.error ? std::string()
                                            : "message '" + r.error + "', the CPU's '" + cpu_bad.error + "'";
        });
        if (with_payload) {
            t.run("replay on other ids" + m, [&] {
                dev.upload(eb_ids);
                const GradResult r = replay_backward(gpu, g, stream.s);
                if (cpu_other_ids.status != SDM_P1_ERROR_INVALID_INPUT) return "the CPU gave " + cpu_other_ids.error;
                if (r.status != SDM_P1_ERROR_INVALID_INPUT)
                    return std::string("execute_status: ") + sdm_p1_status_string(r.status);
                return r.error == cpu_other_ids.error
                           ? std::string()
                           : "message '" + r.error + "', the CPU's '" + cpu_other_ids.error + "'";
            });
        }
        t.run("replay after bad data" + m, [&] {
            dev.upload(ea);
            return compare_grads(a, cpu_a, replay_backward(gpu, g, stream.s));
        });
    }
}

// One bad backward: the CPU refuses it with a message; the CUDA backward enqueues, and
// sdm_p1_execute_status gives the same message. Then a good backward clears it, and a forward
// after a bad backward reports under its own name.
std::string check_bad_backward(const CaseSpec& s, const Encoded& e, const std::vector<Bytes>& up,
                               const std::vector<int32_t>* host_payload, const CudaBackward& gpu,
                               const GradResult& cpu_good, const int32_t* good_payload, cudaStream_t stream) {
    BackwardSpec b;
    b.payload = host_payload != nullptr;
    const GradResult cpu = run_cpu_backward(s, e, b, up, nullptr, host_payload ? host_payload->data() : nullptr);
    if (cpu.status != SDM_P1_ERROR_INVALID_INPUT)
        return std::string("the CPU gave ") + sdm_p1_status_string(cpu.status) + " " + cpu.error;
    const DeviceInputs dev(e);
    DeviceBuffer payload(host_payload ? host_payload->size() * 4 : 0);
    if (host_payload) {
        Bytes raw(host_payload->size() * 4);
        std::memcpy(raw.data(), host_payload->data(), raw.size());
        payload.upload(raw);
    }
    const GradResult r = gpu.run(dev.view(true), static_cast<const int32_t*>(payload.get()), kGradAll, stream);
    if (r.status != SDM_P1_ERROR_INVALID_INPUT)
        return std::string("execute_status: ") + sdm_p1_status_string(r.status) + " " + r.error;
    if (r.error != cpu.error) return "message '" + r.error + "', the CPU's '" + cpu.error + "'";
    const std::string again = sdm_p1_execute_status(gpu.plan().get()) == SDM_P1_ERROR_INVALID_INPUT
                                  ? std::string(sdm_p1_last_error())
                                  : std::string();
    if (again != r.error) return "a second execute_status differs: " + again;
    const DeviceInputs good(make_inputs(s).encode());
    const std::string after = compare_grads(s, cpu_good, gpu.run(good.view(true), good_payload, kGradAll, stream));
    return after.empty() ? "" : "the good backward after it: " + after;
}

// Bad payloads (each problem the check names, against the ids too; the words past C * (W + R)
// and bits 18-30 are not read), bad ids and gates (payload given and NULL), bad lengths: the
// CPU's messages from sdm_p1_execute_status.
void test_backward_bad_data(Tally& t, const Options& o, cudaStream_t stream) {
    CaseSpec s = spec("bwd-bad-data", 8, 16, 4, 3, 40).streams(2, 1000).valid(11).key_mode(Keys::Random);
    s.gate_kind(Gates::Mixed).gates_per_write();
    s.seed = mix_seed(o.seed, 81);
    s.backward = true;
    const Encoded e = make_inputs(s).encode();
    const BackwardSpec b;
    const std::vector<Bytes> up = make_upstream(s, b);
    std::vector<int32_t> good;
    const GradResult cpu_good = run_cpu_backward(s, e, b, up, &good);
    const DeviceInputs dev(e);
    const CudaBackward gpu(s, up);
    DeviceBuffer good_dev(good.size() * 4);
    {
        Bytes raw(good.size() * 4);
        std::memcpy(raw.data(), good.data(), raw.size());
        good_dev.upload(raw);
    }
    const int32_t* good_payload = static_cast<const int32_t*>(good_dev.get());
    const int row = static_cast<int>(good.size() / s.N), n = static_cast<int>(s.C * (s.W + s.R));
    const int valid_last = static_cast<int>(s.last_valid() * (s.W + s.R));
    const struct {
        const char* name;
        void (*mutate)(std::vector<int32_t>&, int row, int n, int valid_last);
    } payloads[] = {
        {"an entry twice", [](std::vector<int32_t>& p, int row, int, int) { p[2 * row + 5] = p[2 * row + 4]; }},
        {"a lane past W", [](std::vector<int32_t>& p, int row, int, int) { p[row + 7] = (p[row + 7] & ~0x1FF) | 4; }},
        {"a token past C", [](std::vector<int32_t>& p, int row, int,
                              int) { p[3 * row + 9] = (p[3 * row + 9] & ~(0xFF << 9)) | 16 << 9; }},
        {"the padding bit on a valid entry", [](std::vector<int32_t>& p, int row, int, int) { p[6 * row] |= 1 << 17; }},
        {"no padding bit on a padding entry",
         [](std::vector<int32_t>& p, int row, int n, int) { p[7 * row + n - 1] &= ~(1 << 17); }},
        {"padding before a valid entry",
         [](std::vector<int32_t>& p, int row, int, int v) { std::swap(p[6 * row + v - 1], p[6 * row + v]); }},
        {"the first word without its head bit", [](std::vector<int32_t>& p, int, int, int) { p[0] &= 0x7FFFFFFF; }},
        {"two bad chunks: the first is reported",
         [](std::vector<int32_t>& p, int row, int, int) {
             p[5 * row + 3] = p[5 * row + 2];
             p[4 * row + 20] |= 1 << 17;
         }},
        {"two bad words: the earlier position is reported",
         [](std::vector<int32_t>& p, int row, int, int) {
             p[3 * row + 30] = p[3 * row + 1];
             p[3 * row + 12] = (p[3 * row + 12] & ~0xFF) | 200;
         }},
    };
    for (const auto& bad : payloads) {
        t.run(std::string("payload: ") + bad.name, [&] {
            std::vector<int32_t> p = good;
            bad.mutate(p, row, n, valid_last);
            return check_bad_backward(s, e, up, &p, gpu, cpu_good, good_payload, stream);
        });
    }
    t.run("payload: words past C * (W + R) and bits 18-30 are not read", [&] {
        std::vector<int32_t> p = good;
        for (int64_t c = 0; c < s.N; ++c) {
            for (int r = n; r < row; ++r) p[c * row + r] = -1;
            p[c * row] ^= 1 << 20;
            p[c * row + 1] ^= 1 << 30;
        }
        DeviceBuffer d(p.size() * 4);
        Bytes raw(p.size() * 4);
        std::memcpy(raw.data(), p.data(), raw.size());
        d.upload(raw);
        return compare_grads(s, cpu_good,
                             gpu.run(dev.view(true), static_cast<const int32_t*>(d.get()), kGradAll, stream));
    });
    // The payload against the ids given with it (src/cpu/chunk_backward.cpp,
    // check_payload_order): a head bit added inside a group and one taken off a group start
    // (chunk 3's first of each past position 0); the ids changed at chunk 5's first group start
    // whose entry index is below the previous word's, so it takes that word's slot (out of
    // order there); another case's payload; the same payload without the ids (trusted: the
    // lean and general backwards' path without the check).
    const auto word = [&](int64_t c, int r) { return static_cast<uint32_t>(good[c * row + r]); };
    const auto is_valid = [](uint32_t w) { return !(w >> 17 & 1u); };
    t.run("payload: a head bit inside a group of these ids", [&] {
        int r = 1;
        while (!is_valid(word(3, r)) || (word(3, r) >> 31)) ++r;
        std::vector<int32_t> p = good;
        p[3 * row + r] = static_cast<int32_t>(word(3, r) | 0x80000000u);
        return check_bad_backward(s, e, up, &p, gpu, cpu_good, good_payload, stream);
    });
    t.run("payload: no head bit where these ids start a slot", [&] {
        int r = 1;
        while (!(word(3, r) >> 31)) ++r;
        std::vector<int32_t> p = good;
        p[3 * row + r] = static_cast<int32_t>(word(3, r) & 0x7FFFFFFFu);
        return check_bad_backward(s, e, up, &p, gpu, cpu_good, good_payload, stream);
    });
    t.run("payload: out of the order of other ids", [&] {
        const int WR = static_cast<int>(s.W + s.R);
        const auto entry = [&](uint32_t w) {
            return static_cast<int>((w >> 9) & 0xFF) * WR + ((w >> 8 & 1u) ? s.W : 0) + (w & 0xFF);
        };
        const auto id = [&](HostInputs& in, uint32_t w) -> int64_t& {
            const int64_t t = (w >> 9) & 0xFF, lane = w & 0xFF;
            return (w >> 8 & 1u) ? in.q_ids[q_at(s, 5, t, lane)] : in.k_ids[k_at(s, 5, t, lane)];
        };
        for (int r = 1; r < n; ++r) {
            const uint32_t w = word(5, r), prev = word(5, r - 1);
            if (!is_valid(w) || !is_valid(prev) || !(w >> 31) || entry(w) > entry(prev)) continue;
            HostInputs in = make_inputs(s);
            id(in, w) = id(in, prev);
            return check_bad_backward(s, in.encode(), up, &good, gpu, cpu_good, good_payload, stream);
        }
        return std::string("no group start below its previous entry in chunk 5");
    });
    t.run("payload: another case's payload", [&] {
        CaseSpec other = s;
        other.seed = mix_seed(o.seed, 82);
        std::vector<int32_t> p;
        run_cpu_backward(other, make_inputs(other).encode(), b, up, &p);
        return check_bad_backward(s, e, up, &p, gpu, cpu_good, good_payload, stream);
    });
    t.run("payload without the ids: trusted", [&] {
        sdm_p1_inputs in = dev.view(true);
        in.k_idx = nullptr;
        in.q_idx = nullptr;
        return compare_grads(s, cpu_good, gpu.run(in, good_payload, kGradAll, stream));
    });
    t.run("payload: a bad word and an earlier chunk's bad gate", [&] {
        std::vector<int32_t> p = good;
        p[5 * row + 3] = p[5 * row + 2];
        HostInputs in = make_inputs(s);
        in.g[g_at(s, 3, 2, 1)] = INFINITY;
        return check_bad_backward(s, in.encode(), up, &p, gpu, cpu_good, good_payload, stream);
    });
    t.run("payload: a bad word before a bad gate of its chunk", [&] {
        std::vector<int32_t> p = good;
        p[3 * row + 40] = p[3 * row + 2];
        HostInputs in = make_inputs(s);
        in.g[g_at(s, 3, 0, 0)] = INFINITY;
        return check_bad_backward(s, in.encode(), up, &p, gpu, cpu_good, good_payload, stream);
    });
    for (bool with_payload : {true, false}) {
        for (const BadData& bad : kBadData) {
            if (!bad.is_error) continue;
            HostInputs in = make_inputs(s);
            bad.plant(s, in);
            const Encoded eb = in.encode();
            // With a payload the ids given are checked as without one, and before its order.
            BackwardSpec probe;
            probe.payload = with_payload;
            const GradResult cpu = run_cpu_backward(s, eb, probe, up, nullptr, with_payload ? good.data() : nullptr);
            if (cpu.status == SDM_P1_SUCCESS) continue;
            t.run(std::string(bad.name) + (with_payload ? " (payload)" : " (sorted again)"), [&] {
                return check_bad_backward(s, eb, up, with_payload ? &good : nullptr, gpu, cpu_good, good_payload,
                                          stream);
            });
        }
    }
    t.run("a forward after a bad backward reports under its own name", [&] {
        HostInputs in = make_inputs(s);
        in.g[g_at(s, 1, 1, 1)] = std::nanf("");
        const Encoded eb = in.encode();
        const DeviceInputs bad(eb);
        const GradResult r = gpu.run(bad.view(true), nullptr, kGradAll, stream);
        if (r.status != SDM_P1_ERROR_INVALID_INPUT || r.error.rfind("sdm_p1_execute_backward: ", 0) != 0)
            return "backward: " + r.error;
        const RunResult cpu = run_cpu(s, eb);
        if (gpu.plan().execute(bad.view(s.needs_beta()), stream) != SDM_P1_SUCCESS) return std::string("execute");
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const RunResult fwd = gpu.plan().result();
        return fwd.error == cpu.error ? std::string() : "message '" + fwd.error + "', the CPU's '" + cpu.error + "'";
    });
    // Bad per-stream lengths.
    CaseSpec sl = s;
    sl.stream_lengths({64, 17, 30}, true).streams(3, 1000);
    sl.N = 12;
    const Encoded el = make_inputs(sl).encode();
    const std::vector<Bytes> up_l = make_upstream(sl, b);
    const GradResult cpu_l = run_cpu_backward(sl, el, b, up_l);
    const CudaBackward gpu_l(sl, up_l);
    for (const BadData& bad : kBadLengths) {
        if (!bad.is_error) continue;
        t.run(std::string("lengths: ") + bad.name, [&] {
            HostInputs in = make_inputs(sl);
            bad.plant(sl, in);
            return check_bad_backward(sl, in.encode(), up_l, nullptr, gpu_l, cpu_l, nullptr, stream);
        });
    }
}

// Host memory where the backward needs device memory: refused, naming the argument.
void test_backward_arguments(Tally& t, const Options& o, cudaStream_t stream) {
    const CaseSpec s = backward_case("bwd-arguments", o.seed, false);
    const Encoded e = make_inputs(s).encode();
    const BackwardSpec b;
    const std::vector<Bytes> up = make_upstream(s, b);
    const DeviceInputs dev(e);
    const CudaBackward gpu(s, up);
    const int32_t* payload = gpu.forward(dev, stream);
    const auto refused = [](sdm_p1_status st, const char* needle) {
        if (st != SDM_P1_ERROR_INVALID_ARGUMENT)
            return std::string("got ") + sdm_p1_status_string(st) + ": " + sdm_p1_last_error();
        const std::string m = sdm_p1_last_error();
        if (m.rfind("sdm_p1_execute_backward: ", 0) != 0 || m.find(needle) == std::string::npos) return "message: " + m;
        return std::string();
    };
    void* grads_out[4];
    std::vector<float> host_g(static_cast<size_t>(s.N * s.C * s.W));
    t.run("host memory as an upstream gradient", [&] {
        std::vector<const void*> grads(gpu.grads(), gpu.grads() + SDM_P1_FIELD_COUNT);
        grads[SDM_P1_FIELD_QK] = up[SDM_P1_FIELD_QK].data();
        sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
        const sdm_p1_inputs in = dev.view(true);
        return refused(
            sdm_p1_execute_backward(gpu.plan().get(), &in, payload, grads.data(), SDM_P1_FIELD_COUNT, &out, stream),
            "grads[1] (qk) is host memory");
    });
    t.run("host memory as out->g", [&] {
        grads_out[0] = grads_out[1] = grads_out[3] = nullptr;
        grads_out[2] = host_g.data();
        sdm_p1_input_grads out = grad_pointers(grads_out, kGradG);
        const sdm_p1_inputs in = dev.view(true);
        return refused(
            sdm_p1_execute_backward(gpu.plan().get(), &in, payload, gpu.grads(), SDM_P1_FIELD_COUNT, &out, stream),
            "out->g is host memory");
    });
    t.run("host memory as payload", [&] {
        std::vector<int32_t> host_payload(static_cast<size_t>(s.N * 256));
        sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
        const sdm_p1_inputs in = dev.view(true);
        return refused(sdm_p1_execute_backward(gpu.plan().get(), &in, host_payload.data(), gpu.grads(),
                                               SDM_P1_FIELD_COUNT, &out, stream),
                       "payload is host memory");
    });
    t.run("host memory as k_idx without a payload", [&] {
        sdm_p1_inputs in = dev.view(true);
        in.k_idx = e.k_idx.data();
        sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
        return refused(
            sdm_p1_execute_backward(gpu.plan().get(), &in, nullptr, gpu.grads(), SDM_P1_FIELD_COUNT, &out, stream),
            "inputs->k_idx is host memory");
    });
    t.run("with a payload, one id alone is refused and host ids are checked", [&] {
        sdm_p1_inputs in = dev.view(true);
        in.q_idx = nullptr;
        sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
        std::string why = refused(
            sdm_p1_execute_backward(gpu.plan().get(), &in, payload, gpu.grads(), SDM_P1_FIELD_COUNT, &out, stream),
            "inputs->q_idx is NULL but inputs->k_idx is not");
        in.q_idx = dev.view(true).q_idx;
        in.k_idx = e.k_idx.data();   // host memory: read (checked against the payload), so refused
        if (why.empty()) {
            why = refused(
                sdm_p1_execute_backward(gpu.plan().get(), &in, payload, gpu.grads(), SDM_P1_FIELD_COUNT, &out, stream),
                "inputs->k_idx is host memory");
        }
        return why;
    });
    t.run("no ids with a payload: not read", [&] {
        sdm_p1_inputs in = dev.view(true);
        in.k_idx = nullptr;
        in.q_idx = nullptr;
        const GradResult cpu = run_cpu_backward(s, e, b, up);
        return compare_grads(s, cpu, gpu.run(in, payload, kGradAll, stream));
    });
    t.run("a plan without backward refuses", [&] {
        CaseSpec f = s;
        f.backward = false;
        const CudaPlan plan(f, OutMode::Plan);
        sdm_p1_input_grads out = SDM_P1_INPUT_GRADS_INITIALIZER;
        const sdm_p1_inputs in = dev.view(true);
        return refused(sdm_p1_execute_backward(plan.get(), &in, nullptr, nullptr, 0, &out, stream),
                       "without sdm_p1_desc.backward = 1");
    });
}

// The backward's device time next to the forward's on two shapes (S1's uniform ids and S7's
// Zipf 1.1 ids, at N = 1024 and 256): median of 20 runs each, by CUDA events. Printed, not
// checked.
void report_backward_cost(Tally& t, cudaStream_t stream) {
    CaseSpec s1 = spec("S1", 1024, 64, 32, 32, 65536).streams(128, 65536).key_mode(Keys::Distinct).hits(0.0);
    s1.gate_kind(Gates::Logsigmoid).bfloat16();
    CaseSpec s7 = spec("S7", 256, 64, 32, 32, 65536).streams(128, 65536).skewed(1.1).gate_kind(Gates::Logsigmoid);
    s7.bfloat16();
    for (CaseSpec s : {s1, s7}) {
        t.run(s.name + " forward and backward", [&] {
            s.backward = true;
            const Encoded e = make_inputs(s).encode();
            const BackwardSpec b;
            const std::vector<Bytes> up = make_upstream(s, b);
            const DeviceInputs dev(e);
            const CudaBackward gpu(s, up);
            const int32_t* payload = gpu.forward(dev, stream);
            cudaEvent_t start, stop;
            CUDA_CHECK(cudaEventCreate(&start));
            CUDA_CHECK(cudaEventCreate(&stop));
            const auto median_ms = [&](const std::function<sdm_p1_status()>& call) {
                std::vector<float> ms;
                for (int rep = -3; rep < 20; ++rep) {
                    CUDA_CHECK(cudaEventRecord(start, stream));
                    if (call() != SDM_P1_SUCCESS) throw std::runtime_error(sdm_p1_last_error());
                    CUDA_CHECK(cudaEventRecord(stop, stream));
                    CUDA_CHECK(cudaEventSynchronize(stop));
                    float x = 0;
                    CUDA_CHECK(cudaEventElapsedTime(&x, start, stop));
                    if (rep >= 0) ms.push_back(x);
                }
                std::sort(ms.begin(), ms.end());
                return ms[ms.size() / 2];
            };
            const sdm_p1_inputs in = dev.view(true);
            const double fwd = median_ms([&] { return gpu.plan().enqueue(dev.view(false), stream); });
            const double bwd = median_ms([&] { return gpu.enqueue(in, payload, kGradAll, stream); });
            const double sorted = median_ms([&] { return gpu.enqueue(in, nullptr, kGradAll, stream); });
            CUDA_CHECK(cudaEventDestroy(start));
            CUDA_CHECK(cudaEventDestroy(stop));
            std::printf(
                "  %s N=%lld C=%lld W=%lld R=%lld bf16, every upstream gradient: forward %.3f ms, backward "
                "%.3f ms (payload given), %.3f ms (sorted again)\n",
                s.name.c_str(), (long long)s.N, (long long)s.C, (long long)s.W, (long long)s.R, fwd, bwd, sorted);
            return std::string();
        });
    }
}

void run_backward_api_families(Tally& t, const Options& o, cudaStream_t stream) {
    family(t, o, "bwd_api", [&] { test_backward_api(t, o, stream); });
    family(t, o, "bwd_determinism", [&] { test_backward_determinism(t, o); });
    family(t, o, "bwd_graph", [&] { test_backward_graph(t, o); });
    family(t, o, "bwd_bad_data", [&] { test_backward_bad_data(t, o, stream); });
    if (!o.quick) family(t, o, "bwd_cost", [&] { report_backward_cost(t, stream); });   // timing
    // Last: should a host pointer get through to a kernel, the context is lost for what follows.
    family(t, o, "bwd_arguments", [&] { test_backward_arguments(t, o, stream); });
}

void run_api_families(Tally& t, const Options& o, cudaStream_t stream) {
    family(t, o, "output_modes", [&] { test_output_modes(t, o, stream); });
    family(t, o, "determinism", [&] { test_determinism(t, o); });
    family(t, o, "replays", [&] { test_replays(t, o); });
    family(t, o, "no_host_sync", [&] { test_no_host_sync(t, o); });
    family(t, o, "graph", [&] { test_graph_capture(t, o); });
    family(t, o, "allocator", [&] { test_allocator(t, o, stream); });
    family(t, o, "bad_data", [&] { test_bad_data(t, o, stream); });
    family(t, o, "graph_lengths", [&] { test_graph_lengths(t, o); });
    family(t, o, "bad_lengths", [&] { test_bad_lengths(t, o, stream); });
    family(t, o, "backend", [&] { test_backend(t, o); });
    family(t, o, "plan_log", [&] { test_plan_log(t, o); });
    if (!o.quick)
        family(t, o, "execute_cost", [&] { report_execute_cost(t, stream); });   // timing: not under a sanitizer
    // Last: should a host pointer get through to a kernel, the context is lost for what follows.
    family(t, o, "bad_arguments", [&] { test_bad_arguments(t, o, stream); });
}

int run(const Options& o) {
    print_header(o);
    Tally t;
    if (o.cpu_only) {
        run_comparison_families(t, o, nullptr);
        run_cases(t, "spread", spread_cases(o), o, nullptr);
    } else {
        Stream stream;
        if (!o.backward_only) run_comparison_families(t, o, stream.s);
        if (!o.backward_only) run_spread_families(t, o, stream.s);
        run_backward_families(t, o, stream.s);
        run_backward_api_families(t, o, stream.s);
        if (!o.backward_only) run_api_families(t, o, stream.s);
    }
    std::printf("%d passed, %d failed\n", t.total_passed(), t.total_failed());
    return t.total_failed() == 0 && t.total_passed() > 0 ? 0 : 1;
}

}   // namespace

int main(int argc, char** argv) {
    Options o;
    if (!parse(argc, argv, o)) return 2;
    if (!o.cpu_only && !device_present()) {
        std::printf("no CUDA device: skipped\n");
        return 77;
    }
    if (!o.cpu_only && cudaDeviceGetAttribute(&o.sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
        std::printf("cudaDeviceGetAttribute failed\n");
        return 1;
    }
    try {
        return run(o);
    } catch (const std::exception& e) {   // a failure outside any one check (setup)
        std::printf("error: %s\n0 passed, 1 failed\n", e.what());
        return 1;
    }
}
