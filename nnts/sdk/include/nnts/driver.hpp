// nnts-driver: serve an NNAPI driver written in C++ to the nnts suite.
//
// The author's side mirrors AOSP's canonical C++ interface (nnapi/IDevice.h, IPreparedModel.h,
// IBurst.h, IBuffer.h, Types.h): a driver implements IDevice and IPreparedModel (IBurst and
// IBuffer where it has them) over plain C++ types of the same names and fields. The SDK carries
// the transport (docs/remote-protocol.md): framing, shared memory, handles, bursts, fences,
// asynchronous replies, deadlines, a worker pool, trace spans. It validates every model and
// request structurally before the driver sees it, so a driver receives only well-formed ones.
//
//   int main(int argc, char** argv) { return nnts::serve(std::make_shared<MyDevice>(), argc, argv); }
//
// Build: c++ -std=c++17 $(nnts sdk --cflags) my_driver.cpp $(nnts sdk --sources) -lpthread
#ifndef NNTS_DRIVER_HPP
#define NNTS_DRIVER_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nnts {

// ---- Types.h ---------------------------------------------------------------------------------

enum class ErrorStatus : int32_t {
    NONE = 0,
    DEVICE_UNAVAILABLE = 1,
    GENERAL_FAILURE = 2,
    OUTPUT_INSUFFICIENT_SIZE = 3,
    INVALID_ARGUMENT = 4,
    MISSED_DEADLINE_TRANSIENT = 5,
    MISSED_DEADLINE_PERSISTENT = 6,
    RESOURCE_EXHAUSTED_TRANSIENT = 7,
    RESOURCE_EXHAUSTED_PERSISTENT = 8,
    DEAD_OBJECT = 10000,
};

enum class OperandType : int32_t {
    FLOAT32 = 0, INT32 = 1, UINT32 = 2, TENSOR_FLOAT32 = 3, TENSOR_INT32 = 4, TENSOR_QUANT8_ASYMM = 5,
    BOOL = 6, TENSOR_QUANT16_SYMM = 7, TENSOR_FLOAT16 = 8, TENSOR_BOOL8 = 9, FLOAT16 = 10,
    TENSOR_QUANT8_SYMM_PER_CHANNEL = 11, TENSOR_QUANT16_ASYMM = 12, TENSOR_QUANT8_SYMM = 13,
    TENSOR_QUANT8_ASYMM_SIGNED = 14, SUBGRAPH = 15,
};

// NNAPI's operation codes are 0..105; an extension operation has its prefix in the high 16 bits.
enum class OperationType : int32_t { ADD = 0, MUL = 18 };

enum class DeviceType : int32_t { UNKNOWN = 0, OTHER = 1, CPU = 2, GPU = 3, ACCELERATOR = 4 };
enum class ExecutionPreference : int32_t { LOW_POWER = 0, FAST_SINGLE_ANSWER = 1, SUSTAINED_SPEED = 2 };
enum class Priority : int32_t { LOW = 90, MEDIUM = 100, HIGH = 110 };

using Dimensions = std::vector<uint32_t>;
using Duration = int64_t;   // nanoseconds
using TimePoint = int64_t;  // CLOCK_MONOTONIC nanoseconds; NO_DEADLINE: none
constexpr TimePoint NO_DEADLINE = INT64_MAX;
constexpr uint32_t MAX_EXTENSION_PREFIX = 0xFFFF;

// Where an operand's value or an argument's bytes are. The SDK resolves every location to a
// pointer into memory it owns or has mapped: `pointer` with `length` bytes is what to read or write.
struct DataLocation {
    void* pointer = nullptr;
    uint32_t poolIndex = 0;
    uint32_t offset = 0;
    uint32_t length = 0;
};

struct Operand {
    enum class LifeTime : int32_t {
        TEMPORARY_VARIABLE = 0, SUBGRAPH_INPUT = 1, SUBGRAPH_OUTPUT = 2, CONSTANT_COPY = 3,
        CONSTANT_REFERENCE = 4, NO_VALUE = 5, SUBGRAPH = 6, POINTER = 7,
    };
    struct SymmPerChannelQuantParams {
        std::vector<float> scales;
        uint32_t channelDim = 0;
    };
    // OperandType or an extension's type (prefix << 16 | type within the extension).
    int32_t type = 0;
    Dimensions dimensions;
    float scale = 0;
    int32_t zeroPoint = 0;
    LifeTime lifetime = LifeTime::TEMPORARY_VARIABLE;
    // Constants: pointer/length into Model::operandValues or a Model pool. SUBGRAPH: offset is
    // the index into Model::referenced.
    DataLocation location;
    bool hasChannelQuant = false;
    SymmPerChannelQuantParams channelQuant;
    bool hasExtensionData = false;
    std::vector<uint8_t> extensionData;
};

