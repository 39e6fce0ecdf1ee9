// The C ABI: an nnts_driver (a struct of function pointers) served as an nnts::IDevice. The C
// views of models and requests point into the C++ ones, which outlive every call that sees them.
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "internal.hpp"
#include "nnts/driver.h"

namespace nnts {
namespace {

struct CModel {
    std::vector<std::vector<nnts_operand>> operands;
    std::vector<std::vector<nnts_operation>> operations;
    std::vector<nnts_subgraph> referenced;
    std::vector<nnts_extension_prefix> prefixes;
    nnts_model model{};

    nnts_subgraph view(const Model::Subgraph& sg) {
        operands.emplace_back();
        for (const auto& o : sg.operands) {
            nnts_operand c{};
            c.type = o.type;
            c.rank = uint32_t(o.dimensions.size());
            c.dimensions = o.dimensions.data();
            c.scale = o.scale;
            c.zero_point = o.zeroPoint;
            c.lifetime = int32_t(o.lifetime);
            c.data = o.location.pointer;
            c.length = o.location.pointer ? o.location.length : 0;
            c.subgraph = o.lifetime == Operand::LifeTime::SUBGRAPH ? o.location.offset : 0;
            c.channel_scale_count = o.hasChannelQuant ? uint32_t(o.channelQuant.scales.size()) : 0;
            c.channel_scales = o.channelQuant.scales.data();
            c.channel_dim = o.channelQuant.channelDim;
            c.has_extension_data = o.hasExtensionData;
            c.extension_data = o.extensionData.data();
            c.extension_data_length = uint32_t(o.extensionData.size());
            operands.back().push_back(c);
        }
        operations.emplace_back();
        for (const auto& op : sg.operations)
            operations.back().push_back({op.type, uint32_t(op.inputs.size()), uint32_t(op.outputs.size()),
                                         op.inputs.data(), op.outputs.data()});
        return {uint32_t(sg.operands.size()), uint32_t(sg.operations.size()), uint32_t(sg.inputIndexes.size()),
                uint32_t(sg.outputIndexes.size()), operands.back().data(), operations.back().data(),
                sg.inputIndexes.data(), sg.outputIndexes.data()};
    }

    explicit CModel(const Model& m) {
        operands.reserve(m.referenced.size() + 1);
        operations.reserve(m.referenced.size() + 1);
        model.main = view(m.main);
        for (const auto& sg : m.referenced) referenced.push_back(view(sg));
        for (const auto& e : m.extensionNameToPrefix) prefixes.push_back({e.name.c_str(), e.prefix});
        model.referenced_count = uint32_t(referenced.size());
        model.referenced = referenced.data();
        model.relax_computation_float32_to_float16 = m.relaxComputationFloat32toFloat16;
        model.extension_count = uint32_t(prefixes.size());
        model.extensions = prefixes.data();
    }
};

// Hints as the C ABI passes them: views into the SDK's vectors, valid for the call.
struct CHints {
    std::vector<nnts_hint> hints;
    std::vector<nnts_extension_prefix> extensions;
    CHints(const std::vector<TokenValuePair>& h, const ExtensionNameToPrefix& prefixes) {
        for (const auto& t : h) hints.push_back({t.token, t.value.data(), uint32_t(t.value.size())});
        for (const auto& p : prefixes) extensions.push_back({p.name.c_str(), p.prefix});
    }
    template <typename Options>
    void into(Options& o) const {
        o.hint_count = uint32_t(hints.size());
        o.hints = hints.data();
        o.hint_extension_count = uint32_t(extensions.size());
        o.hint_extensions = extensions.data();
    }
};

nnts_hardware_buffer_desc cDesc(const HardwareBufferDesc& d) {
    return nnts_hardware_buffer_desc{d.width, d.height, d.layers, d.format, d.usage, d.stride};
}

Error cError(int32_t status, const nnts_error& e, const char* call) {
    std::string message = e.message[0] ? std::string(e.message, strnlen(e.message, sizeof e.message))
                                       : std::string(call) + " failed";
    return error(status == NNTS_NONE ? ErrorStatus::GENERAL_FAILURE : ErrorStatus(status), message);
}

class CBuffer : public IBuffer {
  public:
    CBuffer(const nnts_driver* d, void* buffer) : d_(d), buffer_(buffer) {}
    ~CBuffer() override {
        if (d_->release_buffer) d_->release_buffer(d_->context, buffer_);
    }
    void* handle() const { return buffer_; }
    Result<void> copyTo(uint8_t* destination, uint64_t length) const override {
        nnts_error e{};
        int32_t s = d_->buffer_copy_to ? d_->buffer_copy_to(d_->context, buffer_, destination, length, &e)
                                       : nnts_fail(&e, NNTS_GENERAL_FAILURE, "the driver cannot copy device memory");
        if (s != NNTS_NONE) return cError(s, e, "buffer_copy_to");
        return {};
    }
    Result<void> copyFrom(const uint8_t* source, uint64_t length, const Dimensions& dims) const override {
        nnts_error e{};
        int32_t s = d_->buffer_copy_from
                        ? d_->buffer_copy_from(d_->context, buffer_, source, length, uint32_t(dims.size()), dims.data(), &e)
                        : nnts_fail(&e, NNTS_GENERAL_FAILURE, "the driver cannot copy device memory");
        if (s != NNTS_NONE) return cError(s, e, "buffer_copy_from");
        return {};
    }

