// The remote-driver protocol (docs/remote-protocol.md), server side: decoding every message with
// every length checked, structural validation of models and requests, handles, bursts, fences,
// asynchronous replies and trace spans. The driver sees only well-formed models and requests.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <exception>
#include <limits>
#include <new>
#include <set>
#include <unordered_map>

#include "internal.hpp"

namespace nnts {

TimePoint now() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool isExtensionType(int32_t type) { return (uint32_t(type) >> 16) != 0; }

uint32_t elementSize(int32_t type) {
    switch (type) {
        case 0: case 1: case 2: case 3: case 4: return 4;
        case 5: case 6: case 9: case 11: case 13: case 14: return 1;
        case 7: case 8: case 10: case 12: return 2;
        default: return 0;
    }
}

const uint8_t* constantData(const Model& model, const Operand& operand) {
    (void)model;
    return static_cast<const uint8_t*>(operand.location.pointer);
}

Result<std::pair<Timing, Timing>> IPreparedModel::executeFenced(const Request& request, bool measure,
                                                                TimePoint deadline, Duration loopTimeout) const {
    auto done = execute(request, measure, deadline, loopTimeout);
    if (!done) return done.error();
    return std::make_pair(done.value().second, done.value().second);
}

namespace {
class DefaultBurst : public IBurst {
  public:
    explicit DefaultBurst(const IPreparedModel* prepared) : prepared_(prepared) {}
    Result<ExecutionOutput> execute(const Request& request, bool measure, TimePoint deadline, Duration loopTimeout,
                                    const std::vector<int64_t>&) const override {
        return prepared_->execute(request, measure, deadline, loopTimeout);
    }
    Result<ExecutionOutput> executeWithConfig(const Request& request, bool measure, TimePoint deadline,
                                              Duration loopTimeout, const std::vector<int64_t>&,
                                              const std::vector<TokenValuePair>& hints,
                                              const ExtensionNameToPrefix& extensionNameToPrefix) const override {
        return prepared_->executeWithConfig(request, measure, deadline, loopTimeout, hints, extensionNameToPrefix);
    }

  private:
    const IPreparedModel* prepared_;  // the SDK keeps the prepared model alive as long as its bursts
};
}  // namespace

Result<std::shared_ptr<IBurst>> IPreparedModel::configureExecutionBurst() const {
    return std::shared_ptr<IBurst>(std::make_shared<DefaultBurst>(this));
}

Result<std::shared_ptr<IPreparedModel>> IDevice::prepareModelFromCache(TimePoint, const std::vector<int>&,
                                                                       const std::vector<int>&,
                                                                       const std::vector<uint8_t>&) const {
    return error(ErrorStatus::GENERAL_FAILURE, "this driver does not cache compilations");
}

Result<std::shared_ptr<IBuffer>> IDevice::allocate(const BufferDesc&, const std::vector<std::shared_ptr<IPreparedModel>>&,
                                                   const std::vector<BufferRole>&, const std::vector<BufferRole>&) const {
    return error(ErrorStatus::GENERAL_FAILURE, "this driver allocates no device memory");
}

// ---- trace spans -------------------------------------------------------------------------------

namespace {
struct Span {
    std::string name;
    const char* phase;
    const char* layer;
    int64_t start, duration;
    uint64_t tid;
};
constexpr size_t MAX_SPANS_HELD = 100000;
constexpr size_t MAX_SPANS_PER_REPLY = 20000;
constexpr size_t MAX_SPAN_NAME = 200;
std::mutex traceMutex;
std::atomic<bool> tracing{false};
std::vector<Span> spans;
std::map<uint64_t, std::string> threadNames;
thread_local uint64_t threadId = 0;
thread_local int64_t spanStart = -1;  // the ipc span of the request this worker handles
thread_local uint32_t spanType = 0;

uint64_t currentThread() {
    if (!threadId) threadId = uint64_t(syscall(SYS_gettid));
    return threadId;
}

const char* knownWord(const char* word, std::initializer_list<const char*> words) {
    for (const char* w : words)
        if (word && std::strcmp(word, w) == 0) return w;
    return nullptr;
}

void nameThread(const std::string& name) {
    std::lock_guard<std::mutex> lock(traceMutex);
    threadNames[currentThread()] = name;
}
}  // namespace

void traceSpan(const char* name, const char* phase, const char* layer, TimePoint start) {
    if (!tracing.load(std::memory_order_relaxed) || !name) return;
    const char* p = knownWord(phase, {"initialization", "preparation", "compilation", "execution", "io", "compute",
                                      "results", "termination", "unspecified"});
    const char* l = knownWord(layer, {"ipc", "driver", "cpu", "other", "utility"});
    TimePoint end = now();
    std::lock_guard<std::mutex> lock(traceMutex);
    if (spans.size() >= MAX_SPANS_HELD) return;
    std::string n(name);
    if (n.size() > MAX_SPAN_NAME) n.resize(MAX_SPAN_NAME);
    spans.push_back({n, p ? p : "unspecified", l ? l : "other", start, std::max<int64_t>(0, end - start),
                     currentThread()});
    if (!threadNames.count(currentThread())) threadNames[currentThread()] = "worker";
}

namespace sdk {

const char* messageName(uint32_t type) {
    static const char* names[] = {"?", "HELLO", "GET_SUPPORTED_OPERATIONS", "PREPARE_MODEL",
                                  "PREPARE_MODEL_FROM_CACHE", "EXECUTE_SYNC", "EXECUTE_ASYNC", "EXECUTE_FENCED",
                                  "CONFIGURE_BURST", "BURST_EXECUTE", "BURST_RELEASE_MEMORY", "ALLOCATE",
                                  "BUFFER_COPY_TO", "BUFFER_COPY_FROM", "TRACE_START", "TRACE_COLLECT"};
    if (type < sizeof names / sizeof *names) return names[type];
    if (type == REGION_ADD) return "REGION_ADD";
    if (type == REGION_REMOVE) return "REGION_REMOVE";
    if (type == RELEASE) return "RELEASE";
    return "an unknown message";
}

Mapping::~Mapping() {
    if (owned && base) munmap(base, mapped);
}

std::shared_ptr<Mapping> mapRegionFile(const std::string& path, uint64_t size) {
    auto m = std::make_shared<Mapping>();
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return nullptr;
    struct stat st{};
    // A file shorter than the region would make reads past its end fault (SIGBUS): refuse it.
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && uint64_t(st.st_size) >= size && size < SIZE_MAX / 2) {
        size_t len = size ? size_t(size) : 1;
        void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            m->base = static_cast<uint8_t*>(p);
            m->mapped = len;
            m->size = size;
        }
    }
    close(fd);
    return m->base ? m : nullptr;
}