struct Operation {
    int32_t type = 0;
    std::vector<uint32_t> inputs;
    std::vector<uint32_t> outputs;
};

struct Model {
    struct Subgraph {
        std::vector<Operand> operands;
        std::vector<Operation> operations;
        std::vector<uint32_t> inputIndexes;
        std::vector<uint32_t> outputIndexes;
    };
    struct ExtensionNameAndPrefix {
        std::string name;
        uint16_t prefix = 0;
    };
    Subgraph main;
    std::vector<Subgraph> referenced;
    std::vector<uint8_t> operandValues;           // CONSTANT_COPY values
    std::vector<std::vector<uint8_t>> pools;      // CONSTANT_REFERENCE values, one pool each
    bool relaxComputationFloat32toFloat16 = false;
    std::vector<ExtensionNameAndPrefix> extensionNameToPrefix;
};

class IBuffer;

// An AHardwareBuffer's description (AHardwareBuffer_Desc, android/hardware_buffer.h), as a
// request pool that is a hardware buffer carries it (the AIDL HAL's Memory::hardwareBuffer).
struct HardwareBufferDesc {
    static constexpr uint32_t BLOB = 0x21;  // AHARDWAREBUFFER_FORMAT_BLOB: width bytes, used as shared memory
    uint32_t width = 0;
    uint32_t height = 0;
    uint32_t layers = 0;
    uint32_t format = 0;  // AHARDWAREBUFFER_FORMAT_*: anything but BLOB is an image format
    uint64_t usage = 0;   // AHARDWAREBUFFER_USAGE_* flags
    uint32_t stride = 0;  // pixels from one row to the next
};

struct Request {
    struct Argument {
        enum class LifeTime : int32_t { POOL = 0, NO_VALUE = 1, POINTER = 2 };
        LifeTime lifetime = LifeTime::POOL;
        // location.pointer/length: the argument's bytes (for a device-memory pool, null and 0).
        DataLocation location;
        // The model's dimensions merged with the request's: fully specified for every input.
        Dimensions dimensions;
    };
    struct MemoryPool {
        uint8_t* data = nullptr;           // shared memory, size bytes
        uint64_t size = 0;
        std::shared_ptr<IBuffer> buffer;   // device memory (a buffer this driver allocated)
        bool isHardwareBuffer = false;     // data/size are a hardware buffer's bytes, described by:
        HardwareBufferDesc hardwareBuffer;
    };
    std::vector<Argument> inputs;
    std::vector<Argument> outputs;
    std::vector<MemoryPool> pools;
};

struct OutputShape {
    Dimensions dimensions;
    bool isSufficient = true;
};

struct Timing {
    Duration timeOnDevice = -1;   // -1: not measured
    Duration timeInDriver = -1;
};

struct Capabilities {
    struct PerformanceInfo {
        float execTime = 1.0f;
        float powerUsage = 1.0f;
    };
    struct OperandPerformance {
        int32_t type = 0;
        PerformanceInfo info;
    };
    PerformanceInfo relaxedFloat32toFloat16PerformanceScalar;
    PerformanceInfo relaxedFloat32toFloat16PerformanceTensor;
    std::vector<OperandPerformance> operandPerformance;  // the SDK sorts it by type
    PerformanceInfo ifPerformance;
    PerformanceInfo whilePerformance;
};

struct Extension {
    struct OperandTypeInformation {
        uint16_t type = 0;
        bool isTensor = true;
        uint32_t byteSize = 0;
    };
    std::string name;
    std::vector<OperandTypeInformation> operandTypes;
};

// The error of a failed call: status, a message for the suite's report and, for
// OUTPUT_INSUFFICIENT_SIZE, every output's shape.
struct Error {
    ErrorStatus code = ErrorStatus::GENERAL_FAILURE;
    std::string message;
    std::vector<OutputShape> outputShapes;
};

// nn::GeneralResult / nn::ExecutionResult: a value or an Error.
template <typename T>
class Result {
  public:
    Result(T value) : ok_(true), value_(std::move(value)) {}  // NOLINT: implicit, as nn::Result
    Result(Error error) : ok_(false), error_(std::move(error)) {}  // NOLINT
    bool has_value() const { return ok_; }
    explicit operator bool() const { return ok_; }
    T& value() { return value_; }
    const T& value() const { return value_; }
    const Error& error() const { return error_; }

