/*
 * nnts-driver, C ABI: serve an NNAPI driver written in C to the nnts suite.
 *
 * A C driver fills an nnts_driver (a struct of function pointers, as NNAPI's Support Library
 * drivers export NnApiSLDriverImpl) and calls nnts_serve(). The SDK (C++17, linked with the
 * driver) speaks the remote-driver protocol (docs/remote-protocol.md), validates every model
 * and request structurally, and calls the driver only with well-formed ones.
 *
 * Build: c++ -std=c++17 $(nnts sdk --cflags) -c $(nnts sdk --sources) && cc $(nnts sdk --cflags)
 *        my_driver.c *.o -lstdc++ -lpthread -lm
 *
 * Every pointer the SDK passes is valid for the call; a model passed to prepare_model stays
 * valid (constants included) until release_prepared_model. Calls may come from several
 * threads at once (executions run on a worker pool): a driver keeps per-call state local.
 */
#ifndef NNTS_DRIVER_H
#define NNTS_DRIVER_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NNTS_DRIVER_ABI_VERSION 1
#define NNTS_MAX_RANK 8 /* the most dimensions an execution's output shape reports */

/* ErrorStatus (NN HAL). */
enum {
    NNTS_NONE = 0, NNTS_DEVICE_UNAVAILABLE = 1, NNTS_GENERAL_FAILURE = 2, NNTS_OUTPUT_INSUFFICIENT_SIZE = 3,
    NNTS_INVALID_ARGUMENT = 4, NNTS_MISSED_DEADLINE_TRANSIENT = 5, NNTS_MISSED_DEADLINE_PERSISTENT = 6,
    NNTS_RESOURCE_EXHAUSTED_TRANSIENT = 7, NNTS_RESOURCE_EXHAUSTED_PERSISTENT = 8,
};

/* Operand lifetimes (OperandLifeTime). */
enum {
    NNTS_TEMPORARY_VARIABLE = 0, NNTS_SUBGRAPH_INPUT = 1, NNTS_SUBGRAPH_OUTPUT = 2, NNTS_CONSTANT_COPY = 3,
    NNTS_CONSTANT_REFERENCE = 4, NNTS_NO_VALUE = 5, NNTS_SUBGRAPH = 6,
};

typedef struct {
    int32_t type; /* OperandType, or an extension's (prefix << 16 | type) */
    uint32_t rank;
    const uint32_t *dimensions; /* 0: unspecified */
    float scale;
    int32_t zero_point;
    int32_t lifetime;
    const void *data; /* a constant's bytes (length of them); NULL otherwise */
    uint32_t length;
    uint32_t subgraph; /* SUBGRAPH lifetime: index into nnts_model.referenced */
    uint32_t channel_scale_count; /* per-channel quantization: 0 when absent */
    const float *channel_scales;
    uint32_t channel_dim;
    bool has_extension_data;
    const uint8_t *extension_data;
    uint32_t extension_data_length;
} nnts_operand;

typedef struct {
    int32_t type;
    uint32_t input_count, output_count;
    const uint32_t *inputs, *outputs;
} nnts_operation;

typedef struct {
    uint32_t operand_count, operation_count, input_count, output_count;
    const nnts_operand *operands;
    const nnts_operation *operations;
    const uint32_t *inputs, *outputs;
} nnts_subgraph;

typedef struct {
    const char *name;
    uint16_t prefix;
} nnts_extension_prefix;

typedef struct {
    nnts_subgraph main;
    uint32_t referenced_count;
    const nnts_subgraph *referenced;
    bool relax_computation_float32_to_float16;
    uint32_t extension_count;
    const nnts_extension_prefix *extensions; /* the model's extension_name_to_prefix */
} nnts_model;

/* An AHardwareBuffer's description (AHardwareBuffer_Desc, android/hardware_buffer.h). */
#define NNTS_HARDWARE_BUFFER_FORMAT_BLOB 0x21 /* plain bytes (width of them); any other format is an image */
typedef struct {
    uint32_t width, height, layers, format;
    uint64_t usage;
    uint32_t stride; /* pixels from one row to the next */
} nnts_hardware_buffer_desc;

typedef struct {
    bool has_value;   /* false: NO_VALUE (an omitted optional input) */
    void *data;       /* the argument's bytes in shared memory: length of them */
    uint64_t length;
    void *buffer;     /* device memory: the driver's buffer (data is NULL) */
    uint32_t rank;    /* the model's dimensions merged with the request's; inputs fully specified */
    const uint32_t *dimensions;
    const nnts_hardware_buffer_desc *hardware_buffer; /* data is in a hardware buffer: its description */
} nnts_argument;

typedef struct {
    uint32_t input_count, output_count;
    const nnts_argument *inputs, *outputs;
} nnts_request;

typedef struct {
    uint32_t rank;
    uint32_t dimensions[NNTS_MAX_RANK];
    bool is_sufficient;
} nnts_output_shape;

typedef struct {
    int64_t time_on_device, time_in_driver; /* nanoseconds; -1: not measured */
} nnts_timing;