namespace {

// ---- decoding: every read bounds-checked; the first problem marks the message malformed -------

struct Malformed {
    std::string why;
};
struct Refused {  // a well-formed message that fails with a status (a bad region reference)
    Error error;
};

class Reader {
  public:
    Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
    const uint8_t* raw(uint64_t k) {
        if (k > n_ - pos_) throw Malformed{"message truncated"};
        const uint8_t* at = p_ + pos_;
        pos_ += size_t(k);
        return at;
    }
    uint64_t le(int bytes) {
        const uint8_t* b = raw(uint64_t(bytes));
        uint64_t v = 0;
        for (int i = bytes - 1; i >= 0; i--) v = v << 8 | b[i];
        return v;
    }
    uint8_t u8() { return uint8_t(le(1)); }
    uint32_t u32() { return uint32_t(le(4)); }
    uint64_t u64() { return le(8); }
    int32_t i32() { return int32_t(u32()); }
    int64_t i64() { return int64_t(u64()); }
    float f32() {
        uint32_t u = u32();
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    bool boolean() {
        uint8_t v = u8();
        if (v > 1) throw Malformed{"boolean field other than 0 or 1"};
        return v == 1;
    }
    // A list length, checked against what is left: nothing allocated beyond the message's size.
    uint32_t count(uint32_t minItemSize) {
        uint32_t k = u32();
        if (uint64_t(k) * minItemSize > n_ - pos_) throw Malformed{"list longer than the rest of the message"};
        return k;
    }
    std::vector<uint8_t> bytes() {
        uint32_t k = u32();
        const uint8_t* b = raw(k);
        return std::vector<uint8_t>(b, b + k);
    }
    std::string str() {
        auto b = bytes();
        return std::string(b.begin(), b.end());
    }
    std::vector<uint32_t> u32list() {
        std::vector<uint32_t> v(count(4));
        for (auto& x : v) x = u32();
        return v;
    }
    bool optionalI64(int64_t& v) {
        bool present = boolean();
        v = present ? i64() : 0;
        return present;
    }
    void end() const {
        if (pos_ != n_) throw Malformed{"bytes left over at the end of the message"};
    }

  private:
    const uint8_t* p_;
    size_t n_, pos_ = 0;
};

class Writer {
  public:
    std::vector<uint8_t> b;
    void le(uint64_t v, int bytes) {
        for (int i = 0; i < bytes; i++) b.push_back(uint8_t(v >> (8 * i)));
    }
    void u8(uint8_t v) { b.push_back(v); }
    void u32(uint32_t v) { le(v, 4); }
    void i32(int32_t v) { le(uint32_t(v), 4); }
    void u64(uint64_t v) { le(v, 8); }
    void i64(int64_t v) { le(uint64_t(v), 8); }
    void f32(float v) {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        u32(u);
    }
    void str(const std::string& s) {
        u32(uint32_t(s.size()));
        b.insert(b.end(), s.begin(), s.end());
    }
    void perf(const Capabilities::PerformanceInfo& p) {
        f32(p.execTime);
        f32(p.powerUsage);
    }
    void shapes(const std::vector<OutputShape>& v) {
        u32(uint32_t(v.size()));
        for (const auto& s : v) {
            u32(uint32_t(s.dimensions.size()));
            for (uint32_t d : s.dimensions) u32(d);
            u8(s.isSufficient);
        }
    }
    void timing(const Timing& t) {
        i64(t.timeOnDevice);
        i64(t.timeInDriver);
    }
};

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
    char buf[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

Error invalid(std::string message) { return error(ErrorStatus::INVALID_ARGUMENT, std::move(message)); }

// The minimum encoded sizes, for checking list lengths against the rest of a message.
constexpr uint32_t MIN_OPERAND = 23, MIN_OPERATION = 12, MIN_SUBGRAPH = 16, MIN_ARGUMENT = 21, MIN_POOL = 9;
enum ValueKind : uint8_t { V_NONE = 0, V_INLINE = 1, V_REGION = 2, V_SUBGRAPH = 3 };
using Lifetime = Operand::LifeTime;

// ---- the model, as decoded: where each operand's value travels --------------------------------

struct WireValue {
    uint8_t kind = V_NONE;
    uint32_t inlineOffset = 0;
    uint64_t length = 0;
    std::vector<uint8_t> regionBytes;  // a copy: the model outlives the message and the region
};

struct DecodedModel {
    Model model;
    std::vector<std::vector<WireValue>> values;  // per subgraph (main first), per operand
    std::vector<uint8_t> blob;                   // operand_values as sent
};

struct RegionRef {
    std::shared_ptr<Mapping> mapping;
    uint8_t* data = nullptr;
    uint64_t length = 0;
};

}  // namespace

// ---- one connection ------------------------------------------------------------------------------

struct PreparedEntry {
    std::shared_ptr<IPreparedModel> prepared;
    std::shared_ptr<const Model> model;  // kept as long as the prepared model (the driver may hold it)
};
struct BurstEntry {
    std::shared_ptr<IBurst> burst;
    std::shared_ptr<PreparedEntry> owner;
    std::set<int64_t> tokens;  // the memory cache: pools the burst has seen, until released
};
struct BufferEntry {
    std::shared_ptr<IBuffer> buffer;
    uint64_t token = 0;
    Dimensions dimensions;
};

struct Connection {
    std::shared_ptr<IDevice> device;
    Output& out;
    WorkerPool& pool;
    RegionOpener opener;
    std::mutex mutex;  // guards the tables below (workers add prepared models)
    std::unordered_map<uint64_t, std::shared_ptr<Mapping>> regions;  // null: failed to map
    std::unordered_map<uint64_t, std::shared_ptr<PreparedEntry>> prepared;
    std::unordered_map<uint64_t, std::shared_ptr<BurstEntry>> bursts;
    std::unordered_map<uint64_t, std::shared_ptr<BufferEntry>> buffers;
    std::unordered_map<uint64_t, std::shared_ptr<BufferEntry>> bufferTokens;
    uint64_t nextHandle = 1;
    uint32_t currentType = 0;  // the message in hand (the reading thread's)
    uint32_t version = PROTOCOL_VERSION;  // settled at HELLO: the client's
    std::atomic<int> inFlight{0};
    std::mutex doneMutex;
    std::condition_variable done;

    Connection(std::shared_ptr<IDevice> d, Output& o, WorkerPool& p, RegionOpener r)
        : device(std::move(d)), out(o), pool(p), opener(std::move(r)) {}

    uint64_t newHandle() { return nextHandle++; }

    // A worker's ipc span ends when its reply goes out (the client's call ends when it arrives).
    void reply(uint32_t type, uint64_t callId, const Writer& w) {
        if (spanStart >= 0) {
            traceSpan((std::string("serve ") + messageName(spanType)).c_str(), ipcPhase(spanType), "ipc", spanStart);
            spanStart = -1;
        }
        out.frame(type, callId, w.b);
    }
    void replyError(uint64_t callId, const Error& e, bool withShapes = false) {
        Writer w;
        w.i32(int32_t(e.code == ErrorStatus::NONE ? ErrorStatus::GENERAL_FAILURE : e.code));
        w.str(e.message);
        w.shapes(withShapes ? e.outputShapes : std::vector<OutputShape>{});
        reply(REPLY_ERROR, callId, w);
    }

    // Runs job (which replies to callId) on the worker pool, in an ipc span; the connection does
    // not end before it finishes.
    void later(uint64_t callId, std::function<void()> job) {
        inFlight++;
        uint32_t type = currentType;
        pool.submit([this, type, callId, job = std::move(job)] {
            setCurrentMessage(messageName(type));
            spanType = type;
            spanStart = now();
            try {
                job();
            } catch (const std::exception& e) {  // the SDK's own failure (out of memory): the call still ends
                replyError(callId, error(ErrorStatus::GENERAL_FAILURE, format("nnts-driver: %s", e.what())));
            }
            spanStart = -1;
            setCurrentMessage(nullptr);
            std::lock_guard<std::mutex> lock(doneMutex);
            if (--inFlight == 0) done.notify_all();
        });
    }
    void waitIdle() {
        std::unique_lock<std::mutex> lock(doneMutex);
        done.wait(lock, [this] { return inFlight.load() == 0; });
    }
    bool waitIdleFor(int64_t milliseconds) {
        std::unique_lock<std::mutex> lock(doneMutex);
        return done.wait_for(lock, std::chrono::milliseconds(milliseconds), [this] { return inFlight.load() == 0; });
    }

    // ---- regions ----
    RegionRef regionRef(Reader& r) {
        uint64_t id = r.u64(), offset = r.u64(), length = r.u64();
        std::lock_guard<std::mutex> lock(mutex);
        auto it = regions.find(id);
        if (it == regions.end()) throw Refused{invalid(format("unknown region %llu", (unsigned long long)id))};
        if (!it->second) throw Refused{invalid(format("region %llu could not be mapped", (unsigned long long)id))};
        const Mapping& m = *it->second;
        if (offset > m.size || length > m.size - offset)
            throw Refused{invalid(format("[%llu, +%llu) outside region %llu of %llu bytes", (unsigned long long)offset,
                                         (unsigned long long)length, (unsigned long long)id,
                                         (unsigned long long)m.size))};
        return RegionRef{it->second, m.base + offset, length};
    }

    // ---- models ----
    void readSubgraph(Reader& r, Model::Subgraph& sg, std::vector<WireValue>& values) {
        sg.operands.resize(r.count(MIN_OPERAND));
        values.resize(sg.operands.size());
        for (size_t k = 0; k < sg.operands.size(); k++) {
            Operand& o = sg.operands[k];
            WireValue& v = values[k];
            o.type = r.i32();
            o.dimensions = r.u32list();
            o.scale = r.f32();
            o.zeroPoint = r.i32();
            o.lifetime = Lifetime(r.i32());
            v.kind = r.u8();
            if (v.kind == V_INLINE) {
                v.inlineOffset = r.u32();
                v.length = r.u32();
            } else if (v.kind == V_REGION) {
                RegionRef ref = regionRef(r);
                if (ref.length > UINT32_MAX) throw Refused{invalid("a constant over 4 GiB")};
                v.length = ref.length;
                v.regionBytes.assign(ref.data, ref.data + ref.length);
            } else if (v.kind == V_SUBGRAPH) {
                o.location.offset = r.u32();
            } else if (v.kind != V_NONE) {
                throw Malformed{"unknown operand value kind"};
            }
            o.hasChannelQuant = r.boolean();
            if (o.hasChannelQuant) {
                o.channelQuant.scales.resize(r.count(4));
                for (auto& s : o.channelQuant.scales) s = r.f32();
                o.channelQuant.channelDim = r.u32();
            }
            o.hasExtensionData = r.boolean();
            if (o.hasExtensionData) o.extensionData = r.bytes();
        }
        sg.operations.resize(r.count(MIN_OPERATION));
        for (auto& op : sg.operations) {
            op.type = r.i32();
            op.inputs = r.u32list();
            op.outputs = r.u32list();
        }
        sg.inputIndexes = r.u32list();
        sg.outputIndexes = r.u32list();
    }