  private:
    const nnts_driver* d_;
    void* buffer_;
};

class CPreparedModel : public IPreparedModel {
  public:
    CPreparedModel(const nnts_driver* d, void* prepared, std::shared_ptr<CModel> view)
        : d_(d), prepared_(prepared), view_(std::move(view)) {}
    ~CPreparedModel() override {
        if (d_->release_prepared_model) d_->release_prepared_model(d_->context, prepared_);
    }
    void* handle() const { return prepared_; }

    Result<ExecutionOutput> execute(const Request& request, bool measure, TimePoint deadline,
                                    Duration loopTimeout) const override {
        return run(request, measure, deadline, loopTimeout, CHints({}, {}));
    }

    Result<ExecutionOutput> executeWithConfig(const Request& request, bool measure, TimePoint deadline,
                                              Duration loopTimeout, const std::vector<TokenValuePair>& hints,
                                              const ExtensionNameToPrefix& extensionNameToPrefix) const override {
        return run(request, measure, deadline, loopTimeout, CHints(hints, extensionNameToPrefix));
    }

    Result<std::pair<Timing, Timing>> executeFencedWithConfig(
        const Request& request, bool measure, TimePoint deadline, Duration loopTimeout,
        const std::vector<TokenValuePair>& hints, const ExtensionNameToPrefix& extensionNameToPrefix) const override {
        auto done = run(request, measure, deadline, loopTimeout, CHints(hints, extensionNameToPrefix));
        if (!done) return done.error();
        return std::make_pair(done.value().second, done.value().second);
    }

  private:
    Result<ExecutionOutput> run(const Request& request, bool measure, TimePoint deadline, Duration loopTimeout,
                                const CHints& hints) const {
        std::vector<nnts_hardware_buffer_desc> descs;
        for (const auto& p : request.pools)
            descs.push_back(cDesc(p.hardwareBuffer));
        std::vector<nnts_argument> args[2];
        for (int side = 0; side < 2; side++)
            for (const auto& a : side == 0 ? request.inputs : request.outputs) {
                nnts_argument c{};
                c.has_value = a.lifetime != Request::Argument::LifeTime::NO_VALUE;
                c.data = a.location.pointer;
                c.length = a.location.length;
                if (c.has_value && a.lifetime == Request::Argument::LifeTime::POOL && request.pools[a.location.poolIndex].buffer)
                    c.buffer = static_cast<const CBuffer&>(*request.pools[a.location.poolIndex].buffer).handle();
                if (c.has_value && a.lifetime == Request::Argument::LifeTime::POOL &&
                    request.pools[a.location.poolIndex].isHardwareBuffer)
                    c.hardware_buffer = &descs[a.location.poolIndex];
                c.rank = uint32_t(a.dimensions.size());
                c.dimensions = a.dimensions.data();
                args[side].push_back(c);
            }
        nnts_request req{uint32_t(args[0].size()), uint32_t(args[1].size()), args[0].data(), args[1].data()};
        nnts_execution_options options{};
        options.measure = measure;
        options.deadline = deadline;
        options.loop_timeout = uint64_t(loopTimeout);
        hints.into(options);
        std::vector<nnts_output_shape> shapes(args[1].size());
        for (auto& s : shapes) s.is_sufficient = true;
        nnts_timing timing{-1, -1};
        nnts_error e{};
        int32_t s = d_->execute(d_->context, prepared_, &req, &options, shapes.data(), &timing, &e);
        std::vector<OutputShape> out;
        for (const auto& shape : shapes) {
            uint32_t rank = std::min<uint32_t>(shape.rank, NNTS_MAX_RANK);
            out.push_back({Dimensions(shape.dimensions, shape.dimensions + rank), shape.is_sufficient});
        }
        if (s != NNTS_NONE) {
            Error err = cError(s, e, "execute");
            if (s == NNTS_OUTPUT_INSUFFICIENT_SIZE) err.outputShapes = out;
            return err;
        }
        return ExecutionOutput{out, Timing{timing.time_on_device, timing.time_in_driver}};
    }

