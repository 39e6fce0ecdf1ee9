// aosp-cpu-driver: AOSP's own CPU executor (packages/modules/NeuralNetworks, common/CpuExecutor.cpp
// and common/cpu_operations/) served to nnts as a driver on the native SDK (nnts/driver.hpp).
//
// This file is nnts's glue, not AOSP's: it converts the SDK's Model and Request to AOSP's canonical
// nn::Model and nn::Request, validates them with AOSP's nn::validate and validateRequestForModel,
// and runs them with AOSP's CpuExecutor and BuiltinOperationResolver, as AOSP's sample driver does
// (driver/sample/CanonicalDevice.cpp, CanonicalPreparedModel.cpp). `nnts aosp-driver build CHECKOUT
// --out DIR` compiles it against a checkout; nothing of AOSP is in nnts.
//
// Memory: the SDK hands every constant and every request argument as a pointer into memory it owns
// or has mapped, so constants by reference and request arguments become AOSP's POINTER lifetime
// (which CpuExecutor and nn::validate support for the NNAPI compatibility library); no memory pool
// is mapped twice. Operations whose source file did not build in this checkout are listed by the
// build in aosp_unbuilt.inc (operation code, reason): they are reported unsupported, and a model
// that holds one is refused by prepareModel with the reason.
#include <nnts/driver.hpp>

#include <CpuExecutor.h>
#include <LegacyUtils.h>
#include <OperationResolver.h>
#include <nnapi/TypeUtils.h>
#include <nnapi/Types.h>
#include <nnapi/Validation.h>

#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace nn = android::nn;

namespace nnts_aosp {
extern thread_local std::string lastError;  // host_logging.cpp: this thread's LOG(ERROR) messages
}

namespace {

struct Unbuilt {
    int32_t operation;
    const char* reason;
};

// {operation code, "why its file did not build"}, written by the build.
const Unbuilt kUnbuilt[] = {
#include "aosp_unbuilt.inc"
        {-1, nullptr}};

const char* unbuiltReason(int32_t type) {
    for (const Unbuilt& u : kUnbuilt) {
        if (u.reason != nullptr && u.operation == type) return u.reason;
    }
    return nullptr;
}

nn::Operand::LifeTime convertLifetime(nnts::Operand::LifeTime lifetime) {
    using L = nnts::Operand::LifeTime;
    switch (lifetime) {
        case L::TEMPORARY_VARIABLE: return nn::Operand::LifeTime::TEMPORARY_VARIABLE;
        case L::SUBGRAPH_INPUT: return nn::Operand::LifeTime::SUBGRAPH_INPUT;
        case L::SUBGRAPH_OUTPUT: return nn::Operand::LifeTime::SUBGRAPH_OUTPUT;
        case L::CONSTANT_COPY: return nn::Operand::LifeTime::CONSTANT_COPY;
        case L::CONSTANT_REFERENCE: return nn::Operand::LifeTime::POINTER;  // the SDK's bytes, in place
        case L::NO_VALUE: return nn::Operand::LifeTime::NO_VALUE;
        case L::SUBGRAPH: return nn::Operand::LifeTime::SUBGRAPH;
        case L::POINTER: return nn::Operand::LifeTime::POINTER;
    }
    return static_cast<nn::Operand::LifeTime>(lifetime);
}

nn::Operand convertOperand(const nnts::Operand& from, nn::Model::OperandValues* values) {
    nn::Operand to;
    to.type = static_cast<nn::OperandType>(from.type);
    to.dimensions = from.dimensions;
    to.scale = from.scale;
    to.zeroPoint = from.zeroPoint;
    to.lifetime = convertLifetime(from.lifetime);
    switch (to.lifetime) {
        case nn::Operand::LifeTime::CONSTANT_COPY:
            to.location = values->append(static_cast<const uint8_t*>(from.location.pointer), from.location.length);
            break;
        case nn::Operand::LifeTime::POINTER:
            to.location.pointer = static_cast<const void*>(from.location.pointer);
            to.location.length = from.location.length;
            break;
        case nn::Operand::LifeTime::SUBGRAPH:
            to.location.offset = from.location.offset;
            break;
        default:
            break;
    }
    if (from.hasChannelQuant) {
        to.extraParams = nn::Operand::SymmPerChannelQuantParams{.scales = from.channelQuant.scales,
                                                                .channelDim = from.channelQuant.channelDim};
    } else if (from.hasExtensionData) {
        to.extraParams = from.extensionData;
    }
    return to;
}

nn::Model::Subgraph convertSubgraph(const nnts::Model::Subgraph& from, nn::Model::OperandValues* values) {
    nn::Model::Subgraph to;
    to.operands.reserve(from.operands.size());
    for (const nnts::Operand& operand : from.operands) to.operands.push_back(convertOperand(operand, values));
    to.operations.reserve(from.operations.size());
    for (const nnts::Operation& operation : from.operations) {
        to.operations.push_back(nn::Operation{.type = static_cast<nn::OperationType>(operation.type),
                                              .inputs = operation.inputs,
                                              .outputs = operation.outputs});
    }
    to.inputIndexes = from.inputIndexes;
    to.outputIndexes = from.outputIndexes;
    return to;
}

nn::Model convertModel(const nnts::Model& from) {
    nn::Model to;
    to.main = convertSubgraph(from.main, &to.operandValues);
    for (const nnts::Model::Subgraph& subgraph : from.referenced) {
        to.referenced.push_back(convertSubgraph(subgraph, &to.operandValues));
    }
    to.relaxComputationFloat32toFloat16 = from.relaxComputationFloat32toFloat16;
    for (const auto& extension : from.extensionNameToPrefix) {
        to.extensionNameToPrefix.push_back({.name = extension.name, .prefix = extension.prefix});
    }
    return to;
}

// AOSP's POINTER lifetime requires a non-null pointer and a non-zero length; an argument of no
// bytes (a zero-sized tensor, or an output buffer left empty) points here with one byte instead,
// and the execution checks afterwards that no output of no bytes needed any (see execute).
thread_local uint8_t noBytes[1];

nn::Request::Argument convertArgument(const nnts::Request::Argument& from) {
    nn::Request::Argument to;
    to.dimensions = from.dimensions;
    if (from.lifetime == nnts::Request::Argument::LifeTime::NO_VALUE) {
        to.lifetime = nn::Request::Argument::LifeTime::NO_VALUE;
        return to;
    }
    to.lifetime = nn::Request::Argument::LifeTime::POINTER;
    to.location.pointer = from.location.pointer;
    to.location.length = from.location.length;
    if (from.location.length == 0) {
        to.location.pointer = static_cast<void*>(noBytes);
        to.location.length = sizeof(noBytes);
    }
    return to;
}

template <typename T>
std::string text(const T& value) {
    std::ostringstream out;
    out << value;
    return out.str();
}

nnts::ErrorStatus convertStatus(nn::ErrorStatus status) {
    return static_cast<nnts::ErrorStatus>(static_cast<int32_t>(status));
}

std::vector<nnts::OutputShape> convertShapes(const std::vector<nn::OutputShape>& shapes) {
    std::vector<nnts::OutputShape> out;
    out.reserve(shapes.size());
    for (const nn::OutputShape& shape : shapes) out.push_back({shape.dimensions, shape.isSufficient});
    return out;
}

// A prepared model: AOSP's canonical model (its constants by reference point into the SDK's model,
// which outlives this object) run by a fresh CpuExecutor per execution, as the sample driver does.
class PreparedModel : public nnts::IPreparedModel {
  public:
    PreparedModel(nn::Model model, const nn::IOperationResolver* resolver)
        : model_(std::move(model)), resolver_(resolver) {}