  private:
    bool ok_;
    T value_{};
    Error error_;
};

template <>
class Result<void> {
  public:
    Result() = default;
    Result(Error error) : ok_(false), error_(std::move(error)) {}  // NOLINT
    bool has_value() const { return ok_; }
    explicit operator bool() const { return ok_; }
    const Error& error() const { return error_; }

  private:
    bool ok_ = true;
    Error error_;
};

inline Error error(ErrorStatus code, std::string message) { return Error{code, std::move(message), {}}; }

struct BufferRole {
    uint32_t modelIndex = 0;
    uint32_t ioIndex = 0;
    float probability = 1.0f;
};

struct BufferDesc {
    Dimensions dimensions;
};

using ExecutionOutput = std::pair<std::vector<OutputShape>, Timing>;

// A compilation or execution hint (nn::TokenValuePair, from the NDK's addExtensionAttribute):
// token is an extension's prefix (named by the extensionNameToPrefix passed with it) in the high
// 16 bits and the attribute's code within the extension in the low 16; value is opaque. The SDK
// has checked that no token repeats and every prefix is named; a driver may ignore any hint.
struct TokenValuePair {
    int32_t token = 0;
    std::vector<uint8_t> value;
};
using ExtensionNameToPrefix = std::vector<Model::ExtensionNameAndPrefix>;

// ---- IBurst.h --------------------------------------------------------------------------------

class IBurst {
  public:
    virtual ~IBurst() = default;
    // memoryIdentifierTokens: one per request pool; a token stays the same pool until released.
    virtual Result<ExecutionOutput> execute(const Request& request, bool measure, TimePoint deadline,
                                            Duration loopTimeout,
                                            const std::vector<int64_t>& memoryIdentifierTokens) const = 0;
    // With the execution's hints (canonical IBurst::execute's hints); the default ignores them.
    virtual Result<ExecutionOutput> executeWithConfig(const Request& request, bool measure, TimePoint deadline,
                                                      Duration loopTimeout,
                                                      const std::vector<int64_t>& memoryIdentifierTokens,
                                                      const std::vector<TokenValuePair>& /*hints*/,
                                                      const ExtensionNameToPrefix& /*extensionNameToPrefix*/) const {
        return execute(request, measure, deadline, loopTimeout, memoryIdentifierTokens);
    }
    // The client no longer uses the pool of this token: drop anything cached for it.
    virtual void releaseMemoryResource(int64_t /*memoryIdentifierToken*/) const {}
};

// ---- IPreparedModel.h ------------------------------------------------------------------------

class IPreparedModel {
  public:
    virtual ~IPreparedModel() = default;
    virtual Result<ExecutionOutput> execute(const Request& request, bool measure, TimePoint deadline,
                                            Duration loopTimeout) const = 0;
    // Fenced: the SDK has waited for the fences; every output has fully specified dimensions.
    // The default runs execute(). Returns (timing launched, timing fenced).
    virtual Result<std::pair<Timing, Timing>> executeFenced(const Request& request, bool measure,
                                                            TimePoint deadline, Duration loopTimeout) const;
    // The default burst runs execute() (executeWithConfig() with hints) on this prepared model.
    virtual Result<std::shared_ptr<IBurst>> configureExecutionBurst() const;
    // With the execution's hints (canonical IPreparedModel::execute / executeFenced's hints, the
    // AIDL HAL's executeSynchronouslyWithConfig); the defaults ignore them.
    virtual Result<ExecutionOutput> executeWithConfig(const Request& request, bool measure, TimePoint deadline,
                                                      Duration loopTimeout,
                                                      const std::vector<TokenValuePair>& /*hints*/,
                                                      const ExtensionNameToPrefix& /*extensionNameToPrefix*/) const {
        return execute(request, measure, deadline, loopTimeout);
    }
    virtual Result<std::pair<Timing, Timing>> executeFencedWithConfig(
        const Request& request, bool measure, TimePoint deadline, Duration loopTimeout,
        const std::vector<TokenValuePair>& /*hints*/, const ExtensionNameToPrefix& /*extensionNameToPrefix*/) const {
        return executeFenced(request, measure, deadline, loopTimeout);
    }
};