    void readModel(Reader& r, DecodedModel& d) {
        d.values.emplace_back();
        readSubgraph(r, d.model.main, d.values.back());
        d.model.referenced.resize(r.count(MIN_SUBGRAPH));
        for (auto& sg : d.model.referenced) {
            d.values.emplace_back();
            readSubgraph(r, sg, d.values.back());
        }
        d.model.relaxComputationFloat32toFloat16 = r.boolean();
        d.blob = r.bytes();
        for (const auto& sgValues : d.values)
            for (const auto& v : sgValues)
                if (v.kind == V_INLINE && uint64_t(v.inlineOffset) + v.length > d.blob.size())
                    throw Malformed{"inline constant outside the operand values"};
        d.model.extensionNameToPrefix.resize(r.count(8));
        for (auto& e : d.model.extensionNameToPrefix) {
            e.name = r.str();
            uint32_t prefix = r.u32();
            if (prefix == 0 || prefix > MAX_EXTENSION_PREFIX)
                throw Refused{invalid(format("extension prefix %u outside 1-65535", prefix))};
            e.prefix = uint16_t(prefix);
        }
    }

    // ---- structural validation (what NNAPI requires of any model, whatever its operations) ----
    const Extension* declaredExtension(const Model& m, int32_t type) const {
        uint32_t prefix = uint32_t(type) >> 16;
        for (const auto& e : m.extensionNameToPrefix)
            if (e.prefix == prefix)
                for (const auto& x : device->getSupportedExtensions())
                    if (x.name == e.name) return &x;
        return nullptr;
    }
    static bool prefixKnown(const Model& m, int32_t type) {
        for (const auto& e : m.extensionNameToPrefix)
            if (e.prefix == uint32_t(type) >> 16) return true;
        return false;
    }
    // Bytes per element of an operand type (an extension's from the driver's declaration); 0 unknown.
    uint32_t bytesPerElement(const Model& m, int32_t type) const {
        if (!isExtensionType(type)) return elementSize(type);
        const Extension* x = declaredExtension(m, type);
        if (x)
            for (const auto& t : x->operandTypes)
                if (t.type == (uint32_t(type) & 0xFFFF)) return t.byteSize;
        return 0;
    }
    static bool isScalarType(int32_t t) { return t == 0 || t == 1 || t == 2 || t == 6 || t == 10 || t == 15; }

    const char* operandTypeProblem(const Model& m, const Operand& o) const {
        int32_t t = o.type;
        if (isExtensionType(t)) {
            if (!prefixKnown(m, t)) return "an extension type whose prefix the model does not map";
            const Extension* x = declaredExtension(m, t);
            if (x && !bytesPerElement(m, t)) return "the extension has no such operand type";
            if (o.scale != 0 || o.zeroPoint != 0 || o.hasChannelQuant)
                return "an extension operand takes scale 0, zero point 0 and no per-channel quantization";
            return nullptr;
        }
        if (o.hasExtensionData) return "extension data on an operand of a built-in type";
        if (t < 0 || t > 15) return "invalid operand type";
        if (isScalarType(t) && !o.dimensions.empty()) return "a scalar type with dimensions";
        if (o.dimensions.size() > MAX_RANK_ACCEPTED) return "more dimensions than any operation takes";
        if (!std::isfinite(o.scale)) return "scale is not finite";
        switch (OperandType(t)) {
            case OperandType::TENSOR_QUANT8_ASYMM:
                if (!(o.scale > 0) || o.zeroPoint < 0 || o.zeroPoint > 255)
                    return "TENSOR_QUANT8_ASYMM needs a positive scale and a zero point in [0, 255]";
                break;
            case OperandType::TENSOR_QUANT8_ASYMM_SIGNED:
                if (!(o.scale > 0) || o.zeroPoint < -128 || o.zeroPoint > 127)
                    return "TENSOR_QUANT8_ASYMM_SIGNED needs a positive scale and a zero point in [-128, 127]";
                break;
            case OperandType::TENSOR_QUANT16_ASYMM:
                if (!(o.scale > 0) || o.zeroPoint < 0 || o.zeroPoint > 65535)
                    return "TENSOR_QUANT16_ASYMM needs a positive scale and a zero point in [0, 65535]";
                break;
            case OperandType::TENSOR_QUANT8_SYMM:
            case OperandType::TENSOR_QUANT16_SYMM:
                if (!(o.scale > 0) || o.zeroPoint != 0)
                    return "a symmetric quantized type needs a positive scale and zero point 0";
                break;
            case OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL:
                if (o.scale != 0 || o.zeroPoint != 0)
                    return "TENSOR_QUANT8_SYMM_PER_CHANNEL takes scale 0 and zero point 0";
                break;
            case OperandType::TENSOR_INT32:
                if (o.scale < 0 || o.zeroPoint != 0) return "TENSOR_INT32 needs a non-negative scale and zero point 0";
                break;
            default:
                if (o.scale != 0 || o.zeroPoint != 0) return "this type takes scale 0 and zero point 0";
        }
        if (o.hasChannelQuant) {
            const auto& q = o.channelQuant;
            if (t != int32_t(OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL))
                return "per-channel quantization on a type without it";
            if (q.channelDim >= o.dimensions.size()) return "channel dimension out of range";
            if (o.dimensions[q.channelDim] != 0 && q.scales.size() != o.dimensions[q.channelDim])
                return "channel scale count differs from the channel dimension";
            for (float s : q.scales)
                if (!(s > 0) || !std::isfinite(s)) return "channel scales must be positive";
        } else if (t == int32_t(OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL)) {
            return "TENSOR_QUANT8_SYMM_PER_CHANNEL without per-channel quantization";
        }
        return nullptr;
    }

    const char* operandProblem(const Model& m, const Operand& o, const WireValue& v) const {
        if (const char* p = operandTypeProblem(m, o)) return p;
        int32_t lifetime = int32_t(o.lifetime);
        if (lifetime < 0 || lifetime > 6) return "invalid lifetime";
        bool hasBytes = v.kind == V_INLINE || v.kind == V_REGION;
        bool isSubgraphType = o.type == int32_t(OperandType::SUBGRAPH);
        if (o.lifetime == Lifetime::CONSTANT_COPY || o.lifetime == Lifetime::CONSTANT_REFERENCE) {
            if (isSubgraphType) return "a SUBGRAPH operand must have SUBGRAPH lifetime";
            if (!hasBytes) return "constant without a value";
            uint64_t count = 1;
            for (uint32_t d : o.dimensions) {
                if (d == 0) return "constant with unspecified dimensions";
                count *= d;
                if (count > UINT64_MAX / 16) return "constant too large";
            }
            uint32_t size = bytesPerElement(m, o.type);
            if (size && v.length != count * size) return "constant's byte length does not match its type and dimensions";
        } else if (o.lifetime == Lifetime::SUBGRAPH) {
            if (!isSubgraphType) return "SUBGRAPH lifetime on an operand that is not a SUBGRAPH";
            if (v.kind != V_SUBGRAPH || o.location.offset >= m.referenced.size())
                return "reference to a subgraph that does not exist";
        } else {
            if (v.kind != V_NONE) return "a non-constant operand with a value";
            if (isSubgraphType) return "a SUBGRAPH operand must have SUBGRAPH lifetime";
        }
        return nullptr;
    }

    static bool isWritten(Lifetime l) { return l == Lifetime::TEMPORARY_VARIABLE || l == Lifetime::SUBGRAPH_OUTPUT; }

