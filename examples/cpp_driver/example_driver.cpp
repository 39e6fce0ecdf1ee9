// example_driver.cpp: an NNAPI driver in C++17 on the nnts-driver SDK, written against the SDK's
// canonical interface (IDevice, IPreparedModel), as a driver against AOSP's nnapi/IDevice.h is.
//
// It computes ADD and MUL on TENSOR_FLOAT32 (broadcasting, fused activation NONE / RELU / RELU1 /
// RELU6) and the example vendor extension org.nnts.example (docs/extensions.md): TENSOR_QUANT64_ASYMM
// and DEQUANTIZE64. Every other operation is reported unsupported. The SDK validates models and
// requests structurally; the driver checks its operations' signatures and computes them.
//
// Build: c++ -std=c++17 -O2 $(nnts sdk --cflags) example_driver.cpp $(nnts sdk --sources) -lpthread -o example_driver
// Use:   pytest cts vts -n 2 --driver remote:./example_driver
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nnts/driver.hpp"

namespace {

using namespace nnts;

constexpr int32_t TENSOR_FLOAT32 = int32_t(OperandType::TENSOR_FLOAT32);
constexpr const char* EXAMPLE_EXTENSION = "org.nnts.example";
constexpr uint32_t MAX_RANK = 4;  // ADD and MUL take tensors of rank 4 at most

bool isElementwise(int32_t type) { return type == int32_t(OperationType::ADD) || type == int32_t(OperationType::MUL); }

// The full type of `within` in org.nnts.example as this model numbers it; 0 if the model does not use it.
int32_t exampleType(const Model& model, uint16_t within) {
    for (const auto& e : model.extensionNameToPrefix)
        if (e.name == EXAMPLE_EXTENSION) return int32_t(uint32_t(e.prefix) << 16 | within);
    return 0;
}

// TENSOR_QUANT64_ASYMM's extension data: a positive finite float64 scale, then an int64 zero point.
std::optional<std::pair<double, int64_t>> quant64Params(const Operand& o) {
    if (!o.hasExtensionData || o.extensionData.size() != 16) return std::nullopt;
    double scale;
    int64_t zeroPoint;
    std::memcpy(&scale, o.extensionData.data(), 8);
    std::memcpy(&zeroPoint, o.extensionData.data() + 8, 8);
    if (!std::isfinite(scale) || !(scale > 0)) return std::nullopt;
    return std::make_pair(scale, zeroPoint);
}

// ADD/MUL: (T, T, INT32) -> T for the types NNAPI allows; nullopt when the operand types do not fit.
std::optional<int32_t> elementwiseType(const Model::Subgraph& sg, const Operation& op) {
    if (op.inputs.size() != 3 || op.outputs.size() != 1) return std::nullopt;
    int32_t t = sg.operands[op.inputs[0]].type;
    const int32_t allowed[] = {3, 4, 5, 8, 14};  // FLOAT32, INT32, QUANT8_ASYMM, FLOAT16, QUANT8_ASYMM_SIGNED
    if (std::find(std::begin(allowed), std::end(allowed), t) == std::end(allowed)) return std::nullopt;
    if (sg.operands[op.inputs[1]].type != t || sg.operands[op.inputs[2]].type != int32_t(OperandType::INT32) ||
        sg.operands[op.outputs[0]].type != t)
        return std::nullopt;
    return t;
}

bool dimensionsAgree(const Dimensions& a, const Dimensions& b) {
    if (a.empty() || b.empty()) return true;
    if (a.size() != b.size()) return false;
    for (size_t d = 0; d < a.size(); d++)
        if (a[d] && b[d] && a[d] != b[d]) return false;
    return true;
}

bool isDequantize64(const Model& model, const Operation& op) {
    const auto& sg = model.main;
    if (op.type != exampleType(model, 0) || op.inputs.size() != 1 || op.outputs.size() != 1) return false;
    const Operand& in = sg.operands[op.inputs[0]];
    const Operand& out = sg.operands[op.outputs[0]];
    return in.type == exampleType(model, 0) && out.type == TENSOR_FLOAT32 && in.lifetime != Operand::LifeTime::NO_VALUE &&
           quant64Params(in) && dimensionsAgree(in.dimensions, out.dimensions);
}

bool supported(const Model& model, const Operation& op) {
    if (isExtensionType(op.type)) return isDequantize64(model, op);
    return isElementwise(op.type) && elementwiseType(model.main, op) == TENSOR_FLOAT32;
}

// A mistyped ADD or MUL anywhere makes the model invalid, supported or not.
Result<void> checkSignatures(const Model& model) {
    for (size_t s = 0; s <= model.referenced.size(); s++) {
        const auto& sg = s == 0 ? model.main : model.referenced[s - 1];
        for (const auto& op : sg.operations)
            if (isElementwise(op.type) && !elementwiseType(sg, op))
                return error(ErrorStatus::INVALID_ARGUMENT, "ADD or MUL with operand types it does not accept");
    }
    return {};
}

// NNAPI broadcasting: trailing dimensions aligned, each pair equal or one of them 1.
std::optional<Dimensions> broadcast(const Dimensions& a, const Dimensions& b) {
    if (a.size() > MAX_RANK || b.size() > MAX_RANK) return std::nullopt;
    Dimensions out(std::max(a.size(), b.size()));
    for (size_t i = 0; i < out.size(); i++) {
        uint32_t x = i + a.size() >= out.size() ? a[i + a.size() - out.size()] : 1;
        uint32_t y = i + b.size() >= out.size() ? b[i + b.size() - out.size()] : 1;
        if (x != y && x != 1 && y != 1) return std::nullopt;
        out[i] = x == 1 ? y : x;
    }
    return out;
}

bool fitsDeclared(const Dimensions& declared, const Dimensions& actual) {
    return declared.empty() || (declared.size() == actual.size() && dimensionsAgree(declared, actual));
}

bool fullySpecified(const Dimensions& d) {
    return !d.empty() && d.size() <= MAX_RANK && std::all_of(d.begin(), d.end(), [](uint32_t x) { return x != 0; });
}

float activate(float x, int32_t fuse) {
    switch (fuse) {
        case 1: return x < 0.f ? 0.f : x;
        case 2: return x < -1.f ? -1.f : x > 1.f ? 1.f : x;
        case 3: return x < 0.f ? 0.f : x > 6.f ? 6.f : x;
        default: return x;  // NaN passes through, as numpy's clip leaves it
    }
}

struct Tensor {
    Dimensions dimensions;
    std::vector<uint8_t> bytes;
};

size_t elements(const Dimensions& d) {
    size_t n = 1;
    for (uint32_t x : d) n *= x;
    return n;
}

class PreparedModel : public IPreparedModel {
  public:
    explicit PreparedModel(const Model& model) : model_(model) {}

