// The SDK's server loop fuzzed over frames: byte streams of remote-protocol requests, served by
// nnts::sdk::serveStream to a driver that accepts everything (so that every path reaches the
// driver) and fills its outputs to the last byte the SDK gives it. Built with ASan and UBSan, a
// read or write outside what the SDK handed out, a leak, or undefined behaviour is a finding.
//
// Two ways to run it:
//   libFuzzer:  clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -DNNTS_LIBFUZZER
//                 -I$(nnts sdk --include) frame_fuzzer.cpp $(nnts sdk --sources) -o frame_fuzzer
//   standalone: g++ -std=c++17 -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all
//                 -I$(nnts sdk --include) frame_fuzzer.cpp $(nnts sdk --sources) -lpthread -o frame_fuzzer
//               ./frame_fuzzer [--runs N] [--seed S] [--max-time SECONDS]
//   The standalone harness mutates a fixed corpus of valid sessions (every message type) with a
//   deterministic generator: a run is reproducible from its seed, and reports exec/s.
#include <sys/mman.h>
#include <unistd.h>
#include <fcntl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../src/internal.hpp"

namespace {

using namespace nnts;

constexpr size_t REGION_BYTES = 4096;

// Four regions the fuzzer lends: paths "r0".."r3"; any other path fails to map.
std::vector<std::vector<uint8_t>> regionMemory(4, std::vector<uint8_t>(REGION_BYTES));

std::shared_ptr<sdk::Mapping> lendRegion(const std::string& path, uint64_t size) {
    if (path.size() != 2 || path[0] != 'r' || path[1] < '0' || path[1] > '3' || size > REGION_BYTES) return nullptr;
    auto m = std::make_shared<sdk::Mapping>();
    m->base = regionMemory[size_t(path[1] - '0')].data();
    m->size = size;
    m->owned = false;
    return m;
}

class Buffer : public IBuffer {
  public:
    Result<void> copyTo(uint8_t* destination, uint64_t length) const override {
        std::memset(destination, 0x5a, size_t(length));
        return {};
    }
    Result<void> copyFrom(const uint8_t* source, uint64_t length, const Dimensions&) const override {
        volatile uint8_t sum = 0;
        for (uint64_t i = 0; i < length; i++) sum = uint8_t(sum + source[i]);
        return {};
    }
};

// Reads every input byte and writes every output byte the SDK hands out: ASan checks the bounds.
class Prepared : public IPreparedModel {
  public:
    Result<ExecutionOutput> execute(const Request& request, bool, TimePoint, Duration) const override {
        volatile uint8_t sum = 0;
        for (const auto& a : request.inputs)
            for (uint32_t i = 0; a.location.pointer && i < a.location.length; i++)
                sum = uint8_t(sum + static_cast<const uint8_t*>(a.location.pointer)[i]);
        std::vector<OutputShape> shapes;
        for (const auto& a : request.outputs) {
            if (a.location.pointer) std::memset(a.location.pointer, 0x7f, a.location.length);
            shapes.push_back({a.dimensions, true});
        }
        return ExecutionOutput{shapes, Timing{}};
    }
};

class Device : public IDevice {
  public:
    Device() { extensions_ = {{"org.nnts.example", {{0, true, 8}}}}; }
    const std::string& getName() const override { return name_; }
    const std::string& getVersionString() const override { return name_; }
    int64_t getFeatureLevel() const override { return 1000007; }
    DeviceType getType() const override { return DeviceType::ACCELERATOR; }
    const std::vector<Extension>& getSupportedExtensions() const override { return extensions_; }
    const Capabilities& getCapabilities() const override { return capabilities_; }
    std::pair<uint32_t, uint32_t> getNumberOfCacheFilesNeeded() const override { return {1, 1}; }
    bool acceptsHardwareBuffer(const HardwareBufferDesc& desc) const override { return desc.width % 2 == 0; }
    Result<std::vector<bool>> getSupportedOperations(const Model& model) const override {
        touch(model);
        return std::vector<bool>(model.main.operations.size(), true);
    }
    Result<std::shared_ptr<IPreparedModel>> prepareModel(const Model& model, ExecutionPreference, Priority, TimePoint,
                                                         const std::vector<int>&, const std::vector<int>&,
                                                         const std::vector<uint8_t>&) const override {
        touch(model);
        return std::shared_ptr<IPreparedModel>(std::make_shared<Prepared>());
    }
    Result<std::shared_ptr<IBuffer>> allocate(const BufferDesc&, const std::vector<std::shared_ptr<IPreparedModel>>&,
                                              const std::vector<BufferRole>&, const std::vector<BufferRole>&) const override {
        return std::shared_ptr<IBuffer>(std::make_shared<Buffer>());
    }