    static Result<void> indexListOk(const Model::Subgraph& sg, const std::vector<uint32_t>& idx, Lifetime lifetime,
                                    const char* role) {
        std::vector<uint8_t> listed(sg.operands.size());
        for (uint32_t k : idx) {
            if (k >= sg.operands.size()) return invalid(format("%s index %u out of range", role, k));
            if (listed[k]) return invalid(format("%s operand %u listed twice", role, k));
            listed[k] = 1;
            if (sg.operands[k].lifetime != lifetime)
                return invalid(format("%s operand %u has the wrong lifetime", role, k));
        }
        for (size_t k = 0; k < sg.operands.size(); k++)
            if (sg.operands[k].lifetime == lifetime && !listed[k])
                return invalid(format("operand %zu is a model %s but not listed as one", k, role));
        return {};
    }

    Result<void> validateSubgraph(const Model& m, const Model::Subgraph& sg, const std::vector<WireValue>& values,
                                  size_t name) const {
        for (size_t k = 0; k < sg.operands.size(); k++)
            if (const char* p = operandProblem(m, sg.operands[k], values[k]))
                return invalid(format("subgraph %zu operand %zu: %s", name, k, p));
        auto ok = indexListOk(sg, sg.inputIndexes, Lifetime::SUBGRAPH_INPUT, "input");
        if (!ok) return ok;
        ok = indexListOk(sg, sg.outputIndexes, Lifetime::SUBGRAPH_OUTPUT, "output");
        if (!ok) return ok;
        // Operations in execution order, every operand they write written exactly once.
        std::vector<uint8_t> has(sg.operands.size());
        for (size_t k = 0; k < sg.operands.size(); k++) has[k] = !isWritten(sg.operands[k].lifetime);
        for (size_t j = 0; j < sg.operations.size(); j++) {
            const Operation& op = sg.operations[j];
            if (isExtensionType(op.type)) {
                if (!prefixKnown(m, op.type))
                    return invalid(format("operation %zu: an extension type whose prefix the model does not map", j));
            } else if (op.type < 0 || op.type > 105) {
                return invalid(format("operation %zu: invalid operation type %d", j, op.type));
            }
            for (uint32_t k : op.inputs)
                if (k >= sg.operands.size()) return invalid(format("operation %zu: input index %u out of range", j, k));
            for (uint32_t k : op.outputs) {
                if (k >= sg.operands.size()) return invalid(format("operation %zu: output index %u out of range", j, k));
                if (!isWritten(sg.operands[k].lifetime))
                    return invalid(format("operation %zu writes operand %u, which is not a temporary or a model output",
                                          j, k));
            }
            for (uint32_t k : op.inputs)
                if (!has[k])
                    return invalid(format("operation %zu reads operand %u before it is written (operations out of "
                                          "execution order, or the operand is never written)", j, k));
            for (uint32_t k : op.outputs) {
                if (has[k]) return invalid(format("operand %u is written twice", k));
                has[k] = 1;
            }
        }
        for (size_t k = 0; k < sg.operands.size(); k++)
            if (!has[k]) return invalid(format("subgraph %zu: operand %zu is never written", name, k));
        return {};
    }

    // No subgraph reachable from the main one references itself (Kahn's algorithm, iterative).
    static Result<void> noRecursion(const Model& m) {
        size_t n = m.referenced.size();
        if (!n) return {};
        std::vector<uint32_t> indegree(n), stack;
        std::vector<uint8_t> reached(n);
        auto reach = [&](const Model::Subgraph& sg) {
            for (const auto& o : sg.operands)
                if (o.lifetime == Lifetime::SUBGRAPH && !reached[o.location.offset]) {
                    reached[o.location.offset] = 1;
                    stack.push_back(o.location.offset);
                }
        };
        reach(m.main);
        size_t nReached = 0;
        while (!stack.empty()) {
            uint32_t s = stack.back();
            stack.pop_back();
            nReached++;
            reach(m.referenced[s]);
        }
        for (size_t s = 0; s < n; s++)
            if (reached[s])
                for (const auto& o : m.referenced[s].operands)
                    if (o.lifetime == Lifetime::SUBGRAPH) indegree[o.location.offset]++;
        for (size_t s = 0; s < n; s++)
            if (reached[s] && !indegree[s]) stack.push_back(uint32_t(s));
        size_t done = 0;
        while (!stack.empty()) {
            uint32_t s = stack.back();
            stack.pop_back();
            done++;
            for (const auto& o : m.referenced[s].operands)
                if (o.lifetime == Lifetime::SUBGRAPH && --indegree[o.location.offset] == 0)
                    stack.push_back(o.location.offset);
        }
        if (done != nReached) return invalid("a subgraph references itself");
        return {};
    }

    Result<void> validateModel(const DecodedModel& d) const {
        const Model& m = d.model;
        const auto& prefixes = m.extensionNameToPrefix;
        for (size_t i = 0; i < prefixes.size(); i++) {
            if (prefixes[i].name.empty()) return invalid(format("an empty extension name for prefix %u", prefixes[i].prefix));
            for (size_t j = 0; j < i; j++) {
                if (prefixes[j].prefix == prefixes[i].prefix)
                    return invalid(format("extension prefix %u given twice", prefixes[i].prefix));
                if (prefixes[j].name == prefixes[i].name) return invalid("an extension given two prefixes");
            }
        }
        if (m.main.operations.empty()) return invalid("the model has no operations");
        if (m.main.outputIndexes.empty()) return invalid("the model has no outputs");
        auto ok = validateSubgraph(m, m.main, d.values[0], 0);
        for (size_t k = 0; ok && k < m.referenced.size(); k++) ok = validateSubgraph(m, m.referenced[k], d.values[k + 1], k + 1);
        if (!ok) return ok;
        return noRecursion(m);
    }

    // Places every constant's bytes where the canonical model keeps them: CONSTANT_COPY values in
    // operandValues, CONSTANT_REFERENCE values in a pool each; location.pointer points at them.
    static void placeConstants(DecodedModel& d) {
        Model& m = d.model;
        auto each = [&](auto&& visit) {
            for (size_t s = 0; s <= m.referenced.size(); s++) {
                auto& sg = s == 0 ? m.main : m.referenced[s - 1];
                for (size_t k = 0; k < sg.operands.size(); k++) visit(sg.operands[k], d.values[s][k]);
            }
        };
        auto bytesOf = [&](const WireValue& v) {
            return v.kind == V_INLINE ? d.blob.data() + v.inlineOffset : v.regionBytes.data();
        };
        each([&](Operand& o, const WireValue& v) {
            if (v.kind != V_INLINE && v.kind != V_REGION) return;
            const uint8_t* src = bytesOf(v);
            if (o.lifetime == Lifetime::CONSTANT_REFERENCE) {
                o.location = {nullptr, uint32_t(m.pools.size()), 0, uint32_t(v.length)};
                m.pools.emplace_back(src, src + v.length);
            } else {
                while (m.operandValues.size() % 8) m.operandValues.push_back(0);  // aligned for any element type
                o.location = {nullptr, 0, uint32_t(m.operandValues.size()), uint32_t(v.length)};
                m.operandValues.insert(m.operandValues.end(), src, src + v.length);
            }
        });
        each([&](Operand& o, const WireValue& v) {
            if (v.kind != V_INLINE && v.kind != V_REGION) return;
            o.location.pointer = o.lifetime == Lifetime::CONSTANT_REFERENCE
                                     ? static_cast<void*>(m.pools[o.location.poolIndex].data())
                                     : static_cast<void*>(m.operandValues.data() + o.location.offset);
        });
    }

    bool usesUndeclaredExtension(const Model& m) const {
        auto undeclared = [&](int32_t t) { return isExtensionType(t) && !declaredExtension(m, t); };
        for (size_t s = 0; s <= m.referenced.size(); s++) {
            const auto& sg = s == 0 ? m.main : m.referenced[s - 1];
            for (const auto& o : sg.operands)
                if (undeclared(o.type)) return true;
            for (const auto& op : sg.operations)
                if (undeclared(op.type)) return true;
        }
        return false;
    }

    // ---- requests ----
    struct DecodedRequest {
        struct Arg {
            int32_t lifetime;
            uint32_t pool, offset, length;
            Dimensions dims;
            bool hasPointer = false;
            RegionRef pointer;
        };
        std::vector<Arg> in, out;
        struct Pool {
            uint8_t kind;
            RegionRef region;
            uint64_t token = 0;
            HardwareBufferDesc hardwareBuffer;  // kind 2
        };
        std::vector<Pool> pools;
    };