    Result<ExecutionOutput> execute(const Request& request, bool measure, TimePoint deadline, Duration) const override {
        TimePoint started = now();
        const auto& sg = model_.main;
        std::vector<std::optional<Tensor>> values(sg.operands.size());
        for (size_t k = 0; k < sg.operands.size(); k++) {
            const Operand& o = sg.operands[k];
            if (o.location.pointer && o.dimensions.size() <= MAX_RANK) {
                const auto* p = static_cast<const uint8_t*>(o.location.pointer);
                values[k] = Tensor{o.dimensions, std::vector<uint8_t>(p, p + o.location.length)};
            }
        }
        for (size_t i = 0; i < request.inputs.size(); i++) {  // fully specified, exactly sized: the SDK checked
            const auto& a = request.inputs[i];
            if (a.lifetime == Request::Argument::LifeTime::NO_VALUE) continue;
            const auto* p = static_cast<const uint8_t*>(a.location.pointer);
            values[sg.inputIndexes[i]] = Tensor{a.dimensions, std::vector<uint8_t>(p, p + a.location.length)};
        }
        if (now() > deadline) return error(ErrorStatus::MISSED_DEADLINE_PERSISTENT, "the execution deadline passed");
        for (const auto& op : sg.operations) {
            if (now() > deadline) return error(ErrorStatus::MISSED_DEADLINE_TRANSIENT, "the execution deadline passed");
            auto done = isExtensionType(op.type) ? dequantize64(op, values) : elementwise(op, values);
            if (!done) return done.error();
        }
        // Output shapes, then the data only if every output fits (else OUTPUT_INSUFFICIENT_SIZE).
        std::vector<OutputShape> shapes;
        bool allFit = true;
        for (size_t i = 0; i < request.outputs.size(); i++) {
            const Tensor& t = *values[sg.outputIndexes[i]];
            if (!fitsDeclared(request.outputs[i].dimensions, t.dimensions))
                return error(ErrorStatus::GENERAL_FAILURE, "an output's computed shape differs from the requested one");
            shapes.push_back({t.dimensions, request.outputs[i].location.length >= t.bytes.size()});
            allFit = allFit && shapes.back().isSufficient;
        }
        if (!allFit) return Error{ErrorStatus::OUTPUT_INSUFFICIENT_SIZE, "an output buffer is too small", shapes};
        for (size_t i = 0; i < request.outputs.size(); i++) {
            const Tensor& t = *values[sg.outputIndexes[i]];
            std::memcpy(request.outputs[i].location.pointer, t.bytes.data(), t.bytes.size());
        }
        Timing timing;
        if (measure) timing = {now() - started, now() - started};
        traceSpan("example execute", "execution", "driver", started);
        return ExecutionOutput{shapes, timing};
    }