/* A compilation or execution hint (from the NDK's addExtensionAttribute): token is an
 * extension's prefix (named in the options' hint_extensions) << 16 | the attribute's code within
 * it; value is opaque. No token repeats and every prefix is named; a driver may ignore hints. */
typedef struct {
    int32_t token;
    const uint8_t *value;
    uint32_t length;
} nnts_hint;

typedef struct {
    bool measure;
    int64_t deadline;      /* nnts_now_ns() clock; INT64_MAX: none */
    uint64_t loop_timeout; /* nanoseconds a WHILE loop may run */
    uint32_t hint_count, hint_extension_count;
    const nnts_hint *hints;
    const nnts_extension_prefix *hint_extensions;
} nnts_execution_options;

typedef struct {
    int32_t preference; /* ANEURALNETWORKS_PREFER_* */
    int32_t priority;   /* ANEURALNETWORKS_PRIORITY_* */
    int64_t deadline;   /* as above */
    uint32_t model_cache_count, data_cache_count;
    const int *model_cache, *data_cache; /* open file descriptors, closed by the SDK */
    const uint8_t *token;                /* NULL: no caching token */
    uint32_t token_length;
    uint32_t hint_count, hint_extension_count; /* the compilation's hints, as an execution's */
    const nnts_hint *hints;
    const nnts_extension_prefix *hint_extensions;
} nnts_prepare_options;

typedef struct {
    char message[256];
} nnts_error;

typedef struct {
    float exec_time, power_usage;
} nnts_performance;

typedef struct {
    int32_t type;
    nnts_performance performance;
} nnts_operand_performance;

typedef struct {
    uint16_t type;
    bool is_tensor;
    uint32_t byte_size;
} nnts_extension_operand_type;

typedef struct {
    const char *name;
    uint32_t operand_type_count;
    const nnts_extension_operand_type *operand_types;
} nnts_extension;

typedef struct {
    const char *name, *version_string;
    int32_t type;          /* DeviceType: 2 CPU, 3 GPU, 4 ACCELERATOR */
    int64_t feature_level; /* ANEURALNETWORKS_FEATURE_LEVEL_* */
    nnts_performance relaxed_scalar, relaxed_tensor, if_performance, while_performance;
    uint32_t operand_performance_count;
    const nnts_operand_performance *operand_performance;
    uint32_t extension_count;
    const nnts_extension *extensions;
    uint32_t model_cache_files, data_cache_files;
} nnts_device_info;

/* Every function returns an ErrorStatus (NNTS_NONE on success) and, on failure, may write a
 * message into err. Optional entries may be NULL: device memory and caching are then declined. */
typedef struct nnts_driver {
    uint32_t abi_version; /* NNTS_DRIVER_ABI_VERSION */
    void *context;        /* passed back to every call */
    nnts_device_info info;
    /* One flag per operation of model->main (the model is structurally valid). */
    int32_t (*get_supported_operations)(void *context, const nnts_model *model, bool *supported, nnts_error *err);
    int32_t (*prepare_model)(void *context, const nnts_model *model, const nnts_prepare_options *options,
                             void **prepared, nnts_error *err);
    void (*release_prepared_model)(void *context, void *prepared);
    /* shapes: one per output, to fill on success and on NNTS_OUTPUT_INSUFFICIENT_SIZE. */
    int32_t (*execute)(void *context, void *prepared, const nnts_request *request,
                       const nnts_execution_options *options, nnts_output_shape *shapes, nnts_timing *timing,
                       nnts_error *err);
    /* Optional. */
    int32_t (*prepare_model_from_cache)(void *context, const nnts_prepare_options *options, void **prepared,
                                        nnts_error *err);
    int32_t (*allocate)(void *context, uint32_t rank, const uint32_t *dimensions, uint32_t prepared_count,
                        void *const *prepared, void **buffer, nnts_error *err);
    int32_t (*buffer_copy_to)(void *context, void *buffer, void *destination, uint64_t length, nnts_error *err);
    int32_t (*buffer_copy_from)(void *context, void *buffer, const void *source, uint64_t length, uint32_t rank,
                                const uint32_t *dimensions, nnts_error *err);
    void (*release_buffer)(void *context, void *buffer);
    /* Whether executions may use a hardware buffer of this description; NULL: BLOB buffers only. */
    bool (*accepts_hardware_buffer)(void *context, const nnts_hardware_buffer_desc *desc);
} nnts_driver;

/* Serves driver over stdin/stdout (or a Unix socket: --socket PATH; --workers N). Returns the
 * process exit status. */
int nnts_serve(const nnts_driver *driver, int argc, char **argv);

/* Writes a printf-style message into err and returns status. */
int32_t nnts_fail(nnts_error *err, int32_t status, const char *format, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;

int64_t nnts_now_ns(void);
uint32_t nnts_element_size(int32_t type); /* bytes per element of a built-in type */
/* A span in the client's trace (when it traces); start from nnts_now_ns(). */
void nnts_trace_span(const char *name, const char *phase, const char *layer, int64_t start);

#ifdef __cplusplus
}
#endif

#endif /* NNTS_DRIVER_H */