    void readRequest(Reader& r, DecodedRequest& q) {
        for (auto* side : {&q.in, &q.out}) {
            side->resize(r.count(MIN_ARGUMENT));
            for (auto& a : *side) {
                a.lifetime = r.i32();
                a.pool = r.u32();
                a.offset = r.u32();
                a.length = r.u32();
                a.dims = r.u32list();
                a.hasPointer = r.boolean();
                if (a.hasPointer) a.pointer = regionRef(r);
            }
        }
        q.pools.resize(r.count(MIN_POOL));
        for (auto& p : q.pools) {
            p.kind = r.u8();
            if (p.kind == 0) p.region = regionRef(r);
            else if (p.kind == 1) p.token = r.u64();
            else if (p.kind == 2 && version >= HARDWARE_BUFFER_POOL_VERSION) readHardwareBuffer(r, p);
            else throw Malformed{"unknown pool kind"};
        }
    }

    void readHardwareBuffer(Reader& r, DecodedRequest::Pool& p) {
        p.region = regionRef(r);
        HardwareBufferDesc& d = p.hardwareBuffer;
        d.width = r.u32();
        d.height = r.u32();
        d.layers = r.u32();
        d.format = r.u32();
        d.usage = r.u64();
        d.stride = r.u32();
    }

    // Merges two partially known shapes (dimension 0 unknown; no dimensions: unknown rank).
    static bool combine(const Dimensions& a, const Dimensions& b, Dimensions& out) {
        if (a.empty() || b.empty()) {
            out = a.empty() ? b : a;
            return true;
        }
        if (a.size() != b.size()) return false;
        out.resize(a.size());
        for (size_t i = 0; i < a.size(); i++) {
            if (a[i] && b[i] && a[i] != b[i]) return false;
            out[i] = a[i] ? a[i] : b[i];
        }
        return true;
    }
    static bool fullySpecified(const Dimensions& d) {
        if (d.empty()) return false;
        for (uint32_t x : d)
            if (!x) return false;
        return true;
    }

    // Structural request validation against the prepared model; resolves every argument's bytes
    // (the decoded request holds the mappings they are in until the execution ends).
    Result<Request> resolveRequest(const Model& m, const DecodedRequest& q) {
        const auto& sg = m.main;
        if (q.in.size() != sg.inputIndexes.size() || q.out.size() != sg.outputIndexes.size())
            return invalid(format("request has %zu inputs and %zu outputs, the model %zu and %zu", q.in.size(),
                                  q.out.size(), sg.inputIndexes.size(), sg.outputIndexes.size()));
        Request req;
        for (const auto& p : q.pools) {
            Request::MemoryPool pool;
            if (p.kind == 0 || p.kind == 2) {
                pool.data = p.region.data;
                pool.size = p.region.length;
                pool.isHardwareBuffer = p.kind == 2;
                pool.hardwareBuffer = p.hardwareBuffer;
            } else {
                std::lock_guard<std::mutex> lock(mutex);
                auto it = bufferTokens.find(p.token);
                if (it == bufferTokens.end()) return invalid("a pool names unknown device memory");
                pool.buffer = it->second->buffer;
            }
            req.pools.push_back(pool);
        }
        for (int side = 0; side < 2; side++) {
            const auto& args = side == 0 ? q.in : q.out;
            const char* what = side == 0 ? "input" : "output";
            auto& resolved = side == 0 ? req.inputs : req.outputs;
            for (size_t i = 0; i < args.size(); i++) {
                const auto& a = args[i];
                const Operand& o = sg.operands[side == 0 ? sg.inputIndexes[i] : sg.outputIndexes[i]];
                Request::Argument arg;
                arg.lifetime = Request::Argument::LifeTime(a.lifetime);
                if (a.lifetime == 1) {
                    if (side == 1) return invalid(format("output %zu: outputs may not be omitted", i));
                    resolved.push_back(arg);
                    continue;
                }
                bool deviceMemory = false;
                if (a.lifetime == 2) {
                    if (!a.hasPointer) return invalid(format("%s %zu: POINTER argument without a buffer", what, i));
                    if (a.pointer.length > UINT32_MAX) return invalid(format("%s %zu: a buffer over 4 GiB", what, i));
                    arg.location = {a.pointer.data, 0, 0, uint32_t(a.pointer.length)};
                } else if (a.lifetime == 0) {
                    if (a.pool >= q.pools.size())
                        return invalid(format("%s %zu: pool %u of %zu", what, i, a.pool, q.pools.size()));
                    const auto& pool = req.pools[a.pool];
                    if (pool.buffer) {
                        deviceMemory = true;
                        arg.location = {nullptr, a.pool, 0, 0};
                    } else {
                        if (uint64_t(a.offset) + a.length > pool.size)
                            return invalid(format("%s %zu: [%u, +%u) outside a pool of %llu bytes", what, i, a.offset,
                                                  a.length, (unsigned long long)pool.size));
                        arg.location = {pool.data + a.offset, a.pool, a.offset, a.length};
                    }
                } else {
                    return invalid(format("%s %zu: invalid argument lifetime %d", what, i, a.lifetime));
                }
                if (isScalarType(o.type)) {
                    if (!a.dims.empty()) return invalid(format("%s %zu: dimensions given for a scalar", what, i));
                } else {
                    if (!combine(o.dimensions, a.dims, arg.dimensions))
                        return invalid(format("%s %zu: dimensions conflict with the model's", what, i));
                    if (side == 0 && !fullySpecified(arg.dimensions))
                        return invalid(format("input %zu: dimensions not fully specified", i));
                }
                uint32_t size = bytesPerElement(m, o.type);
                if (side == 0 && size && !deviceMemory) {
                    uint64_t needed = size;
                    for (uint32_t d : arg.dimensions) {
                        needed *= d;
                        if (needed > UINT64_MAX / 0x100000000ull) break;
                    }
                    if (arg.location.length != needed)
                        return invalid(format("input %zu: %u bytes given, %llu needed", i, arg.location.length,
                                              (unsigned long long)needed));
                }
                resolved.push_back(arg);
            }
        }
        for (const auto& pool : req.pools)
            if (pool.isHardwareBuffer && !device->acceptsHardwareBuffer(pool.hardwareBuffer))
                return Error{ErrorStatus::GENERAL_FAILURE,
                             format("the driver cannot use a hardware buffer of format %u", pool.hardwareBuffer.format),
                             {}};
        return req;
    }

    // ---- handlers ----
    // The entry a handle from the wire names in one of the tables; a handle the server never gave
    // out is a malformed message.
    template <typename Entry>
    std::shared_ptr<Entry> find(const std::unordered_map<uint64_t, std::shared_ptr<Entry>>& table, uint64_t handle,
                                const char* what) {
        std::lock_guard<std::mutex> lock(mutex);
        auto it = table.find(handle);
        if (it == table.end()) throw Malformed{std::string("unknown ") + what + " handle"};
        return it->second;
    }

    std::shared_ptr<PreparedEntry> findPrepared(uint64_t handle) { return find(prepared, handle, "prepared model"); }

    void onHello(uint64_t callId, Reader& r) {
        const uint8_t* magic = r.raw(4);
        uint32_t version = r.u32();
        r.end();
        if (std::memcmp(magic, "NNTS", 4) != 0) throw Malformed{"HELLO without the magic NNTS"};
        if (version < OLDEST_PROTOCOL_VERSION || version > PROTOCOL_VERSION)
            return replyError(callId, error(ErrorStatus::DEVICE_UNAVAILABLE,
                                            format("this server speaks protocol versions %u to %u, the client %u",
                                                   OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION, version)));
        this->version = version;
        const IDevice& d = *device;
        const Capabilities& caps = d.getCapabilities();
        Writer w;
        w.u32(version);
        w.str(d.getName());
        w.str(d.getVersionString());
        w.i32(int32_t(d.getType()));
        w.i64(d.getFeatureLevel());
        w.perf(caps.relaxedFloat32toFloat16PerformanceScalar);
        w.perf(caps.relaxedFloat32toFloat16PerformanceTensor);
        auto perf = caps.operandPerformance;
        std::sort(perf.begin(), perf.end(), [](const auto& a, const auto& b) { return a.type < b.type; });
        w.u32(uint32_t(perf.size()));
        for (const auto& p : perf) {
            w.i32(p.type);
            w.perf(p.info);
        }
        w.perf(caps.ifPerformance);
        w.perf(caps.whilePerformance);
        const auto& extensions = d.getSupportedExtensions();
        w.u32(uint32_t(extensions.size()));
        for (const auto& x : extensions) {
            w.str(x.name);
            w.u32(uint32_t(x.operandTypes.size()));
            for (const auto& t : x.operandTypes) {
                w.u32(t.type);
                w.u8(t.isTensor);
                w.u32(t.byteSize);
            }
        }
        auto cache = d.getNumberOfCacheFilesNeeded();
        w.u32(cache.first);
        w.u32(cache.second);
        reply(REPLY_DEVICE_INFO, callId, w);
    }