    nnts::Result<nnts::ExecutionOutput> execute(const nnts::Request& request, bool measure,
                                                nnts::TimePoint deadline,
                                                nnts::Duration loopTimeout) const override {
        const nnts::TimePoint driverStart = nnts::now();
        nn::Request canonical;
        for (const auto& input : request.inputs) canonical.inputs.push_back(convertArgument(input));
        for (const auto& output : request.outputs) canonical.outputs.push_back(convertArgument(output));
        for (const auto& pool : request.pools) {
            if (pool.buffer) return nnts::error(nnts::ErrorStatus::INVALID_ARGUMENT, "no device memory here");
        }
        if (const auto result = nn::validateRequestForModel(canonical, model_); !result.ok()) {
            return nnts::error(nnts::ErrorStatus::INVALID_ARGUMENT, "Invalid Request: " + result.error());
        }
        nn::CpuExecutor executor(resolver_);
        if (loopTimeout > 0) executor.setLoopTimeout(static_cast<uint64_t>(loopTimeout));
        if (deadline != nnts::NO_DEADLINE) {
            // The SDK's deadline is on CLOCK_MONOTONIC, AOSP's (nn::Clock) on the boot clock.
            executor.setDeadline(nn::Clock::now() + std::chrono::nanoseconds(deadline - nnts::now()));
        }
        nnts_aosp::lastError.clear();
        const nnts::TimePoint deviceStart = nnts::now();
        const int n = executor.run(model_, canonical, {}, {});
        const nnts::TimePoint deviceEnd = nnts::now();
        const nn::ErrorStatus status = nn::convertResultCodeToErrorStatus(n);
        std::vector<nnts::OutputShape> shapes = convertShapes(executor.getOutputShapes());
        bool insufficient = false;
        for (size_t i = 0; status == nn::ErrorStatus::NONE && i < request.outputs.size() && i < shapes.size(); ++i) {
            const auto& output = request.outputs[i];
            if (output.lifetime == nnts::Request::Argument::LifeTime::NO_VALUE || output.location.length != 0) continue;
            const nn::Operand& operand = model_.main.operands[model_.main.outputIndexes[i]];
            if (nn::nonExtensionOperandSizeOfData(operand.type, shapes[i].dimensions) != 0) {
                shapes[i].isSufficient = false;  // it needed bytes and was given none: not the byte lent it
                insufficient = true;
            }
        }
        if (insufficient) {
            return nnts::Error{nnts::ErrorStatus::OUTPUT_INSUFFICIENT_SIZE, "an output of no bytes needs some",
                               std::move(shapes)};
        }
        if (status != nn::ErrorStatus::NONE) {
            std::string message = "CpuExecutor::run returned " + std::to_string(n);
            if (!nnts_aosp::lastError.empty()) message += ": " + nnts_aosp::lastError;
            return nnts::Error{convertStatus(status), std::move(message), std::move(shapes)};
        }
        nnts::Timing timing;
        if (measure) {
            timing.timeOnDevice = deviceEnd - deviceStart;
            timing.timeInDriver = nnts::now() - driverStart;
        }
        return nnts::ExecutionOutput{std::move(shapes), timing};
    }

