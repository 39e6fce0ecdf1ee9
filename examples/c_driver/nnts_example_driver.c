/*
 * nnts_example_driver.c: an NNAPI driver in C11, served to nnts by the nnts-driver SDK.
 *
 * It computes ADD and MUL on TENSOR_FLOAT32 (broadcasting, fused activation NONE / RELU / RELU1 /
 * RELU6) and the example vendor extension org.nnts.example (docs/extensions.md): its operand
 * type TENSOR_QUANT64_ASYMM and operation DEQUANTIZE64. Every other operation is unsupported.
 * The SDK carries the protocol and validates models and requests structurally; what is left
 * here is what only the driver knows: its operations' signatures and how to compute them.
 *
 * Build: c++ -std=c++17 -O2 $(nnts sdk --cflags) -c $(nnts sdk --sources)
 *        cc -std=c11 -O2 $(nnts sdk --cflags) -c nnts_example_driver.c
 *        c++ -o nnts_example_driver *.o -lpthread -lm
 * Use:   nnts devices --driver remote:./nnts_example_driver
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nnts/driver.h"

enum { T_INT32 = 1, T_TENSOR_FLOAT32 = 3, T_TENSOR_INT32 = 4, T_TENSOR_QUANT8_ASYMM = 5, T_TENSOR_FLOAT16 = 8,
       T_TENSOR_QUANT8_ASYMM_SIGNED = 14 };
enum { OP_ADD = 0, OP_MUL = 18 };
enum { MAX_RANK = 4 }; /* ADD and MUL take tensors of rank 4 at most */
#define EXAMPLE_EXTENSION "org.nnts.example"
enum { EX_TENSOR_QUANT64_ASYMM = 0, EX_DEQUANTIZE64 = 0 }; /* types within the extension */

static bool is_extension(int32_t type) { return ((uint32_t)type >> 16) != 0; }

/* The prefix this model gave org.nnts.example, 0 if none. */
static uint32_t example_prefix(const nnts_model *m)
{
    for (uint32_t i = 0; i < m->extension_count; i++)
        if (strcmp(m->extensions[i].name, EXAMPLE_EXTENSION) == 0)
            return m->extensions[i].prefix;
    return 0;
}

static bool is_example(const nnts_model *m, int32_t type, uint32_t within)
{
    uint32_t prefix = example_prefix(m);
    return prefix != 0 && (uint32_t)type == (prefix << 16 | within);
}

/* A TENSOR_QUANT64_ASYMM's extension data: a positive finite float64 scale, an int64 zero point. */
static bool quant64_params(const nnts_operand *o, double *scale, int64_t *zero_point)
{
    if (!o->has_extension_data || o->extension_data_length != 16)
        return false;
    memcpy(scale, o->extension_data, 8);
    memcpy(zero_point, o->extension_data + 8, 8);
    return isfinite(*scale) && *scale > 0;
}

/* ADD and MUL: (T, T, INT32) -> (T) for the types NNAPI allows. -1: another operation, 0: the
 * operand types do not fit (an invalid model), 1: they do (*type is T). */
static int binary_signature(const nnts_subgraph *sg, const nnts_operation *op, int32_t *type)
{
    if (op->type != OP_ADD && op->type != OP_MUL)
        return -1;
    if (op->input_count != 3 || op->output_count != 1)
        return 0;
    int32_t t = sg->operands[op->inputs[0]].type;
    if (t != T_TENSOR_FLOAT32 && t != T_TENSOR_QUANT8_ASYMM && t != T_TENSOR_FLOAT16 &&
        t != T_TENSOR_QUANT8_ASYMM_SIGNED && t != T_TENSOR_INT32)
        return 0;
    *type = t;
    return sg->operands[op->inputs[1]].type == t && sg->operands[op->inputs[2]].type == T_INT32 &&
           sg->operands[op->outputs[0]].type == t;
}