    std::shared_ptr<DecodedModel> decodeValidModel(Reader& r) {
        auto d = std::make_shared<DecodedModel>();
        readModel(r, *d);
        return d;
    }

    void onSupported(uint64_t callId, Reader& r) {
        auto d = decodeValidModel(r);
        r.end();
        later(callId, [this, callId, d] {
            auto ok = validateModel(*d);
            if (!ok) return replyError(callId, ok.error());
            placeConstants(*d);
            auto supported = guard<std::vector<bool>>([&] { return device->getSupportedOperations(d->model); });
            if (!supported) return replyError(callId, supported.error());
            if (supported.value().size() != d->model.main.operations.size())
                return replyError(callId, error(ErrorStatus::GENERAL_FAILURE,
                                                "the driver returned a flag count other than the operation count"));
            Writer w;
            w.u32(uint32_t(supported.value().size()));
            for (size_t j = 0; j < supported.value().size(); j++) {
                int32_t t = d->model.main.operations[j].type;
                // An operation of an extension the driver does not declare cannot be supported.
                w.u8(supported.value()[j] && !(isExtensionType(t) && !declaredExtension(d->model, t)));
            }
            reply(REPLY_SUPPORTED, callId, w);
        });
    }

    struct CacheFiles {
        std::vector<int> model, data;
        std::vector<uint8_t> token;
        bool hasToken = false;
        ~CacheFiles() {
            for (int fd : model) close(fd);
            for (int fd : data) close(fd);
        }
    };

    void readCache(Reader& r, CacheFiles& c) {
        for (auto* fds : {&c.model, &c.data}) {
            uint32_t n = r.count(5);
            for (uint32_t i = 0; i < n; i++) {
                std::string path = r.str();
                bool writable = r.boolean();
                int fd = path.find('\0') == std::string::npos
                             ? open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC)
                             : -1;
                if (fd < 0) throw Refused{invalid(format("cache file %s cannot be opened", path.c_str()))};
                fds->push_back(fd);
            }
        }
        c.hasToken = r.boolean();
        if (c.hasToken) c.token = r.bytes();
    }

    // Hints (version 3 on): tokens with their bytes, then the prefixes the tokens use.
    struct Hints {
        std::vector<TokenValuePair> hints;
        ExtensionNameToPrefix prefixes;
    };
    void readHints(Reader& r, Hints& h) {
        if (version < HINTS_VERSION) return;
        h.hints.resize(r.count(8));
        for (auto& t : h.hints) {
            t.token = r.i32();
            t.value = r.bytes();
        }
        h.prefixes.resize(r.count(8));
        for (auto& p : h.prefixes) {
            p.name = r.str();
            uint32_t prefix = r.u32();
            if (prefix > MAX_EXTENSION_PREFIX) throw Refused{invalid(format("hint prefix %u over 65535", prefix))};
            p.prefix = uint16_t(prefix);
        }
        std::set<int32_t> tokens;
        std::set<uint16_t> prefixes;
        std::set<std::string> names;
        for (const auto& p : h.prefixes)
            if (!prefixes.insert(p.prefix).second || !names.insert(p.name).second)
                throw Refused{invalid("hints: the extension name to prefix mapping is not one to one")};
        for (const auto& t : h.hints) {
            if (!tokens.insert(t.token).second) throw Refused{invalid("hints: a token is repeated")};
            if (!prefixes.count(uint16_t(uint32_t(t.token) >> 16)))
                throw Refused{invalid(format("hints: token %#x has a prefix the mapping lacks", unsigned(t.token)))};
        }
    }

    uint64_t addPrepared(std::shared_ptr<IPreparedModel> p, std::shared_ptr<const Model> model) {
        std::lock_guard<std::mutex> lock(mutex);
        uint64_t h = newHandle();
        prepared[h] = std::make_shared<PreparedEntry>(PreparedEntry{std::move(p), std::move(model)});
        return h;
    }

    void onPrepare(uint64_t callId, Reader& r, TimePoint received) {
        auto d = decodeValidModel(r);
        int32_t preference = r.i32(), priority = r.i32();
        int64_t relative;
        bool hasDeadline = r.optionalI64(relative);
        auto cache = std::make_shared<CacheFiles>();
        readCache(r, *cache);
        auto hints = std::make_shared<Hints>();
        readHints(r, *hints);
        r.end();
        TimePoint deadline = hasDeadline ? absolute(received, relative) : NO_DEADLINE;
        later(callId, [=] {
            if (preference < 0 || preference > 2)
                return replyError(callId, invalid(format("invalid execution preference %d", preference)));
            if (priority != 90 && priority != 100 && priority != 110)
                return replyError(callId, invalid(format("invalid priority %d", priority)));
            if (deadline != NO_DEADLINE && now() > deadline)
                return replyError(callId, error(ErrorStatus::MISSED_DEADLINE_PERSISTENT, "the compilation deadline passed"));
            auto ok = validateModel(*d);
            if (!ok) return replyError(callId, ok.error());
            if (usesUndeclaredExtension(d->model))
                return replyError(callId, invalid("the model uses an extension this driver does not support"));
            placeConstants(*d);
            std::shared_ptr<const Model> model(d, &d->model);
            auto p = guard<std::shared_ptr<IPreparedModel>>([&] {
                if (!hints->hints.empty())
                    return device->prepareModelWithConfig(*model, ExecutionPreference(preference), Priority(priority),
                                                          deadline, cache->model, cache->data, cache->token,
                                                          hints->hints, hints->prefixes);
                return device->prepareModel(*model, ExecutionPreference(preference), Priority(priority), deadline,
                                            cache->model, cache->data, cache->token);
            });
            if (p && !p.value()) p = error(ErrorStatus::GENERAL_FAILURE, "the driver prepared no model");
            if (!p) return replyError(callId, p.error());
            Writer w;
            w.u64(addPrepared(p.value(), model));
            reply(REPLY_PREPARED, callId, w);
        });
    }

    void onPrepareFromCache(uint64_t callId, Reader& r, TimePoint received) {
        int64_t relative;
        bool hasDeadline = r.optionalI64(relative);
        auto cache = std::make_shared<CacheFiles>();
        readCache(r, *cache);
        r.end();
        TimePoint deadline = hasDeadline ? absolute(received, relative) : NO_DEADLINE;
        later(callId, [=] {
            if (deadline != NO_DEADLINE && now() > deadline)
                return replyError(callId, error(ErrorStatus::MISSED_DEADLINE_PERSISTENT, "the compilation deadline passed"));
            auto p = guard<std::shared_ptr<IPreparedModel>>([&] {
                return device->prepareModelFromCache(deadline, cache->model, cache->data, cache->token);
            });
            if (p && !p.value()) p = error(ErrorStatus::GENERAL_FAILURE, "the driver prepared no model");
            if (!p) return replyError(callId, p.error());
            Writer w;
            w.u64(addPrepared(p.value(), nullptr));
            reply(REPLY_PREPARED, callId, w);
        });
    }

    static const char* ipcPhase(uint32_t type) {
        if (type == HELLO) return "initialization";
        if (type <= PREPARE_MODEL_FROM_CACHE) return "compilation";
        if (type == BUFFER_COPY_TO || type == BUFFER_COPY_FROM) return "io";
        return type == CONFIGURE_BURST || type == ALLOCATE ? "execution" : "compute";
    }

    static TimePoint absolute(TimePoint received, int64_t relative) {
        if (relative > 0 && received > INT64_MAX - relative) return NO_DEADLINE - 1;
        return received + relative;
    }

    // An execution as decoded: its prepared model, request (with the mappings it holds) and options.
    struct Exec {
        std::shared_ptr<PreparedEntry> prepared;
        DecodedRequest q;
        bool measure = false;
        TimePoint deadline = NO_DEADLINE;
        uint64_t loopTimeout = 0;
        Hints hints;
    };

    void readExecutionTail(Reader& r, Exec& x, TimePoint received) {
        readRequest(r, x.q);
        x.measure = r.boolean();
        int64_t relative;
        if (r.optionalI64(relative)) x.deadline = absolute(received, relative);
        x.loopTimeout = r.u64();
        readHints(r, x.hints);
    }

    template <typename T, typename F>
    static Result<T> guard(F&& call) {
        try {
            return call();
        } catch (const std::bad_alloc&) {
            return error(ErrorStatus::RESOURCE_EXHAUSTED_TRANSIENT, "the driver ran out of memory");
        } catch (const std::exception& e) {
            return error(ErrorStatus::GENERAL_FAILURE, format("the driver threw: %s", e.what()));
        } catch (...) {
            return error(ErrorStatus::GENERAL_FAILURE, "the driver threw an exception");
        }
    }