    const nnts_driver* d_;
    void* prepared_;
    std::shared_ptr<CModel> view_;  // the driver may keep pointers into the model it prepared
};

class CDevice : public IDevice {
  public:
    explicit CDevice(const nnts_driver* d) : d_(d) {
        const nnts_device_info& i = d->info;
        name_ = i.name ? i.name : "";
        version_ = i.version_string ? i.version_string : "";
        auto perf = [](nnts_performance p) { return Capabilities::PerformanceInfo{p.exec_time, p.power_usage}; };
        caps_.relaxedFloat32toFloat16PerformanceScalar = perf(i.relaxed_scalar);
        caps_.relaxedFloat32toFloat16PerformanceTensor = perf(i.relaxed_tensor);
        caps_.ifPerformance = perf(i.if_performance);
        caps_.whilePerformance = perf(i.while_performance);
        for (uint32_t k = 0; k < i.operand_performance_count; k++)
            caps_.operandPerformance.push_back({i.operand_performance[k].type, perf(i.operand_performance[k].performance)});
        for (uint32_t k = 0; k < i.extension_count; k++) {
            Extension x;
            x.name = i.extensions[k].name ? i.extensions[k].name : "";
            for (uint32_t t = 0; t < i.extensions[k].operand_type_count; t++) {
                const auto& ot = i.extensions[k].operand_types[t];
                x.operandTypes.push_back({ot.type, ot.is_tensor, ot.byte_size});
            }
            extensions_.push_back(x);
        }
    }
    const std::string& getName() const override { return name_; }
    const std::string& getVersionString() const override { return version_; }
    int64_t getFeatureLevel() const override { return d_->info.feature_level; }
    DeviceType getType() const override { return DeviceType(d_->info.type); }
    const std::vector<Extension>& getSupportedExtensions() const override { return extensions_; }
    const Capabilities& getCapabilities() const override { return caps_; }
    std::pair<uint32_t, uint32_t> getNumberOfCacheFilesNeeded() const override {
        return {d_->info.model_cache_files, d_->info.data_cache_files};
    }

    Result<std::vector<bool>> getSupportedOperations(const Model& model) const override {
        CModel view(model);
        std::unique_ptr<bool[]> flags(new bool[model.main.operations.size() + 1]());
        nnts_error e{};
        int32_t s = d_->get_supported_operations(d_->context, &view.model, flags.get(), &e);
        if (s != NNTS_NONE) return cError(s, e, "get_supported_operations");
        return std::vector<bool>(flags.get(), flags.get() + model.main.operations.size());
    }

    Result<std::shared_ptr<IPreparedModel>> prepareModel(const Model& model, ExecutionPreference preference,
                                                         Priority priority, TimePoint deadline,
                                                         const std::vector<int>& modelCache,
                                                         const std::vector<int>& dataCache,
                                                         const std::vector<uint8_t>& token) const override {
        return prepareModelWithConfig(model, preference, priority, deadline, modelCache, dataCache, token, {}, {});
    }

    Result<std::shared_ptr<IPreparedModel>> prepareModelWithConfig(
        const Model& model, ExecutionPreference preference, Priority priority, TimePoint deadline,
        const std::vector<int>& modelCache, const std::vector<int>& dataCache, const std::vector<uint8_t>& token,
        const std::vector<TokenValuePair>& hints, const ExtensionNameToPrefix& extensionNameToPrefix) const override {
        auto view = std::make_shared<CModel>(model);
        nnts_prepare_options o = options(deadline, modelCache, dataCache, token);
        CHints c(hints, extensionNameToPrefix);
        c.into(o);
        o.preference = int32_t(preference);
        o.priority = int32_t(priority);
        void* prepared = nullptr;
        nnts_error e{};
        int32_t s = d_->prepare_model(d_->context, &view->model, &o, &prepared, &e);
        if (s != NNTS_NONE) return cError(s, e, "prepare_model");
        return std::shared_ptr<IPreparedModel>(std::make_shared<CPreparedModel>(d_, prepared, view));
    }