// ---- IBuffer.h -------------------------------------------------------------------------------

class IBuffer {
  public:
    virtual ~IBuffer() = default;
    virtual Result<void> copyTo(uint8_t* destination, uint64_t length) const = 0;
    virtual Result<void> copyFrom(const uint8_t* source, uint64_t length, const Dimensions& dimensions) const = 0;
};

// ---- IDevice.h -------------------------------------------------------------------------------

class IDevice {
  public:
    virtual ~IDevice() = default;
    virtual const std::string& getName() const = 0;
    virtual const std::string& getVersionString() const = 0;
    virtual int64_t getFeatureLevel() const = 0;   // ANEURALNETWORKS_FEATURE_LEVEL_*, e.g. 1000007
    virtual DeviceType getType() const = 0;
    virtual const std::vector<Extension>& getSupportedExtensions() const = 0;
    virtual const Capabilities& getCapabilities() const = 0;
    // (model cache files, data cache files); (0, 0): no compilation caching.
    virtual std::pair<uint32_t, uint32_t> getNumberOfCacheFilesNeeded() const { return {0, 0}; }

    // One flag per operation of model.main. The model is structurally valid; an operation
    // whose operand types its signature does not accept makes the model invalid: INVALID_ARGUMENT.
    virtual Result<std::vector<bool>> getSupportedOperations(const Model& model) const = 0;
    // The model stays valid (constants included) for the prepared model's whole life. Cache
    // handles are open file descriptors, closed by the SDK after the call.
    virtual Result<std::shared_ptr<IPreparedModel>> prepareModel(
        const Model& model, ExecutionPreference preference, Priority priority, TimePoint deadline,
        const std::vector<int>& modelCache, const std::vector<int>& dataCache,
        const std::vector<uint8_t>& token) const = 0;
    // With the compilation's hints (canonical IDevice::prepareModel's hints, the AIDL HAL's
    // prepareModelWithConfig); the default ignores them.
    virtual Result<std::shared_ptr<IPreparedModel>> prepareModelWithConfig(
        const Model& model, ExecutionPreference preference, Priority priority, TimePoint deadline,
        const std::vector<int>& modelCache, const std::vector<int>& dataCache, const std::vector<uint8_t>& token,
        const std::vector<TokenValuePair>& /*hints*/, const ExtensionNameToPrefix& /*extensionNameToPrefix*/) const {
        return prepareModel(model, preference, priority, deadline, modelCache, dataCache, token);
    }
    virtual Result<std::shared_ptr<IPreparedModel>> prepareModelFromCache(
        TimePoint deadline, const std::vector<int>& modelCache, const std::vector<int>& dataCache,
        const std::vector<uint8_t>& token) const;
    // Whether executions may use a hardware buffer of this description as a pool; a request with
    // one refused fails with GENERAL_FAILURE before execute runs (AOSP's drivers fail to map it).
    // Default: BLOB buffers only (plain shared memory); an image format only where the device
    // consumes it.
    virtual bool acceptsHardwareBuffer(const HardwareBufferDesc& desc) const {
        return desc.format == HardwareBufferDesc::BLOB;
    }
    // preparedModels are this driver's own; roles index into them. Default: no device memory.
    virtual Result<std::shared_ptr<IBuffer>> allocate(const BufferDesc& desc,
                                                      const std::vector<std::shared_ptr<IPreparedModel>>& preparedModels,
                                                      const std::vector<BufferRole>& inputRoles,
                                                      const std::vector<BufferRole>& outputRoles) const;
};

// ---- helpers -------------------------------------------------------------------------------

TimePoint now();                                 // CLOCK_MONOTONIC nanoseconds
uint32_t elementSize(int32_t type);              // bytes per element of a built-in type, 0 if none
bool isExtensionType(int32_t type);
// The bytes of a constant operand of model (CONSTANT_COPY or CONSTANT_REFERENCE).
const uint8_t* constantData(const Model& model, const Operand& operand);
// A span in the client's trace, when it traces: phase "execution", "compilation", ...; layer
// "driver", "cpu", ... (docs/remote-protocol.md section 8). start from now().
void traceSpan(const char* name, const char* phase, const char* layer, TimePoint start);

// Serves device over stdin/stdout, or over a Unix socket with `--socket PATH`; `--workers N`
// executions at once (default 4). Returns the process exit status.
int serve(std::shared_ptr<IDevice> device, int argc, char** argv);

}  // namespace nnts

#endif  // NNTS_DRIVER_HPP