    // Checks what the driver returned against the request: one shape per output.
    static Result<ExecutionOutput> checked(Result<ExecutionOutput> done, const Request& req) {
        if (done && done.value().first.size() != req.outputs.size())
            return error(ErrorStatus::GENERAL_FAILURE, "the driver returned a shape count other than the output count");
        if (!done && done.error().code == ErrorStatus::NONE)
            return error(ErrorStatus::GENERAL_FAILURE, done.error().message);
        return done;
    }

    Result<ExecutionOutput> run(const Exec& x, const Request& req, const std::shared_ptr<BurstEntry>& burst,
                                const std::vector<int64_t>& tokens) {
        if (x.deadline != NO_DEADLINE && now() > x.deadline)
            return error(ErrorStatus::MISSED_DEADLINE_PERSISTENT, "the execution deadline passed");
        const auto& hints = x.hints.hints;
        auto done = guard<ExecutionOutput>([&] {
            if (!hints.empty())
                return burst ? burst->burst->executeWithConfig(req, x.measure, x.deadline, Duration(x.loopTimeout),
                                                               tokens, hints, x.hints.prefixes)
                             : x.prepared->prepared->executeWithConfig(req, x.measure, x.deadline,
                                                                       Duration(x.loopTimeout), hints, x.hints.prefixes);
            return burst ? burst->burst->execute(req, x.measure, x.deadline, Duration(x.loopTimeout), tokens)
                         : x.prepared->prepared->execute(req, x.measure, x.deadline, Duration(x.loopTimeout));
        });
        return checked(std::move(done), req);
    }

    void replyExecuted(uint64_t callId, const Result<ExecutionOutput>& done) {
        if (!done) return replyError(callId, done.error(), done.error().code == ErrorStatus::OUTPUT_INSUFFICIENT_SIZE);
        Writer w;
        w.shapes(done.value().first);
        w.timing(done.value().second);
        reply(REPLY_EXECUTED, callId, w);
    }

    void onExecute(uint32_t type, uint64_t callId, Reader& r, TimePoint received) {
        auto x = std::make_shared<Exec>();
        x->prepared = findPrepared(r.u64());
        readExecutionTail(r, *x, received);
        std::vector<int32_t> fences;
        bool hasAfter = false;
        int64_t afterFence = 0;
        if (type == EXECUTE_FENCED) {
            fences.resize(r.count(4));
            for (auto& f : fences) {
                f = r.i32();
                if (f != -1 && f != -2 && !((f >= 0 && f <= 8) || f == 10000)) throw Malformed{"unknown fence state"};
            }
            hasAfter = r.optionalI64(afterFence);
        }
        r.end();
        if (!x->prepared->model)
            throw Refused{error(ErrorStatus::GENERAL_FAILURE, "a prepared model from the cache has no model to check requests against")};
        auto req = resolveRequest(*x->prepared->model, x->q);
        if (!req) throw Refused{req.error()};
        auto request = std::make_shared<Request>(std::move(req.value()));
        if (type == EXECUTE_SYNC) {
            later(callId, [=] { replyExecuted(callId, run(*x, *request, nullptr, {})); });
        } else if (type == EXECUTE_ASYNC) {
            reply(REPLY_LAUNCHED, callId, Writer());
            later(callId, [=] {
                auto done = run(*x, *request, nullptr, {});
                Writer w;
                w.i32(done ? 0 : int32_t(done.error().code));
                w.str(done ? "" : done.error().message);
                bool shapes = done || done.error().code == ErrorStatus::OUTPUT_INSUFFICIENT_SIZE;
                w.shapes(!shapes ? std::vector<OutputShape>{} : done ? done.value().first : done.error().outputShapes);
                w.timing(done ? done.value().second : Timing{});
                reply(REPLY_EXECUTION_DONE, callId, w);
            });
        } else {
            // Fenced executions report no output shapes: every output must be fully specified.
            for (const auto& out : request->outputs)
                if (out.lifetime != Request::Argument::LifeTime::NO_VALUE && !out.dimensions.empty() &&
                    !fullySpecified(out.dimensions))
                    throw Refused{invalid("execute_fenced: an output has unspecified dimensions")};
            const auto& sg = x->prepared->model->main;
            for (size_t i = 0; i < request->outputs.size(); i++) {
                const Operand& o = sg.operands[sg.outputIndexes[i]];
                if (!isScalarType(o.type) && request->outputs[i].dimensions.empty())
                    throw Refused{invalid("execute_fenced: an output has unspecified dimensions")};
            }
            for (int32_t f : fences) {
                if (f == -1) throw Refused{invalid("execute_fenced: a null fence")};
                if (f == -2) throw Refused{error(ErrorStatus::MISSED_DEADLINE_PERSISTENT, "deadline passed waiting for a fence")};
                if (f != 0) throw Refused{error(ErrorStatus::GENERAL_FAILURE, "a waited-for fence signalled an error")};
            }
            later(callId, [=] {
                TimePoint fenced = now();
                Exec e = *x;
                if (hasAfter) e.deadline = std::min(e.deadline, absolute(fenced, afterFence));
                if (e.deadline != NO_DEADLINE && now() > e.deadline)
                    return replyError(callId, error(ErrorStatus::MISSED_DEADLINE_PERSISTENT, "the execution deadline passed"));
                auto done = guard<std::pair<Timing, Timing>>([&] {
                    if (!e.hints.hints.empty())
                        return e.prepared->prepared->executeFencedWithConfig(*request, e.measure, e.deadline,
                                                                             Duration(e.loopTimeout), e.hints.hints,
                                                                             e.hints.prefixes);
                    return e.prepared->prepared->executeFenced(*request, e.measure, e.deadline, Duration(e.loopTimeout));
                });
                if (!done) {
                    Error err = done.error();
                    if (err.code == ErrorStatus::NONE || err.code == ErrorStatus::OUTPUT_INSUFFICIENT_SIZE)
                        err.code = ErrorStatus::GENERAL_FAILURE;
                    return replyError(callId, err);
                }
                Writer w;
                w.i32(0);
                w.timing(e.measure ? done.value().first : Timing{});
                w.timing(e.measure ? done.value().second : Timing{});
                reply(REPLY_FENCED_DONE, callId, w);
            });
        }
    }

    void onConfigureBurst(uint64_t callId, Reader& r) {
        auto p = findPrepared(r.u64());
        r.end();
        auto burst = guard<std::shared_ptr<IBurst>>([&] { return p->prepared->configureExecutionBurst(); });
        if (burst && !burst.value()) burst = error(ErrorStatus::GENERAL_FAILURE, "the driver made no burst");
        if (!burst) return replyError(callId, burst.error());
        std::lock_guard<std::mutex> lock(mutex);
        uint64_t h = newHandle();
        bursts[h] = std::make_shared<BurstEntry>(BurstEntry{burst.value(), p, {}});
        Writer w;
        w.u64(h);
        reply(REPLY_BURST, callId, w);
    }

    std::shared_ptr<BurstEntry> findBurst(uint64_t handle) { return find(bursts, handle, "burst"); }

    void onBurstExecute(uint64_t callId, Reader& r, TimePoint received) {
        auto burst = findBurst(r.u64());
        auto x = std::make_shared<Exec>();
        x->prepared = burst->owner;
        readExecutionTail(r, *x, received);
        std::vector<int64_t> tokens(r.count(8));
        for (auto& t : tokens) t = r.i64();
        r.end();
        if (tokens.size() != x->q.pools.size())
            throw Refused{invalid("burst: one memory identifier token per pool needed")};
        if (!x->prepared->model) throw Refused{error(ErrorStatus::GENERAL_FAILURE, "no model to check requests against")};
        auto req = resolveRequest(*x->prepared->model, x->q);
        if (!req) throw Refused{req.error()};
        {
            std::lock_guard<std::mutex> lock(mutex);
            burst->tokens.insert(tokens.begin(), tokens.end());
        }
        auto request = std::make_shared<Request>(std::move(req.value()));
        later(callId, [=] { replyExecuted(callId, run(*x, *request, burst, tokens)); });
    }

    void onBurstRelease(uint64_t callId, Reader& r) {
        auto burst = findBurst(r.u64());
        int64_t token = r.i64();
        r.end();
        bool known;
        {
            std::lock_guard<std::mutex> lock(mutex);
            known = burst->tokens.erase(token) > 0;
        }
        if (known) burst->burst->releaseMemoryResource(token);
        reply(REPLY_OK, callId, Writer());
    }