    Result<std::shared_ptr<IPreparedModel>> prepareModelFromCache(TimePoint deadline, const std::vector<int>& modelCache,
                                                                  const std::vector<int>& dataCache,
                                                                  const std::vector<uint8_t>& token) const override {
        if (!d_->prepare_model_from_cache) return IDevice::prepareModelFromCache(deadline, modelCache, dataCache, token);
        nnts_prepare_options o = options(deadline, modelCache, dataCache, token);
        void* prepared = nullptr;
        nnts_error e{};
        int32_t s = d_->prepare_model_from_cache(d_->context, &o, &prepared, &e);
        if (s != NNTS_NONE) return cError(s, e, "prepare_model_from_cache");
        return std::shared_ptr<IPreparedModel>(std::make_shared<CPreparedModel>(d_, prepared, nullptr));
    }

    bool acceptsHardwareBuffer(const HardwareBufferDesc& desc) const override {
        if (!d_->accepts_hardware_buffer) return IDevice::acceptsHardwareBuffer(desc);
        nnts_hardware_buffer_desc c = cDesc(desc);
        return d_->accepts_hardware_buffer(d_->context, &c);
    }

    Result<std::shared_ptr<IBuffer>> allocate(const BufferDesc& desc,
                                              const std::vector<std::shared_ptr<IPreparedModel>>& models,
                                              const std::vector<BufferRole>& inputRoles,
                                              const std::vector<BufferRole>& outputRoles) const override {
        if (!d_->allocate) return IDevice::allocate(desc, models, inputRoles, outputRoles);
        std::vector<void*> prepared;
        for (const auto& m : models) prepared.push_back(static_cast<const CPreparedModel&>(*m).handle());
        void* buffer = nullptr;
        nnts_error e{};
        int32_t s = d_->allocate(d_->context, uint32_t(desc.dimensions.size()), desc.dimensions.data(),
                                 uint32_t(prepared.size()), prepared.data(), &buffer, &e);
        if (s != NNTS_NONE) return cError(s, e, "allocate");
        return std::shared_ptr<IBuffer>(std::make_shared<CBuffer>(d_, buffer));
    }

  private:
    static nnts_prepare_options options(TimePoint deadline, const std::vector<int>& modelCache,
                                        const std::vector<int>& dataCache, const std::vector<uint8_t>& token) {
        nnts_prepare_options o{};
        o.deadline = deadline;
        o.model_cache_count = uint32_t(modelCache.size());
        o.model_cache = modelCache.data();
        o.data_cache_count = uint32_t(dataCache.size());
        o.data_cache = dataCache.data();
        o.token = token.empty() ? nullptr : token.data();
        o.token_length = uint32_t(token.size());
        return o;
    }

    const nnts_driver* d_;
    std::string name_, version_;
    Capabilities caps_;
    std::vector<Extension> extensions_;
};

}  // namespace
}  // namespace nnts

extern "C" {

int nnts_serve(const nnts_driver* driver, int argc, char** argv) {
    const char* program = argc > 0 && argv && argv[0] ? argv[0] : "nnts-driver";
    if (!driver || driver->abi_version != NNTS_DRIVER_ABI_VERSION || !driver->get_supported_operations ||
        !driver->prepare_model || !driver->execute) {
        std::fprintf(stderr, "%s: the nnts_driver is incomplete (abi_version %d and get_supported_operations, "
                     "prepare_model and execute are required)\n", program, NNTS_DRIVER_ABI_VERSION);
        return 2;
    }
    return nnts::serve(std::make_shared<nnts::CDevice>(driver), argc, argv);
}

int32_t nnts_fail(nnts_error* err, int32_t status, const char* format, ...) {
    if (err && format) {
        va_list ap;
        va_start(ap, format);
        vsnprintf(err->message, sizeof err->message, format, ap);
        va_end(ap);
    }
    return status;
}

int64_t nnts_now_ns(void) { return nnts::now(); }

uint32_t nnts_element_size(int32_t type) { return nnts::elementSize(type); }

void nnts_trace_span(const char* name, const char* phase, const char* layer, int64_t start) {
    nnts::traceSpan(name, phase, layer, start);
}

}  // extern "C"