  private:
    const nn::Model model_;
    const nn::IOperationResolver* resolver_;
};

// Why operation, or an operation of a subgraph it runs (IF's branches, WHILE's condition and
// body, at any depth), cannot run here; nullptr when all of them are built.
const char* firstUnbuilt(const nn::Model& model, const nn::Model::Subgraph& subgraph, const nn::Operation& operation,
                         std::vector<bool>* visited) {
    if (const char* reason = unbuiltReason(static_cast<int32_t>(operation.type))) return reason;
    for (uint32_t input : operation.inputs) {
        const nn::Operand& operand = subgraph.operands[input];
        if (operand.lifetime != nn::Operand::LifeTime::SUBGRAPH) continue;
        const uint32_t index = operand.location.offset;
        if (index >= model.referenced.size() || (*visited)[index]) continue;
        (*visited)[index] = true;
        for (const nn::Operation& inner : model.referenced[index].operations) {
            if (const char* reason = firstUnbuilt(model, model.referenced[index], inner, visited)) return reason;
        }
    }
    return nullptr;
}

class Device : public nnts::IDevice {
  public:
    Device() {
        for (int32_t type = 0; type <= static_cast<int32_t>(nnts::OperandType::TENSOR_QUANT8_ASYMM_SIGNED);
             ++type) {
            capabilities_.operandPerformance.push_back({type, {1.0f, 1.0f}});
        }
    }
    const std::string& getName() const override { return name_; }
    const std::string& getVersionString() const override { return version_; }
    // What AOSP's sample driver reports (kVersionFeatureLevel8).
    int64_t getFeatureLevel() const override { return 1000008; }
    nnts::DeviceType getType() const override { return nnts::DeviceType::CPU; }
    const std::vector<nnts::Extension>& getSupportedExtensions() const override { return extensions_; }
    const nnts::Capabilities& getCapabilities() const override { return capabilities_; }

    nnts::Result<std::vector<bool>> getSupportedOperations(const nnts::Model& model) const override {
        const nn::Model canonical = convertModel(model);
        if (const auto result = nn::validate(canonical); !result.ok()) {
            return nnts::error(nnts::ErrorStatus::INVALID_ARGUMENT, result.error());
        }
        std::vector<bool> supported;
        for (const nn::Operation& operation : canonical.main.operations) {
            std::vector<bool> visited(canonical.referenced.size(), false);
            supported.push_back(!nn::isExtensionOperationType(operation.type) &&
                                operation.type != nn::OperationType::OEM_OPERATION &&
                                firstUnbuilt(canonical, canonical.main, operation, &visited) == nullptr);
        }
        return supported;
    }

    nnts::Result<std::shared_ptr<nnts::IPreparedModel>> prepareModel(
            const nnts::Model& model, nnts::ExecutionPreference, nnts::Priority, nnts::TimePoint,
            const std::vector<int>&, const std::vector<int>&, const std::vector<uint8_t>&) const override {
        nn::Model canonical = convertModel(model);
        if (const auto result = nn::validate(canonical); !result.ok()) {
            return nnts::error(nnts::ErrorStatus::INVALID_ARGUMENT, "Invalid Model: " + result.error());
        }
        for (const nn::Operation& operation : canonical.main.operations) {
            std::vector<bool> visited(canonical.referenced.size(), false);
            if (const char* reason = firstUnbuilt(canonical, canonical.main, operation, &visited)) {
                return nnts::error(nnts::ErrorStatus::GENERAL_FAILURE, std::string("not built: ") + reason);
            }
        }
        return std::shared_ptr<nnts::IPreparedModel>(
                std::make_shared<PreparedModel>(std::move(canonical), nn::BuiltinOperationResolver::get()));
    }

  private:
    const std::string name_ = "aosp-cpu";
    const std::string version_ = "AOSP CpuExecutor (packages/modules/NeuralNetworks) on nnts-driver";
    const std::vector<nnts::Extension> extensions_;
    nnts::Capabilities capabilities_;
};

}  // namespace

int main(int argc, char** argv) {
    return nnts::serve(std::make_shared<Device>(), argc, argv);
}