/* DEQUANTIZE64: a TENSOR_QUANT64_ASYMM with valid parameters -> a TENSOR_FLOAT32 of its shape. */
static bool dequantize64_signature(const nnts_model *m, const nnts_operation *op)
{
    if (!is_example(m, op->type, EX_DEQUANTIZE64) || op->input_count != 1 || op->output_count != 1)
        return false;
    const nnts_operand *in = &m->main.operands[op->inputs[0]], *out = &m->main.operands[op->outputs[0]];
    double scale;
    int64_t zero_point;
    if (!is_example(m, in->type, EX_TENSOR_QUANT64_ASYMM) || out->type != T_TENSOR_FLOAT32 ||
        in->lifetime == NNTS_NO_VALUE || !quant64_params(in, &scale, &zero_point))
        return false;
    if (in->rank && out->rank && in->rank != out->rank)
        return false;
    for (uint32_t d = 0; in->rank && out->rank && d < in->rank; d++)
        if (in->dimensions[d] && out->dimensions[d] && in->dimensions[d] != out->dimensions[d])
            return false;
    return true;
}

/* A mistyped ADD or MUL, in any subgraph, makes the model invalid. */
static int32_t check_signatures(const nnts_model *m, nnts_error *err)
{
    for (uint32_t s = 0; s <= m->referenced_count; s++) {
        const nnts_subgraph *sg = s ? &m->referenced[s - 1] : &m->main;
        for (uint32_t j = 0; j < sg->operation_count; j++) {
            int32_t t;
            if (binary_signature(sg, &sg->operations[j], &t) == 0)
                return nnts_fail(err, NNTS_INVALID_ARGUMENT, "subgraph %u operation %u: %s does not accept these "
                                 "operand types", s, j, sg->operations[j].type == OP_ADD ? "ADD" : "MUL");
        }
    }
    return NNTS_NONE;
}

static bool supported(const nnts_model *m, const nnts_operation *op)
{
    int32_t t = 0;
    return is_extension(op->type) ? dequantize64_signature(m, op) : binary_signature(&m->main, op, &t) == 1 &&
                                                                     t == T_TENSOR_FLOAT32;
}

static int32_t get_supported_operations(void *context, const nnts_model *m, bool *flags, nnts_error *err)
{
    (void)context;
    for (uint32_t j = 0; j < m->main.operation_count; j++)
        flags[j] = supported(m, &m->main.operations[j]);
    return check_signatures(m, err);
}

/* NNAPI broadcasting: align trailing dimensions; each pair equal, or one of them 1. */
static bool broadcast(uint32_t ra, const uint32_t *a, uint32_t rb, const uint32_t *b, nnts_output_shape *out)
{
    if (ra > MAX_RANK || rb > MAX_RANK)
        return false;
    out->rank = ra > rb ? ra : rb;
    for (uint32_t i = 0; i < out->rank; i++) {
        uint32_t x = i + ra >= out->rank ? a[i + ra - out->rank] : 1, y = i + rb >= out->rank ? b[i + rb - out->rank] : 1;
        if (x != y && x != 1 && y != 1)
            return false;
        out->dimensions[i] = x == 1 ? y : x;
    }
    return true;
}

static bool fits_declared(const nnts_operand *o, const nnts_output_shape *s)
{
    if (o->rank && o->rank != s->rank)
        return false;
    for (uint32_t d = 0; o->rank && d < o->rank; d++)
        if (o->dimensions[d] && o->dimensions[d] != s->dimensions[d])
            return false;
    return true;
}

static bool fully_known(const nnts_operand *o)
{
    for (uint32_t d = 0; d < o->rank; d++)
        if (!o->dimensions[d])
            return false;
    return o->rank > 0 && o->rank <= MAX_RANK;
}