  private:
    Result<void> elementwise(const Operation& op, std::vector<std::optional<Tensor>>& values) const {
        const auto &a = values[op.inputs[0]], &b = values[op.inputs[1]], &f = values[op.inputs[2]];
        if (!a || !b || !f) return error(ErrorStatus::GENERAL_FAILURE, "a required input has no value");
        int32_t fuse;
        std::memcpy(&fuse, f->bytes.data(), 4);
        auto shape = broadcast(a->dimensions, b->dimensions);
        if (!shape || fuse < 0 || fuse > 3 || !fitsDeclared(model_.main.operands[op.outputs[0]].dimensions, *shape))
            return error(ErrorStatus::GENERAL_FAILURE, "the input shapes do not broadcast to the output's");
        size_t n = elements(*shape);
        if (n > (size_t(1) << 28)) return error(ErrorStatus::RESOURCE_EXHAUSTED_TRANSIENT, "a result too large");
        Tensor out{*shape, std::vector<uint8_t>(n * 4)};
        // Strides over a 4-D view of the output; a broadcast dimension has stride 0.
        uint32_t od[MAX_RANK] = {1, 1, 1, 1};
        uint64_t sa[MAX_RANK] = {}, sb[MAX_RANK] = {};
        for (size_t i = 0; i < shape->size(); i++) od[MAX_RANK - shape->size() + i] = (*shape)[i];
        auto strides = [](const Dimensions& d, uint64_t* s) {
            uint64_t stride = 1;
            for (size_t i = d.size(); i-- > 0; stride *= d[i]) s[MAX_RANK - d.size() + i] = d[i] == 1 ? 0 : stride;
        };
        strides(a->dimensions, sa);
        strides(b->dimensions, sb);
        const auto* x = reinterpret_cast<const float*>(a->bytes.data());
        const auto* y = reinterpret_cast<const float*>(b->bytes.data());
        auto* z = reinterpret_cast<float*>(out.bytes.data());
        bool add = op.type == int32_t(OperationType::ADD);
        for (uint32_t i0 = 0; i0 < od[0]; i0++)
            for (uint32_t i1 = 0; i1 < od[1]; i1++)
                for (uint32_t i2 = 0; i2 < od[2]; i2++)
                    for (uint32_t i3 = 0; i3 < od[3]; i3++) {
                        float u = x[i0 * sa[0] + i1 * sa[1] + i2 * sa[2] + i3 * sa[3]];
                        float v = y[i0 * sb[0] + i1 * sb[1] + i2 * sb[2] + i3 * sb[3]];
                        *z++ = activate(add ? u + v : u * v, fuse);
                    }
        values[op.outputs[0]] = std::move(out);
        return {};
    }

    // DEQUANTIZE64: (q - zero point) exactly (128-bit), rounded to double, times the scale, to float.
    Result<void> dequantize64(const Operation& op, std::vector<std::optional<Tensor>>& values) const {
        const auto& q = values[op.inputs[0]];
        auto params = quant64Params(model_.main.operands[op.inputs[0]]);
        if (!q || !params) return error(ErrorStatus::GENERAL_FAILURE, "DEQUANTIZE64: no input or bad parameters");
        size_t n = q->bytes.size() / 8;
        Tensor out{q->dimensions, std::vector<uint8_t>(n * 4)};
        for (size_t i = 0; i < n; i++) {
            int64_t v;
            std::memcpy(&v, q->bytes.data() + 8 * i, 8);
            float r = float(double(__int128(v) - params->second) * params->first);
            std::memcpy(out.bytes.data() + 4 * i, &r, 4);
        }
        values[op.outputs[0]] = std::move(out);
        return {};
    }