    void onAllocate(uint64_t callId, Reader& r) {
        BufferDesc desc;
        desc.dimensions = r.u32list();
        std::vector<std::shared_ptr<PreparedEntry>> entries(r.count(8));
        for (auto& e : entries) e = findPrepared(r.u64());
        std::vector<BufferRole> roles[2];
        for (auto& side : roles) {
            side.resize(r.count(12));
            for (auto& role : side) {
                role.modelIndex = r.u32();
                role.ioIndex = r.u32();
                role.probability = r.f32();
            }
        }
        r.end();
        if (entries.empty()) throw Refused{invalid("ALLOCATE without prepared models")};
        if (roles[0].empty() && roles[1].empty()) throw Refused{invalid("ALLOCATE without roles")};
        for (int side = 0; side < 2; side++)
            for (const auto& role : roles[side]) {
                if (role.modelIndex >= entries.size()) throw Refused{invalid("a role names a prepared model not given")};
                const auto& model = entries[role.modelIndex]->model;
                if (model) {
                    size_t n = side == 0 ? model->main.inputIndexes.size() : model->main.outputIndexes.size();
                    if (role.ioIndex >= n) throw Refused{invalid("a role names an input or output the model lacks")};
                }
                if (!(role.probability > 0.0f && role.probability <= 1.0f))
                    throw Refused{invalid("a role's probability is outside (0, 1]")};
            }
        std::vector<std::shared_ptr<IPreparedModel>> models;
        for (const auto& e : entries) models.push_back(e->prepared);
        auto buffer = guard<std::shared_ptr<IBuffer>>([&] { return device->allocate(desc, models, roles[0], roles[1]); });
        if (buffer && !buffer.value()) buffer = error(ErrorStatus::GENERAL_FAILURE, "the driver allocated no buffer");
        if (!buffer) return replyError(callId, buffer.error());
        std::lock_guard<std::mutex> lock(mutex);
        uint64_t h = newHandle();
        auto entry = std::make_shared<BufferEntry>(BufferEntry{buffer.value(), h, desc.dimensions});
        buffers[h] = entry;
        bufferTokens[h] = entry;
        Writer w;
        w.u64(h);
        w.u64(h);
        reply(REPLY_BUFFER, callId, w);
    }

    std::shared_ptr<BufferEntry> findBuffer(uint64_t handle) { return find(buffers, handle, "buffer"); }

    void onBufferCopy(uint32_t type, uint64_t callId, Reader& r) {
        auto b = findBuffer(r.u64());
        RegionRef ref = regionRef(r);
        Dimensions dims;
        if (type == BUFFER_COPY_FROM) dims = r.u32list();
        r.end();
        later(callId, [=] {
            auto done = guard<bool>([&]() -> Result<bool> {
                auto ok = type == BUFFER_COPY_TO ? b->buffer->copyTo(ref.data, ref.length)
                                                 : b->buffer->copyFrom(ref.data, ref.length, dims);
                if (!ok) return ok.error();
                return true;
            });
            if (!done) return replyError(callId, done.error());
            reply(REPLY_OK, callId, Writer());
        });
    }

    void onTraceStart(uint64_t callId, Reader& r) {
        r.end();
        tracing = true;
        Writer w;
        w.i64(now());
        reply(REPLY_TRACE_CLOCK, callId, w);
    }

    void onTraceCollect(uint64_t callId, Reader& r) {
        r.end();
        std::vector<Span> batch;
        std::map<uint64_t, std::string> names;
        bool more;
        {
            std::lock_guard<std::mutex> lock(traceMutex);
            size_t n = std::min(spans.size(), MAX_SPANS_PER_REPLY);
            batch.assign(spans.begin(), spans.begin() + long(n));
            spans.erase(spans.begin(), spans.begin() + long(n));
            more = !spans.empty();
            names = threadNames;
        }
        Writer w;
        w.u32(uint32_t(getpid()));
        std::string process = "nnts-driver " + device->getName();
        w.str(process.substr(0, MAX_SPAN_NAME));
        w.u32(uint32_t(names.size()));
        for (const auto& t : names) {
            w.u64(t.first);
            w.str(t.second.substr(0, MAX_SPAN_NAME));
        }
        w.u32(uint32_t(batch.size()));
        for (const auto& s : batch) {
            w.str(s.name);
            w.str(s.phase);
            w.str(s.layer);
            w.i64(s.start);
            w.i64(s.duration);
            w.u64(s.tid);
        }
        w.u8(more);
        reply(REPLY_TRACE_SPANS, callId, w);
    }

    void onRegionAdd(Reader& r) {
        uint64_t id = r.u64(), size = r.u64();
        std::string path = r.str();
        r.end();
        std::shared_ptr<Mapping> m;
        if (path.find('\0') == std::string::npos) m = opener(path, size);
        if (!m) std::fprintf(stderr, "nnts-driver: region %llu (%s) could not be mapped\n", (unsigned long long)id, path.c_str());
        std::lock_guard<std::mutex> lock(mutex);
        regions[id] = m;  // an id given again names the new file
    }

    void onRegionRemove(Reader& r) {
        uint64_t id = r.u64();
        r.end();
        std::lock_guard<std::mutex> lock(mutex);
        regions.erase(id);  // unmapped when the last execution using it ends
    }

    void onRelease(Reader& r) {
        uint64_t h = r.u64();
        r.end();
        std::lock_guard<std::mutex> lock(mutex);
        prepared.erase(h);
        bursts.erase(h);
        if (buffers.erase(h)) bufferTokens.erase(h);
    }

    void handle(uint32_t type, uint64_t callId, const uint8_t* body, size_t size) {
        TimePoint received = now();
        Reader r(body, size);
        currentType = type;
        setCurrentMessage(messageName(type));
        try {
            switch (type) {
                case HELLO: onHello(callId, r); break;
                case GET_SUPPORTED_OPERATIONS: onSupported(callId, r); break;
                case PREPARE_MODEL: onPrepare(callId, r, received); break;
                case PREPARE_MODEL_FROM_CACHE: onPrepareFromCache(callId, r, received); break;
                case EXECUTE_SYNC: case EXECUTE_ASYNC: case EXECUTE_FENCED: onExecute(type, callId, r, received); break;
                case CONFIGURE_BURST: onConfigureBurst(callId, r); break;
                case BURST_EXECUTE: onBurstExecute(callId, r, received); break;
                case BURST_RELEASE_MEMORY: onBurstRelease(callId, r); break;
                case ALLOCATE: onAllocate(callId, r); break;
                case BUFFER_COPY_TO: case BUFFER_COPY_FROM: onBufferCopy(type, callId, r); break;
                case TRACE_START: onTraceStart(callId, r); break;
                case TRACE_COLLECT: onTraceCollect(callId, r); break;
                case REGION_ADD: onRegionAdd(r); break;
                case REGION_REMOVE: onRegionRemove(r); break;
                case RELEASE: onRelease(r); break;
                default: replyError(callId, invalid(format("unknown message type %u", type)));
            }
        } catch (const Malformed& m) {
            if (type < REGION_ADD) replyError(callId, invalid("malformed message: " + m.why));
        } catch (const Refused& e) {
            if (type < REGION_ADD) replyError(callId, e.error);
        } catch (const std::bad_alloc&) {
            if (type < REGION_ADD)
                replyError(callId, error(ErrorStatus::RESOURCE_EXHAUSTED_TRANSIENT, "out of memory decoding the message"));
        } catch (const std::exception& e) {  // a driver's getter that threw
            if (type < REGION_ADD) replyError(callId, error(ErrorStatus::GENERAL_FAILURE, e.what()));
        }
        setCurrentMessage(nullptr);
    }

    void finish() {
        waitIdle();
        std::lock_guard<std::mutex> lock(mutex);
        bursts.clear();
        buffers.clear();
        bufferTokens.clear();
        prepared.clear();
        regions.clear();
    }
};

Server::Server(std::shared_ptr<IDevice> device, Output& out, WorkerPool& pool, RegionOpener opener)
    : c_(new Connection(std::move(device), out, pool, std::move(opener))) {
    nameThread("main");
}
Server::~Server() { c_->finish(); }
void Server::handle(uint32_t type, uint64_t callId, const uint8_t* body, size_t size) { c_->handle(type, callId, body, size); }
void Server::finish() { c_->finish(); }
bool Server::waitIdleFor(int64_t milliseconds) { return c_->waitIdleFor(milliseconds); }

}  // namespace sdk
}  // namespace nnts