/* What can be checked at compilation: fused activations, and the shapes the model fixes. */
static int32_t check_static_shapes(const nnts_subgraph *sg, bool *known, nnts_output_shape *shape, nnts_error *err)
{
    for (uint32_t k = 0; k < sg->operand_count; k++)
        if ((known[k] = fully_known(&sg->operands[k]))) {
            shape[k].rank = sg->operands[k].rank;
            memcpy(shape[k].dimensions, sg->operands[k].dimensions, shape[k].rank * 4);
        }
    for (uint32_t j = 0; j < sg->operation_count; j++) {
        const uint32_t *in = sg->operations[j].inputs, out = sg->operations[j].outputs[0];
        nnts_output_shape s = shape[in[0]];
        int32_t code = 0;
        if (is_extension(sg->operations[j].type)) {
            if (known[in[0]] && !fits_declared(&sg->operands[out], &s))
                return nnts_fail(err, NNTS_INVALID_ARGUMENT, "operation %u: output shape differs from input's", j);
        } else {
            if (sg->operands[in[2]].data)
                memcpy(&code, sg->operands[in[2]].data, 4);
            if (sg->operands[in[0]].rank > MAX_RANK || sg->operands[in[1]].rank > MAX_RANK || code < 0 || code > 3)
                return nnts_fail(err, NNTS_INVALID_ARGUMENT, "operation %u: rank above 4 or fused activation %d", j,
                                 code);
            if (!known[in[0]] || !known[in[1]])
                continue;
            if (!broadcast(shape[in[0]].rank, shape[in[0]].dimensions, shape[in[1]].rank, shape[in[1]].dimensions,
                           &s) || !fits_declared(&sg->operands[out], &s))
                return nnts_fail(err, NNTS_INVALID_ARGUMENT, "operation %u: the shapes do not broadcast", j);
        }
        known[out] = known[in[0]];
        shape[out] = s;
    }
    return NNTS_NONE;
}

static int32_t prepare_model(void *context, const nnts_model *m, const nnts_prepare_options *options, void **prepared,
                             nnts_error *err)
{
    (void)context, (void)options;
    int64_t started = nnts_now_ns();
    const nnts_subgraph *sg = &m->main;
    int32_t status = check_signatures(m, err);
    for (uint32_t j = 0; status == NNTS_NONE && j < sg->operation_count; j++)
        if (is_extension(sg->operations[j].type) && !dequantize64_signature(m, &sg->operations[j]))
            status = nnts_fail(err, NNTS_INVALID_ARGUMENT, "operation %u: not DEQUANTIZE64 with its operands", j);
        else if (!supported(m, &sg->operations[j]))
            status = nnts_fail(err, NNTS_GENERAL_FAILURE, "operation %u (type %d) is not supported", j,
                               sg->operations[j].type);
    bool *known = calloc(sg->operand_count + 1, 1);
    nnts_output_shape *shape = calloc(sg->operand_count + 1, sizeof *shape);
    if (status == NNTS_NONE)
        status = known && shape ? check_static_shapes(sg, known, shape, err)
                                : nnts_fail(err, NNTS_GENERAL_FAILURE, "out of memory");
    free(known);
    free(shape);
    *prepared = (void *)m; /* the SDK keeps the model for the prepared model's life */
    nnts_trace_span("example prepareModel", "compilation", "driver", started);
    return status;
}

/* One operand's value during an execution: float elements (or int64 for QUANT64). */
typedef struct {
    bool present;
    nnts_output_shape shape;
    void *data;
    uint64_t bytes;
} Value;

static float activate(float x, int32_t fuse)
{
    switch (fuse) {
    case 1: return x < 0.f ? 0.f : x;
    case 2: return x < -1.f ? -1.f : x > 1.f ? 1.f : x;
    case 3: return x < 0.f ? 0.f : x > 6.f ? 6.f : x;
    default: return x; /* NaN passes through, as numpy's clip leaves it */
    }
}

static uint64_t count(const nnts_output_shape *s)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < s->rank; d++)
        n *= s->dimensions[d];
    return n;
}