  private:
    // Reads every index and constant byte of the model: the SDK promised they are in range.
    static void touch(const Model& model) {
        volatile uint32_t sum = 0;
        for (size_t s = 0; s <= model.referenced.size(); s++) {
            const auto& sg = s == 0 ? model.main : model.referenced[s - 1];
            for (const auto& op : sg.operations) {
                for (uint32_t k : op.inputs) sum = sum + uint32_t(sg.operands.at(k).type);
                for (uint32_t k : op.outputs) sum = sum + uint32_t(sg.operands.at(k).type);
            }
            for (uint32_t k : sg.inputIndexes) sum = sum + uint32_t(sg.operands.at(k).lifetime);
            for (const auto& o : sg.operands)
                for (uint32_t i = 0; o.location.pointer && i < o.location.length; i++)
                    sum = sum + static_cast<const uint8_t*>(o.location.pointer)[i];
        }
    }
    std::string name_ = "fuzz";
    Capabilities capabilities_;
    std::vector<Extension> extensions_;
};

std::shared_ptr<IDevice> device = std::make_shared<Device>();
int devNull = -1;

void serveBytes(const uint8_t* data, size_t size) {
    if (devNull < 0) devNull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    int fd = memfd_create("frames", MFD_CLOEXEC);
    if (fd < 0) return;
    size_t done = 0;
    while (done < size) {
        ssize_t k = write(fd, data + done, size - done);
        if (k <= 0) break;
        done += size_t(k);
    }
    lseek(fd, 0, SEEK_SET);
    sdk::serveStream(device, fd, devNull, 0, lendRegion);
    close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    serveBytes(data, size);
    return 0;
}

#ifndef NNTS_LIBFUZZER

namespace {

// ---- a corpus of valid sessions, written frame by frame ----------------------------------------

struct Frame {
    uint32_t type;
    std::vector<uint8_t> body;
};

struct W {
    std::vector<uint8_t> b;
    W& le(uint64_t v, int n) {
        for (int i = 0; i < n; i++) b.push_back(uint8_t(v >> (8 * i)));
        return *this;
    }
    W& u8(uint8_t v) { return le(v, 1); }
    W& u32(uint32_t v) { return le(v, 4); }
    W& u64(uint64_t v) { return le(v, 8); }
    W& f32(float v) {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        return u32(u);
    }
    W& str(const std::string& s) {
        u32(uint32_t(s.size()));
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    W& dims(std::initializer_list<uint32_t> d) {
        u32(uint32_t(d.size()));
        for (uint32_t x : d) u32(x);
        return *this;
    }
    // Operand: type, dims, scale, zero point, lifetime, value, no channel quant, no extension data.
    W& operand(int32_t type, std::initializer_list<uint32_t> d, int32_t lifetime, uint8_t kind = 0, uint32_t a = 0,
               uint32_t len = 0) {
        u32(uint32_t(type)).dims(d).f32(0).u32(0).u32(uint32_t(lifetime)).u8(kind);
        if (kind == 1) u32(a).u32(len);
        if (kind == 2) u64(1).u64(a).u64(len);
        if (kind == 3) u32(a);
        return u8(0).u8(0);
    }
};

// ADD of two [2,2] floats and an inline fuse code; a region constant; an IF referencing a subgraph.
std::vector<uint8_t> model() {
    W w;
    w.u32(5);
    w.operand(3, {2, 2}, 1).operand(3, {2, 2}, 4, 2, 256, 16).operand(1, {}, 3, 1, 0, 4).operand(3, {2, 2}, 2);
    w.operand(15, {}, 6, 3, 0);
    w.u32(1).u32(0).dims({0, 1, 2}).dims({3});
    w.dims({0}).dims({3});
    w.u32(1);  // one referenced subgraph: ADD of its inputs
    w.u32(4).operand(3, {2, 2}, 1).operand(3, {2, 2}, 1).operand(1, {}, 3, 1, 4, 4).operand(3, {2, 2}, 2);
    w.u32(1).u32(0).dims({0, 1, 2}).dims({3}).dims({0, 1}).dims({3});
    w.u8(0);                                  // relaxed
    w.u32(8).u32(0).u32(1);                   // operand values: two INT32
    w.u32(1).str("org.nnts.example").u32(7);  // extension prefixes
    return w.b;
}

std::vector<uint8_t> request(uint8_t poolKind) {
    W w;
    w.u32(1).u32(0).u32(0).u32(0).u32(16).dims({}).u8(0);               // input: pool 0 [0, 16)
    w.u32(1).u32(0).u32(0).u32(64).u32(16).dims({2, 2}).u8(0);          // output: pool 0 [64, 80)
    w.u32(2).u8(0).u64(1).u64(0).u64(512);                              // pool 0: region 1
    if (poolKind == 1) w.u8(1).u64(3);                                  // pool 1: device memory
    else if (poolKind == 2) w.u8(2).u64(2).u64(0).u64(128).u32(2).u32(4).u32(1).u32(1).u64(0x33).u32(4);
    else w.u8(0).u64(2).u64(0).u64(128);                                // (2: an R8G8B8A8 hardware buffer)
    return w.b;
}

std::vector<Frame> session() {
    std::vector<Frame> s;
    s.push_back({sdk::HELLO, W().str("").b});
    s.back().body = {'N', 'N', 'T', 'S', uint8_t(sdk::PROTOCOL_VERSION), 0, 0, 0};
    s.push_back({sdk::REGION_ADD, W().u64(1).u64(4096).str("r0").b});
    s.push_back({sdk::REGION_ADD, W().u64(2).u64(1024).str("r1").b});
    s.push_back({sdk::TRACE_START, {}});
    s.push_back({sdk::GET_SUPPORTED_OPERATIONS, model()});
    W prepare;
    prepare.b = model();
    prepare.u32(1).u32(100).u8(1).u64(1000000000).u32(0).u32(0).u8(1).str("token");
    prepare.u32(1).u32(0x70001).str("hint").u32(1).str("org.nnts.example").u32(7);  // hints
    s.push_back({sdk::PREPARE_MODEL, prepare.b});
    W exec;
    exec.u64(1);
    auto req = request(0);
    exec.b.insert(exec.b.end(), req.begin(), req.end());
    exec.u8(1).u8(1).u64(1000000000).u64(1000);
    exec.u32(1).u32(0x70002).str("").u32(1).str("org.nnts.example").u32(7);  // hints
    s.push_back({sdk::EXECUTE_SYNC, exec.b});
    s.push_back({sdk::EXECUTE_ASYNC, exec.b});
    W image;
    image.u64(1);
    req = request(2);
    image.b.insert(image.b.end(), req.begin(), req.end());
    image.u8(0).u8(0).u64(0).u32(0).u32(0);
    s.push_back({sdk::EXECUTE_SYNC, image.b});
    W fenced = exec;
    fenced.u32(2).u32(0).u32(0).u8(1).u64(5000);
    s.push_back({sdk::EXECUTE_FENCED, fenced.b});
    s.push_back({sdk::CONFIGURE_BURST, W().u64(1).b});
    W alloc;
    alloc.dims({2, 2}).u32(1).u64(1).u32(1).u32(0).u32(0).f32(1.0f).u32(0);
    s.push_back({sdk::ALLOCATE, alloc.b});
    s.push_back({sdk::BUFFER_COPY_FROM, W().u64(3).u64(1).u64(0).u64(16).dims({2, 2}).b});
    s.push_back({sdk::BUFFER_COPY_TO, W().u64(3).u64(1).u64(16).u64(16).b});
    W burst;
    burst.u64(2);
    req = request(1);
    burst.b.insert(burst.b.end(), req.begin(), req.end());
    burst.u8(0).u8(0).u64(0).u32(0).u32(0).u32(2).u64(11).u64(12);
    s.push_back({sdk::BURST_EXECUTE, burst.b});
    s.push_back({sdk::BURST_RELEASE_MEMORY, W().u64(2).u64(11).b});
    s.push_back({sdk::PREPARE_MODEL_FROM_CACHE, W().u8(0).u32(0).u32(0).u8(0).b});
    s.push_back({sdk::TRACE_COLLECT, {}});
    s.push_back({sdk::REGION_REMOVE, W().u64(2).b});
    s.push_back({sdk::RELEASE, W().u64(2).b});
    s.push_back({sdk::RELEASE, W().u64(1).b});
    return s;
}

std::vector<uint8_t> serialize(const std::vector<Frame>& frames, uint64_t& callId) {
    W w;
    for (const auto& f : frames) w.u32(uint32_t(12 + f.body.size())).u32(f.type).u64(++callId).b.insert(
        w.b.end(), f.body.begin(), f.body.end());
    return w.b;
}

// ---- deterministic mutations ----------------------------------------------------------------------

struct Rng {
    uint64_t s;
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    size_t below(size_t n) { return n ? size_t(next() % n) : 0; }
};

const uint32_t INTERESTING[] = {0, 1, 2, 3, 4, 7, 8, 15, 16, 0x7f, 0x80, 0xff, 0x100, 0x1000, 0xffff, 0x10000,
                                0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff};

void mutate(std::vector<uint8_t>& b, Rng& r) {
    switch (r.below(b.empty() ? 1 : 7)) {
        case 0: {  // insert bytes
            size_t at = r.below(b.size() + 1), n = 1 + r.below(8);
            std::vector<uint8_t> bytes(n);
            for (auto& x : bytes) x = uint8_t(r.next());
            b.insert(b.begin() + long(at), bytes.begin(), bytes.end());
            break;
        }
        case 1: b[r.below(b.size())] ^= uint8_t(1u << r.below(8)); break;
        case 2: b[r.below(b.size())] = uint8_t(r.next()); break;
        case 3: {  // an interesting 32-bit value
            if (b.size() < 4) break;
            uint32_t v = INTERESTING[r.below(sizeof INTERESTING / sizeof *INTERESTING)];
            size_t at = r.below(b.size() - 3);
            for (int i = 0; i < 4; i++) b[at + size_t(i)] = uint8_t(v >> (8 * i));
            break;
        }
        case 4: {  // erase a range
            size_t at = r.below(b.size()), n = 1 + r.below(std::min<size_t>(16, b.size() - at));
            b.erase(b.begin() + long(at), b.begin() + long(at + n));
            break;
        }
        case 5: b.resize(r.below(b.size())); break;  // truncate
        default: {  // duplicate a range
            size_t at = r.below(b.size()), n = 1 + r.below(std::min<size_t>(16, b.size() - at));
            std::vector<uint8_t> copy(b.begin() + long(at), b.begin() + long(at + n));
            b.insert(b.begin() + long(r.below(b.size())), copy.begin(), copy.end());
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t runs = 20000, seed = 1;
    double maxTime = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--runs") runs = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "--max-time") maxTime = std::strtod(argv[i + 1], nullptr);
        else {
            std::fprintf(stderr, "frame_fuzzer: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    const std::vector<Frame> corpus = session();
    Rng r{seed * 0x9E3779B97F4A7C15ull + 1};
    auto start = std::chrono::steady_clock::now();
    uint64_t run = 0;
    size_t bytes = 0;
    for (; run < runs; run++) {
        std::vector<Frame> frames = corpus;
        uint64_t callId = 0;
        std::vector<uint8_t> stream;
        if (r.below(5) == 0) {  // the raw stream: lengths, types and call ids too
            stream = serialize(frames, callId);
            for (size_t k = 1 + r.below(4); k > 0; k--) mutate(stream, r);
        } else {  // frame bodies, with their lengths kept right
            for (size_t k = 1 + r.below(4); k > 0; k--) {
                Frame& f = frames[r.below(frames.size())];
                if (r.below(8) == 0) f.type = INTERESTING[r.below(sizeof INTERESTING / sizeof *INTERESTING)] % 120;
                else mutate(f.body, r);
            }
            if (r.below(4) == 0) frames.erase(frames.begin() + long(r.below(frames.size())));
            stream = serialize(frames, callId);
        }
        bytes += stream.size();
        serveBytes(stream.data(), stream.size());
        if (maxTime > 0 && (run & 63) == 0 &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > maxTime)
            break;
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("frame_fuzzer: %llu sessions (%zu bytes) in %.1f s: %.0f exec/s, seed %llu, no findings\n",
                (unsigned long long)run, bytes, seconds, double(run) / (seconds > 0 ? seconds : 1),
                (unsigned long long)seed);
    return 0;
}

#endif  // NNTS_LIBFUZZER