    const Model& model_;  // the SDK keeps it for the prepared model's whole life
};

class Device : public IDevice {
  public:
    Device() {
        capabilities_.operandPerformance = {{int32_t(OperandType::INT32), {}}, {TENSOR_FLOAT32, {}}};
        capabilities_.ifPerformance = capabilities_.whilePerformance = {FLT_MAX, FLT_MAX};
        extensions_ = {{EXAMPLE_EXTENSION, {{0, true, 8}}}};
    }
    const std::string& getName() const override { return name_; }
    const std::string& getVersionString() const override { return version_; }
    int64_t getFeatureLevel() const override { return 1000007; }
    DeviceType getType() const override { return DeviceType::CPU; }
    const std::vector<Extension>& getSupportedExtensions() const override { return extensions_; }
    const Capabilities& getCapabilities() const override { return capabilities_; }
    // The kernels read a pool's bytes in place, so a hardware buffer of an image format is taken
    // too when its rows are packed (a device that cannot consume a format returns false).
    bool acceptsHardwareBuffer(const HardwareBufferDesc& desc) const override { return desc.stride == desc.width; }

    Result<std::vector<bool>> getSupportedOperations(const Model& model) const override {
        auto valid = checkSignatures(model);
        if (!valid) return valid.error();
        std::vector<bool> flags;
        for (const auto& op : model.main.operations) flags.push_back(supported(model, op));
        return flags;
    }

    Result<std::shared_ptr<IPreparedModel>> prepareModel(const Model& model, ExecutionPreference, Priority, TimePoint,
                                                         const std::vector<int>&, const std::vector<int>&,
                                                         const std::vector<uint8_t>&) const override {
        TimePoint started = now();
        auto valid = checkSignatures(model);
        if (!valid) return valid.error();
        for (const auto& op : model.main.operations) {
            if (isExtensionType(op.type) && !isDequantize64(model, op))
                return error(ErrorStatus::INVALID_ARGUMENT, "not DEQUANTIZE64 of org.nnts.example with its operands");
            if (!supported(model, op)) return error(ErrorStatus::GENERAL_FAILURE, "an operation is not supported");
        }
        auto shapes = checkStaticShapes(model.main);
        if (!shapes) return shapes.error();
        traceSpan("example prepareModel", "compilation", "driver", started);
        return std::shared_ptr<IPreparedModel>(std::make_shared<PreparedModel>(model));
    }

  private:
    // What compilation can check: fused activations, and the shapes the model fixes.
    static Result<void> checkStaticShapes(const Model::Subgraph& sg) {
        std::vector<std::optional<Dimensions>> shape(sg.operands.size());
        for (size_t k = 0; k < sg.operands.size(); k++)
            if (fullySpecified(sg.operands[k].dimensions)) shape[k] = sg.operands[k].dimensions;
        for (const auto& op : sg.operations) {
            const auto& in = op.inputs;
            std::optional<Dimensions> out = shape[in[0]];
            if (!isExtensionType(op.type)) {
                const Operand& fuse = sg.operands[in[2]];
                int32_t code = 0;
                if (fuse.location.pointer) std::memcpy(&code, fuse.location.pointer, 4);
                if (sg.operands[in[0]].dimensions.size() > MAX_RANK || sg.operands[in[1]].dimensions.size() > MAX_RANK ||
                    code < 0 || code > 3)
                    return error(ErrorStatus::INVALID_ARGUMENT, "rank above 4 or a fused activation outside 0..3");
                out = shape[in[0]] && shape[in[1]] ? broadcast(*shape[in[0]], *shape[in[1]]) : std::nullopt;
                if (shape[in[0]] && shape[in[1]] && !out)
                    return error(ErrorStatus::INVALID_ARGUMENT, "the input shapes do not broadcast");
            }
            if (out && !fitsDeclared(sg.operands[op.outputs[0]].dimensions, *out))
                return error(ErrorStatus::INVALID_ARGUMENT, "the output shape differs from the declared one");
            shape[op.outputs[0]] = out;
        }
        return {};
    }

    std::string name_ = "nnts-example-cpp", version_ = "nnts example C++ driver 1.0";
    Capabilities capabilities_;
    std::vector<Extension> extensions_;
};

}  // namespace

int main(int argc, char** argv) { return nnts::serve(std::make_shared<Device>(), argc, argv); }