static int32_t run_binary(int32_t type, const Value *a, const Value *b, int32_t fuse, const nnts_operand *declared,
                          Value *out, nnts_error *err)
{
    if (!broadcast(a->shape.rank, a->shape.dimensions, b->shape.rank, b->shape.dimensions, &out->shape) ||
        fuse < 0 || fuse > 3 || !fits_declared(declared, &out->shape))
        return nnts_fail(err, NNTS_GENERAL_FAILURE, "the input shapes do not broadcast to the output's");
    uint64_t n = count(&out->shape);
    if (n > (UINT64_C(1) << 28) || !(out->data = malloc(n * 4 + 4)))
        return nnts_fail(err, NNTS_RESOURCE_EXHAUSTED_TRANSIENT, "a result of %llu elements is too large",
                         (unsigned long long)n);
    out->bytes = n * 4;
    out->present = true;
    /* Row-major over the output with 4-D strides; a broadcast dimension has stride 0. */
    uint32_t od[MAX_RANK] = {1, 1, 1, 1}, r = out->shape.rank;
    uint64_t sa[MAX_RANK] = {0}, sb[MAX_RANK] = {0}, stride = 1;
    for (uint32_t i = 0; i < r; i++)
        od[MAX_RANK - r + i] = out->shape.dimensions[i];
    for (int i = (int)a->shape.rank - 1; i >= 0; stride *= a->shape.dimensions[i], i--)
        sa[MAX_RANK - a->shape.rank + (uint32_t)i] = a->shape.dimensions[i] == 1 ? 0 : stride;
    stride = 1;
    for (int i = (int)b->shape.rank - 1; i >= 0; stride *= b->shape.dimensions[i], i--)
        sb[MAX_RANK - b->shape.rank + (uint32_t)i] = b->shape.dimensions[i] == 1 ? 0 : stride;
    const float *x = a->data, *y = b->data;
    float *z = out->data;
    for (uint32_t i0 = 0; i0 < od[0]; i0++)
        for (uint32_t i1 = 0; i1 < od[1]; i1++)
            for (uint32_t i2 = 0; i2 < od[2]; i2++)
                for (uint32_t i3 = 0; i3 < od[3]; i3++) {
                    float u = x[i0 * sa[0] + i1 * sa[1] + i2 * sa[2] + i3 * sa[3]];
                    float v = y[i0 * sb[0] + i1 * sb[1] + i2 * sb[2] + i3 * sb[3]];
                    *z++ = activate(type == OP_ADD ? u + v : u * v, fuse);
                }
    return NNTS_NONE;
}

/* DEQUANTIZE64: (q - zero point) exactly (128-bit), rounded to double, times the scale, to float. */
static int32_t run_dequantize64(const nnts_operand *in, const Value *q, Value *out, nnts_error *err)
{
    double scale;
    int64_t zero_point;
    if (!q->present || !quant64_params(in, &scale, &zero_point))
        return nnts_fail(err, NNTS_GENERAL_FAILURE, "DEQUANTIZE64: no input or malformed parameters");
    uint64_t n = q->bytes / 8;
    if (!(out->data = malloc(n * 4 + 4)))
        return nnts_fail(err, NNTS_RESOURCE_EXHAUSTED_TRANSIENT, "out of memory");
    out->shape = q->shape;
    out->bytes = n * 4;
    out->present = true;
    for (uint64_t i = 0; i < n; i++) {
        int64_t v;
        memcpy(&v, (const uint8_t *)q->data + 8 * i, 8);
        ((float *)out->data)[i] = (float)((double)((__int128)v - zero_point) * scale);
    }
    return NNTS_NONE;
}

static int32_t compute(const nnts_model *m, const nnts_request *q, const nnts_execution_options *options, Value *val,
                       nnts_output_shape *shapes, nnts_error *err)
{
    const nnts_subgraph *sg = &m->main;
    for (uint32_t k = 0; k < sg->operand_count; k++) {
        const nnts_operand *o = &sg->operands[k];
        if (o->data && o->rank <= MAX_RANK) {
            val[k] = (Value){true, {o->rank, {0}, true}, (void *)o->data, o->length};
            memcpy(val[k].shape.dimensions, o->dimensions, o->rank * 4);
        }
    }
    for (uint32_t i = 0; i < q->input_count; i++) { /* fully specified, of exactly their size: the SDK checked */
        Value *v = &val[sg->inputs[i]];
        if (!q->inputs[i].has_value)
            continue;
        if (q->inputs[i].rank > MAX_RANK)
            return nnts_fail(err, NNTS_GENERAL_FAILURE, "input %u: rank above 4", i);
        *v = (Value){true, {q->inputs[i].rank, {0}, true}, q->inputs[i].data, q->inputs[i].length};
        memcpy(v->shape.dimensions, q->inputs[i].dimensions, q->inputs[i].rank * 4);
    }
    if (nnts_now_ns() > options->deadline)
        return nnts_fail(err, NNTS_MISSED_DEADLINE_PERSISTENT, "the execution deadline passed");
    for (uint32_t j = 0; j < sg->operation_count; j++) {
        const nnts_operation *op = &sg->operations[j];
        const uint32_t *in = op->inputs;
        int32_t s, fuse;
        if (nnts_now_ns() > options->deadline)
            return nnts_fail(err, NNTS_MISSED_DEADLINE_TRANSIENT, "the execution deadline passed");
        if (is_extension(op->type)) {
            s = run_dequantize64(&sg->operands[in[0]], &val[in[0]], &val[op->outputs[0]], err);
        } else if (!val[in[0]].present || !val[in[1]].present || !val[in[2]].present) {
            s = nnts_fail(err, NNTS_GENERAL_FAILURE, "operation %u: a required input has no value", j);
        } else {
            memcpy(&fuse, val[in[2]].data, 4);
            s = run_binary(op->type, &val[in[0]], &val[in[1]], fuse, &sg->operands[op->outputs[0]], &val[op->outputs[0]],
                           err);
        }
        if (s != NNTS_NONE)
            return s;
    }
    /* Output shapes, then the data only if every output fits (else OUTPUT_INSUFFICIENT_SIZE). */
    bool all_fit = true;
    for (uint32_t i = 0; i < q->output_count; i++) {
        const Value *v = &val[sg->outputs[i]];
        const nnts_argument *g = &q->outputs[i];
        shapes[i] = v->shape;
        for (uint32_t d = 0; d < g->rank; d++)
            if (g->rank != v->shape.rank || (g->dimensions[d] && g->dimensions[d] != v->shape.dimensions[d]))
                return nnts_fail(err, NNTS_GENERAL_FAILURE, "output %u: computed shape differs from the requested", i);
        shapes[i].is_sufficient = g->length >= v->bytes;
        all_fit = all_fit && shapes[i].is_sufficient;
    }
    if (!all_fit)
        return nnts_fail(err, NNTS_OUTPUT_INSUFFICIENT_SIZE, "an output buffer is too small");
    for (uint32_t i = 0; i < q->output_count; i++)
        memcpy(q->outputs[i].data, val[sg->outputs[i]].data, val[sg->outputs[i]].bytes);
    return NNTS_NONE;
}

static int32_t execute(void *context, void *prepared, const nnts_request *q, const nnts_execution_options *options,
                       nnts_output_shape *shapes, nnts_timing *timing, nnts_error *err)
{
    (void)context;
    const nnts_model *m = prepared;
    int64_t started = nnts_now_ns();
    Value *val = calloc(m->main.operand_count + 1, sizeof *val);
    if (!val)
        return nnts_fail(err, NNTS_RESOURCE_EXHAUSTED_TRANSIENT, "out of memory");
    int32_t status = compute(m, q, options, val, shapes, err);
    for (uint32_t j = 0; j < m->main.operation_count; j++) /* what the operations allocated */
        free(val[m->main.operations[j].outputs[0]].data);
    free(val);
    if (status == NNTS_NONE && options->measure)
        *timing = (nnts_timing){nnts_now_ns() - started, nnts_now_ns() - started};
    nnts_trace_span("example execute", "execution", "driver", started);
    return status;
}

static void release_prepared_model(void *context, void *prepared) { (void)context, (void)prepared; }

static const nnts_operand_performance PERFORMANCE[] = {{T_INT32, {1, 1}}, {T_TENSOR_FLOAT32, {1, 1}}};
static const nnts_extension_operand_type QUANT64[] = {{EX_TENSOR_QUANT64_ASYMM, true, 8}};
static const nnts_extension EXTENSIONS[] = {{EXAMPLE_EXTENSION, 1, QUANT64}};

int main(int argc, char **argv)
{
    nnts_driver driver = {
        .abi_version = NNTS_DRIVER_ABI_VERSION,
        .info = {.name = "nnts-example-c", .version_string = "nnts example C driver 2.0", .type = 2,
                 .feature_level = 1000007, .relaxed_scalar = {1, 1}, .relaxed_tensor = {1, 1},
                 .if_performance = {FLT_MAX, FLT_MAX}, .while_performance = {FLT_MAX, FLT_MAX},
                 .operand_performance_count = 2, .operand_performance = PERFORMANCE,
                 .extension_count = 1, .extensions = EXTENSIONS},
        .get_supported_operations = get_supported_operations,
        .prepare_model = prepare_model,
        .release_prepared_model = release_prepared_model,
        .execute = execute,
    };
    return nnts_serve(&driver, argc, argv);
}
