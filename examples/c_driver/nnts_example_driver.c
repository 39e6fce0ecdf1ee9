/*
 * nnts_example_driver.c: a minimal NNAPI driver served over the nnts remote-driver protocol
 * (docs/remote-protocol.md), in plain C11 with libc and libm only.
 *
 * It supports ADD and MUL on TENSOR_FLOAT32 (broadcasting, fused activation NONE / RELU /
 * RELU1 / RELU6) and reports every other operation unsupported. It validates models and
 * requests the way a conforming driver must (VTS mutates them on purpose), answers one request
 * at a time, and treats every message as untrusted: each length is checked before it is used.
 *
 * Build: cc -std=c11 -O2 -Wall -Wextra -o nnts_example_driver nnts_example_driver.c -lm
 * Use:   nnts devices --driver remote:./nnts_example_driver
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- protocol constants (section 4 of the specification) ---------------------------------- */

enum {
    HELLO = 1, GET_SUPPORTED_OPERATIONS = 2, PREPARE_MODEL = 3, PREPARE_MODEL_FROM_CACHE = 4,
    EXECUTE_SYNC = 5, EXECUTE_ASYNC = 6, EXECUTE_FENCED = 7, CONFIGURE_BURST = 8, BURST_EXECUTE = 9,
    BURST_RELEASE_MEMORY = 10, ALLOCATE = 11, BUFFER_COPY_TO = 12, BUFFER_COPY_FROM = 13,
    TRACE_START = 14, TRACE_COLLECT = 15, REGION_ADD = 20, REGION_REMOVE = 21, RELEASE = 22,
    REPLY_ERROR = 100, REPLY_DEVICE_INFO = 101, REPLY_SUPPORTED = 102, REPLY_PREPARED = 103, REPLY_EXECUTED = 104,
    REPLY_LAUNCHED = 105, REPLY_EXECUTION_DONE = 106, REPLY_FENCED_DONE = 107, REPLY_BURST = 108, REPLY_OK = 110,
    REPLY_TRACE_CLOCK = 111, REPLY_TRACE_SPANS = 112,
};
#define PROTOCOL_VERSION 2u
#define MAX_REQUEST (12u + (1u << 28))

enum { S_NONE = 0, S_GENERAL_FAILURE = 2, S_OUTPUT_INSUFFICIENT_SIZE = 3, S_INVALID_ARGUMENT = 4,
       S_MISSED_DEADLINE_TRANSIENT = 5, S_MISSED_DEADLINE_PERSISTENT = 6,
       S_RESOURCE_EXHAUSTED_TRANSIENT = 7 };

/* NNAPI enumerations (NeuralNetworks.h). */
enum { T_FLOAT32 = 0, T_INT32 = 1, T_UINT32 = 2, T_TENSOR_FLOAT32 = 3, T_TENSOR_INT32 = 4,
       T_TENSOR_QUANT8_ASYMM = 5, T_BOOL = 6, T_TENSOR_QUANT16_SYMM = 7, T_TENSOR_FLOAT16 = 8,
       T_TENSOR_BOOL8 = 9, T_FLOAT16 = 10, T_TENSOR_QUANT8_SYMM_PER_CHANNEL = 11,
       T_TENSOR_QUANT16_ASYMM = 12, T_TENSOR_QUANT8_SYMM = 13, T_TENSOR_QUANT8_ASYMM_SIGNED = 14,
       T_SUBGRAPH = 15 };
enum { L_TEMPORARY = 0, L_INPUT = 1, L_OUTPUT = 2, L_CONSTANT_COPY = 3, L_CONSTANT_REFERENCE = 4,
       L_NO_VALUE = 5, L_SUBGRAPH = 6 };
enum { OP_ADD = 0, OP_MUL = 18, OP_LAST = 105 };  /* operation codes 0..105 exist */
enum { ARG_POOL = 0, ARG_NO_VALUE = 1, ARG_POINTER = 2 };
enum { V_NONE = 0, V_INLINE = 1, V_REGION = 2, V_SUBGRAPH = 3 };
enum { POOL_REGION = 0, POOL_DEVICE_BUFFER = 1 };
#define FEATURE_LEVEL 1000007  /* what the reference driver reports: NNAPI feature level 7 */
#define DEVICE_TYPE_CPU 2

/* ---- errors: a status and a message, carried back to the client as ERROR ------------------ */

typedef struct {
    int32_t status;
    char msg[240];
} Err;

static bool fail(Err *e, int32_t status, const char *fmt, ...)
{
    va_list ap;
    e->status = status;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return false;
}

/* ---- an arena: everything one message (or one prepared model) allocates, freed at once ----- */

typedef struct Chunk {
    struct Chunk *next;
    max_align_t data[];
} Chunk;
typedef struct {
    Chunk *head;
} Arena;

static void *arena_alloc(Arena *a, uint64_t n)
{
    if (n > SIZE_MAX - sizeof(Chunk))
        return NULL;
    Chunk *c = calloc(1, sizeof(Chunk) + (size_t)n);
    if (!c)
        return NULL;
    c->next = a->head;
    a->head = c;
    return c->data;
}

static void arena_free(Arena *a)
{
    while (a->head) {
        Chunk *next = a->head->next;
        free(a->head);
        a->head = next;
    }
}

/* ---- decoding: every read is bounds-checked; a failed read marks the message malformed ---- */

typedef struct {
    const uint8_t *p;
    size_t n, pos;
    bool bad;
    const char *why;
} Rd;

static bool need(Rd *r, uint64_t k)
{
    if (r->bad || k > r->n - r->pos) {
        if (!r->bad)
            r->why = "message truncated";
        r->bad = true;
        return false;
    }
    return true;
}

static void malformed(Rd *r, const char *why)
{
    if (!r->bad)
        r->why = why;
    r->bad = true;
}

static uint64_t le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint8_t rd_u8(Rd *r) { return need(r, 1) ? r->p[r->pos++] : 0; }

static uint32_t rd_u32(Rd *r)
{
    if (!need(r, 4))
        return 0;
    uint32_t v = (uint32_t)le(r->p + r->pos, 4);
    r->pos += 4;
    return v;
}

static uint64_t rd_u64(Rd *r)
{
    if (!need(r, 8))
        return 0;
    uint64_t v = le(r->p + r->pos, 8);
    r->pos += 8;
    return v;
}

static int32_t rd_i32(Rd *r) { uint32_t u = rd_u32(r); int32_t v; memcpy(&v, &u, 4); return v; }
static int64_t rd_i64(Rd *r) { uint64_t u = rd_u64(r); int64_t v; memcpy(&v, &u, 8); return v; }
static float rd_f32(Rd *r) { uint32_t u = rd_u32(r); float v; memcpy(&v, &u, 4); return v; }

static bool rd_bool(Rd *r)
{
    uint8_t v = rd_u8(r);
    if (v > 1)
        malformed(r, "boolean field other than 0 or 1");
    return v == 1;
}

/* A list length, checked against what is left: no allocation larger than the message itself. */
static uint32_t rd_count(Rd *r, uint32_t min_item_size)
{
    uint32_t n = rd_u32(r);
    if (!r->bad && (uint64_t)n * min_item_size > r->n - r->pos) {
        malformed(r, "list longer than the rest of the message");
        return 0;
    }
    return r->bad ? 0 : n;
}

static const uint8_t *rd_raw(Rd *r, uint32_t len)
{
    if (!need(r, len))
        return NULL;
    const uint8_t *p = r->p + r->pos;
    r->pos += len;
    return p;
}

static const uint8_t *rd_bytes(Rd *r, uint32_t *len)
{
    *len = rd_u32(r);
    const uint8_t *p = rd_raw(r, *len);
    if (!p)
        *len = 0;
    return p;
}

static bool rd_optional_i64(Rd *r, int64_t *v)
{
    bool present = rd_bool(r);
    *v = present ? rd_i64(r) : 0;
    return present;
}

static uint32_t *rd_u32list(Rd *r, Arena *a, uint32_t *n)
{
    *n = rd_count(r, 4);
    uint32_t *v = arena_alloc(a, (uint64_t)*n * 4);
    if (!v) {
        malformed(r, "out of memory");
        *n = 0;
        return NULL;
    }
    for (uint32_t i = 0; i < *n; i++)
        v[i] = rd_u32(r);
    return v;
}

/* ---- encoding replies ---------------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} Wr;

static void put(Wr *w, const void *data, size_t k)
{
    if (w->n + k > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->n + k)
            cap *= 2;
        uint8_t *p = realloc(w->p, cap);
        if (!p) {  /* replies are a few hundred bytes: running out here leaves nothing to do */
            fprintf(stderr, "nnts_example_driver: out of memory building a reply\n");
            exit(3);
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->n, data, k);
    w->n += k;
}

static void w_le(Wr *w, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, (size_t)bytes);
}

static void w_u8(Wr *w, uint8_t v) { put(w, &v, 1); }
static void w_u32(Wr *w, uint32_t v) { w_le(w, v, 4); }
static void w_i32(Wr *w, int32_t v) { w_le(w, (uint32_t)v, 4); }
static void w_u64(Wr *w, uint64_t v) { w_le(w, v, 8); }
static void w_i64(Wr *w, int64_t v) { w_le(w, (uint64_t)v, 8); }
static void w_f32(Wr *w, float v) { uint32_t u; memcpy(&u, &v, 4); w_u32(w, u); }

static void w_str(Wr *w, const char *s)
{
    size_t n = strlen(s);
    w_u32(w, (uint32_t)n);
    put(w, s, n);
}

static int protocol_out = 1;  /* the client's end of the protocol (our original stdout) */

static void write_all(const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = write(protocol_out, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            exit(0);  /* the client went away: nothing left to serve */
        p += k;
        n -= (size_t)k;
    }
}

/* Sends one frame: length, type, call id, body. */
static void send_frame(uint32_t type, uint64_t call_id, const Wr *body)
{
    Wr f = {0};
    w_u32(&f, (uint32_t)(12 + (body ? body->n : 0)));
    w_u32(&f, type);
    w_u64(&f, call_id);
    if (body && body->n)
        put(&f, body->p, body->n);
    write_all(f.p, f.n);
    free(f.p);
}

/* ---- output shapes and timing -------------------------------------------------------------- */

#define MAX_RANK 4  /* ADD and MUL take and produce tensors of rank 4 at most */

typedef struct {
    uint32_t rank;
    uint32_t dims[MAX_RANK];
    bool sufficient;
} Shape;

typedef struct {
    int64_t on_device, in_driver;
} Timing;

static const Timing NO_TIMING = {-1, -1};

static void w_shapes(Wr *w, const Shape *s, uint32_t n)
{
    w_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        w_u32(w, s[i].rank);
        for (uint32_t d = 0; d < s[i].rank; d++)
            w_u32(w, s[i].dims[d]);
        w_u8(w, s[i].sufficient);
    }
}

static void w_timing(Wr *w, Timing t)
{
    w_i64(w, t.on_device);
    w_i64(w, t.in_driver);
}

static void send_error(uint64_t call_id, const Err *e, const Shape *shapes, uint32_t n_shapes)
{
    Wr w = {0};
    w_i32(&w, e->status ? e->status : S_GENERAL_FAILURE);
    w_str(&w, e->msg);
    w_shapes(&w, shapes, n_shapes);
    send_frame(REPLY_ERROR, call_id, &w);
    free(w.p);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- shared-memory regions (section 3) ----------------------------------------------------- */

typedef struct {
    uint64_t id, size;
    uint8_t *base;  /* NULL: the region could not be mapped */
    size_t mapped;
} Region;

static Region *regions;
static size_t n_regions, cap_regions;

static Region *find_region(uint64_t id)
{
    for (size_t i = 0; i < n_regions; i++)
        if (regions[i].id == id)
            return &regions[i];
    return NULL;
}

static void unmap_region(Region *g)
{
    if (g->base)
        munmap(g->base, g->mapped);
    *g = regions[--n_regions];
}

static void region_add(uint64_t id, uint64_t size, const char *path)
{
    Region *g = find_region(id);
    if (g)
        unmap_region(g);  /* an id given again names the new file */
    if (n_regions == cap_regions) {
        size_t cap = cap_regions ? cap_regions * 2 : 16;
        Region *p = realloc(regions, cap * sizeof *p);
        if (!p)
            return;  /* unknown region: requests that use it fail with INVALID_ARGUMENT */
        regions = p;
        cap_regions = cap;
    }
    g = &regions[n_regions++];
    *g = (Region){.id = id, .size = size};
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "nnts_example_driver: region %llu: %s: %s\n", (unsigned long long)id, path,
                strerror(errno));
        return;
    }
    struct stat st;
    /* A file shorter than the region would make reads past its end fault (SIGBUS): refuse it. */
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= size && size < SIZE_MAX) {
        size_t len = size ? (size_t)size : 1;
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            g->base = p;
            g->mapped = len;
        }
    }
    if (!g->base)
        fprintf(stderr, "nnts_example_driver: region %llu (%s) could not be mapped\n",
                (unsigned long long)id, path);
    close(fd);
}

/* Reads a region reference; *out points at its bytes. Fails the request as INVALID_ARGUMENT. */
static bool rd_region_ref(Rd *r, uint8_t **out, uint64_t *len, Err *e)
{
    uint64_t id = rd_u64(r), offset = rd_u64(r), length = rd_u64(r);
    if (r->bad)
        return false;
    Region *g = find_region(id);
    if (!g)
        return fail(e, S_INVALID_ARGUMENT, "unknown region %llu", (unsigned long long)id);
    if (!g->base)
        return fail(e, S_INVALID_ARGUMENT, "region %llu could not be mapped", (unsigned long long)id);
    if (offset > g->size || length > g->size - offset)
        return fail(e, S_INVALID_ARGUMENT, "[%llu, +%llu) outside region %llu of %llu bytes",
                    (unsigned long long)offset, (unsigned long long)length, (unsigned long long)id,
                    (unsigned long long)g->size);
    *out = g->base + offset;
    *len = length;
    return true;
}

/* ---- models -------------------------------------------------------------------------------- */

typedef struct {
    int32_t type, zero_point, lifetime;
    uint32_t rank, *dims;
    float scale;
    uint8_t value_kind;
    const uint8_t *data;  /* a constant's bytes (copied: the model outlives the message) */
    uint64_t length;
    uint32_t inline_offset, subgraph;
    bool has_channel_quant;
    uint32_t n_scales, channel_dim;
    float *scales;
    bool has_extension_data;  /* an extension operand's extra parameters */
    const uint8_t *extension_data;  /* copied: the model outlives the message */
    uint32_t extension_data_length;
} Operand;

typedef struct {
    int32_t type;
    uint32_t n_in, n_out, *in, *out;
} Operation;

typedef struct {
    uint32_t n_operands, n_operations, n_inputs, n_outputs;
    Operand *operands;
    Operation *operations;
    uint32_t *inputs, *outputs;
} Subgraph;

typedef struct {
    Subgraph main;
    uint32_t n_referenced;
    Subgraph *referenced;
    bool relaxed;
    uint32_t n_prefixes;  /* extension_name_to_prefix: the prefixes this model gave extensions */
    uint32_t *prefixes;
    const uint8_t **prefix_names;  /* copied: the model outlives the message */
    uint32_t *prefix_name_lengths;
    uint32_t example_prefix;  /* the prefix of org.nnts.example in this model, 0 if none */
} Model;

/* Vendor extensions: a type's high 16 bits are the extension's prefix (0: a built-in type), given
 * by the model's own mapping. This driver supports the example extension org.nnts.example
 * (docs/extensions.md): operand type 0, TENSOR_QUANT64_ASYMM (int64 elements; extension data:
 * float64 scale and int64 zero point, little-endian), and operation 0, DEQUANTIZE64. */
#define EXAMPLE_EXTENSION "org.nnts.example"
enum { EX_TENSOR_QUANT64_ASYMM = 0, EX_DEQUANTIZE64 = 0 };
static bool is_extension_type(int32_t t)
{
    return ((uint32_t)t >> 16) != 0;
}

static bool prefix_known(const Model *m, int32_t t)
{
    for (uint32_t i = 0; i < m->n_prefixes; i++)
        if (m->prefixes[i] == (uint32_t)t >> 16)
            return true;
    return false;
}

/* Type ``within`` of the example extension, as this model numbers it. */
static bool is_example_type(const Model *m, int32_t t, uint32_t within)
{
    return m->example_prefix != 0 && (uint32_t)t == (m->example_prefix << 16 | within);
}

static bool of_example_extension(const Model *m, int32_t t)
{
    return m->example_prefix != 0 && (uint32_t)t >> 16 == m->example_prefix;
}

/* A TENSOR_QUANT64_ASYMM's extension data: 16 bytes, a positive finite scale then the zero point. */
static bool quant64_params(const Operand *o, double *scale, int64_t *zero_point)
{
    if (!o->has_extension_data || o->extension_data_length != 16)
        return false;
    uint64_t bits = le(o->extension_data, 8);
    memcpy(scale, &bits, 8);
    *zero_point = (int64_t)le(o->extension_data + 8, 8);
    return isfinite(*scale) && *scale > 0;
}

static bool is_scalar_type(int32_t t)
{
    return t == T_FLOAT32 || t == T_INT32 || t == T_UINT32 || t == T_BOOL || t == T_FLOAT16 ||
           t == T_SUBGRAPH;
}

static uint32_t element_size(int32_t t)
{
    switch (t) {
    case T_TENSOR_QUANT8_ASYMM: case T_BOOL: case T_TENSOR_BOOL8: case T_TENSOR_QUANT8_SYMM_PER_CHANNEL:
    case T_TENSOR_QUANT8_SYMM: case T_TENSOR_QUANT8_ASYMM_SIGNED:
        return 1;
    case T_TENSOR_QUANT16_SYMM: case T_TENSOR_FLOAT16: case T_FLOAT16: case T_TENSOR_QUANT16_ASYMM:
        return 2;
    default:
        return 4;
    }
}

/* The smallest encodings, for checking list lengths against what is left of a message. */
#define MIN_OPERAND 23   /* type, dims, scale, zero point, lifetime, value kind, channel flag, data flag */
#define MIN_OPERATION 12
#define MIN_SUBGRAPH 16
#define MIN_ARGUMENT 21
#define MIN_POOL 9

static void read_subgraph(Rd *r, Arena *a, Subgraph *sg, Err *e)
{
    sg->n_operands = rd_count(r, MIN_OPERAND);
    sg->operands = arena_alloc(a, (uint64_t)sg->n_operands * sizeof(Operand));
    if (!sg->operands) {
        sg->n_operands = 0;
        malformed(r, "out of memory");
        return;
    }
    for (uint32_t k = 0; k < sg->n_operands && !r->bad; k++) {
        Operand *o = &sg->operands[k];
        o->type = rd_i32(r);
        o->dims = rd_u32list(r, a, &o->rank);
        o->scale = rd_f32(r);
        o->zero_point = rd_i32(r);
        o->lifetime = rd_i32(r);
        o->value_kind = rd_u8(r);
        if (o->value_kind == V_INLINE) {
            o->inline_offset = rd_u32(r);
            o->length = rd_u32(r);
        } else if (o->value_kind == V_REGION) {
            uint8_t *src;
            if (!rd_region_ref(r, &src, &o->length, e)) {
                if (!r->bad)  /* a bad region: reported through e, decoding stops */
                    malformed(r, e->msg);
                return;
            }
            uint8_t *copy = arena_alloc(a, o->length);
            if (!copy)
                { malformed(r, "out of memory"); return; }
            memcpy(copy, src, o->length);
            o->data = copy;
        } else if (o->value_kind == V_SUBGRAPH) {
            o->subgraph = rd_u32(r);
        } else if (o->value_kind != V_NONE) {
            malformed(r, "unknown operand value kind");
            return;
        }
        o->has_channel_quant = rd_bool(r);
        if (o->has_channel_quant) {
            o->n_scales = rd_count(r, 4);
            o->scales = arena_alloc(a, (uint64_t)o->n_scales * 4);
            if (!o->scales)
                { malformed(r, "out of memory"); return; }
            for (uint32_t i = 0; i < o->n_scales; i++)
                o->scales[i] = rd_f32(r);
            o->channel_dim = rd_u32(r);
        }
        o->has_extension_data = rd_bool(r);
        if (o->has_extension_data) {
            const uint8_t *data = rd_bytes(r, &o->extension_data_length);
            uint8_t *copy = arena_alloc(a, (uint64_t)o->extension_data_length + 1);
            if (!copy)
                { malformed(r, "out of memory"); return; }
            if (data && o->extension_data_length)
                memcpy(copy, data, o->extension_data_length);
            o->extension_data = copy;
        }
    }
    sg->n_operations = rd_count(r, MIN_OPERATION);
    sg->operations = arena_alloc(a, (uint64_t)sg->n_operations * sizeof(Operation));
    if (!sg->operations) {
        sg->n_operations = 0;
        malformed(r, "out of memory");
        return;
    }
    for (uint32_t j = 0; j < sg->n_operations && !r->bad; j++) {
        Operation *op = &sg->operations[j];
        op->type = rd_i32(r);
        op->in = rd_u32list(r, a, &op->n_in);
        op->out = rd_u32list(r, a, &op->n_out);
    }
    sg->inputs = rd_u32list(r, a, &sg->n_inputs);
    sg->outputs = rd_u32list(r, a, &sg->n_outputs);
}

static void resolve_inline(Subgraph *sg, const uint8_t *blob, uint32_t blob_len, Rd *r)
{
    for (uint32_t k = 0; k < sg->n_operands; k++) {
        Operand *o = &sg->operands[k];
        if (o->value_kind != V_INLINE)
            continue;
        if ((uint64_t)o->inline_offset + o->length > blob_len)
            { malformed(r, "inline constant outside the operand values"); return; }
        o->data = blob + o->inline_offset;
    }
}

/* Reads a Model; its constants are copied into the arena. A region failure sets e. */
static void read_model(Rd *r, Arena *a, Model *m, Err *e)
{
    memset(m, 0, sizeof *m);
    read_subgraph(r, a, &m->main, e);
    m->n_referenced = rd_count(r, MIN_SUBGRAPH);
    m->referenced = arena_alloc(a, (uint64_t)m->n_referenced * sizeof(Subgraph));
    if (!m->referenced) {
        m->n_referenced = 0;
        malformed(r, "out of memory");
        return;
    }
    for (uint32_t k = 0; k < m->n_referenced && !r->bad; k++)
        read_subgraph(r, a, &m->referenced[k], e);
    m->relaxed = rd_bool(r);
    uint32_t blob_len;
    const uint8_t *blob = rd_bytes(r, &blob_len);
    if (r->bad)
        return;
    uint8_t *copy = arena_alloc(a, blob_len);
    if (!copy)
        { malformed(r, "out of memory"); return; }
    if (blob_len)
        memcpy(copy, blob, blob_len);
    resolve_inline(&m->main, copy, blob_len, r);
    for (uint32_t k = 0; k < m->n_referenced; k++)
        resolve_inline(&m->referenced[k], copy, blob_len, r);
    m->n_prefixes = rd_count(r, 8);
    m->prefixes = arena_alloc(a, (uint64_t)m->n_prefixes * 4 + 4);
    m->prefix_names = arena_alloc(a, (uint64_t)m->n_prefixes * sizeof(uint8_t *) + sizeof(uint8_t *));
    m->prefix_name_lengths = arena_alloc(a, (uint64_t)m->n_prefixes * 4 + 4);
    if (!m->prefixes || !m->prefix_names || !m->prefix_name_lengths) {
        m->n_prefixes = 0;
        malformed(r, "out of memory");
        return;
    }
    m->example_prefix = 0;
    for (uint32_t i = 0; i < m->n_prefixes && !r->bad; i++) {
        const uint8_t *name = rd_bytes(r, &m->prefix_name_lengths[i]);
        uint8_t *copy = arena_alloc(a, (uint64_t)m->prefix_name_lengths[i] + 1);
        if (!copy)
            { malformed(r, "out of memory"); return; }
        if (name && m->prefix_name_lengths[i])
            memcpy(copy, name, m->prefix_name_lengths[i]);
        m->prefix_names[i] = copy;
        m->prefixes[i] = rd_u32(r);
        if (m->prefix_name_lengths[i] == strlen(EXAMPLE_EXTENSION) &&
            memcmp(copy, EXAMPLE_EXTENSION, strlen(EXAMPLE_EXTENSION)) == 0)
            m->example_prefix = m->prefixes[i];
    }
}

/* ---- model validation (what NNAPI's validation requires of a driver) ----------------------- */

static bool is_constant(int32_t lifetime)
{
    return lifetime == L_CONSTANT_COPY || lifetime == L_CONSTANT_REFERENCE;
}

static bool is_written(int32_t lifetime)
{
    return lifetime == L_TEMPORARY || lifetime == L_OUTPUT;
}

/* The per-type rules of ANeuralNetworksModel_addOperand: NULL if the operand is well formed. */
static const char *operand_type_problem(const Model *m, const Operand *o)
{
    int32_t t = o->type;
    if (is_extension_type(t)) {
        if (!prefix_known(m, t))
            return "an extension type whose prefix the model does not map";
        if (of_example_extension(m, t) && !is_example_type(m, t, EX_TENSOR_QUANT64_ASYMM))
            return "org.nnts.example has no such operand type";
        if (o->scale != 0 || o->zero_point != 0 || o->has_channel_quant)
            return "an extension operand takes scale 0, zero point 0 and no per-channel quantization";
        return NULL;
    }
    if (o->has_extension_data)
        return "extension data on an operand of a built-in type";
    if (t < T_FLOAT32 || t > T_SUBGRAPH)
        return "invalid operand type";
    if (is_scalar_type(t) && o->rank)
        return "a scalar type with dimensions";
    if (!isfinite(o->scale))
        return "scale is not finite";
    switch (t) {
    case T_TENSOR_QUANT8_ASYMM:
        if (!(o->scale > 0) || o->zero_point < 0 || o->zero_point > 255)
            return "TENSOR_QUANT8_ASYMM needs a positive scale and a zero point in [0, 255]";
        break;
    case T_TENSOR_QUANT8_ASYMM_SIGNED:
        if (!(o->scale > 0) || o->zero_point < -128 || o->zero_point > 127)
            return "TENSOR_QUANT8_ASYMM_SIGNED needs a positive scale and a zero point in [-128, 127]";
        break;
    case T_TENSOR_QUANT16_ASYMM:
        if (!(o->scale > 0) || o->zero_point < 0 || o->zero_point > 65535)
            return "TENSOR_QUANT16_ASYMM needs a positive scale and a zero point in [0, 65535]";
        break;
    case T_TENSOR_QUANT8_SYMM: case T_TENSOR_QUANT16_SYMM:
        if (!(o->scale > 0) || o->zero_point != 0)
            return "a symmetric quantized type needs a positive scale and zero point 0";
        break;
    case T_TENSOR_QUANT8_SYMM_PER_CHANNEL:
        if (o->scale != 0 || o->zero_point != 0)
            return "TENSOR_QUANT8_SYMM_PER_CHANNEL takes scale 0 and zero point 0";
        break;
    case T_TENSOR_INT32:
        if (o->scale < 0 || o->zero_point != 0)
            return "TENSOR_INT32 needs a non-negative scale and zero point 0";
        break;
    default:
        if (o->scale != 0 || o->zero_point != 0)
            return "this type takes scale 0 and zero point 0";
    }
    if (o->has_channel_quant) {
        if (t != T_TENSOR_QUANT8_SYMM_PER_CHANNEL)
            return "per-channel quantization on a type without it";
        if (o->channel_dim >= o->rank)
            return "channel dimension out of range";
        if (o->dims[o->channel_dim] != 0 && o->n_scales != o->dims[o->channel_dim])
            return "channel scale count differs from the channel dimension";
        for (uint32_t i = 0; i < o->n_scales; i++)
            if (!(o->scales[i] > 0) || !isfinite(o->scales[i]))
                return "channel scales must be positive";
    } else if (t == T_TENSOR_QUANT8_SYMM_PER_CHANNEL) {
        return "TENSOR_QUANT8_SYMM_PER_CHANNEL without per-channel quantization";
    }
    return NULL;
}

static const char *operand_problem(const Model *m, const Operand *o)
{
    const char *p = operand_type_problem(m, o);
    if (p)
        return p;
    if (o->lifetime < L_TEMPORARY || o->lifetime > L_SUBGRAPH)
        return "invalid lifetime";
    bool has_bytes = o->value_kind == V_INLINE || o->value_kind == V_REGION;
    if (is_constant(o->lifetime)) {
        if (o->type == T_SUBGRAPH)
            return "a SUBGRAPH operand must have SUBGRAPH lifetime";
        if (!has_bytes)
            return "constant without a value";
        uint64_t count = 1;
        for (uint32_t d = 0; d < o->rank; d++) {
            if (o->dims[d] == 0)
                return "constant with unspecified dimensions";
            count *= o->dims[d];
            if (count > UINT64_MAX / 8)
                return "constant too large";
        }
        if (is_example_type(m, o->type, EX_TENSOR_QUANT64_ASYMM) ? o->length != count * 8 :
            !is_extension_type(o->type) && o->length != count * element_size(o->type))
            return "constant's byte length does not match its type and dimensions";
    } else if (o->lifetime == L_SUBGRAPH) {
        if (o->type != T_SUBGRAPH)
            return "SUBGRAPH lifetime on an operand that is not a SUBGRAPH";
        if (o->value_kind != V_SUBGRAPH || o->subgraph >= m->n_referenced)
            return "reference to a subgraph that does not exist";
    } else {
        if (o->value_kind != V_NONE)
            return "a non-constant operand with a value";
        if (o->type == T_SUBGRAPH)
            return "a SUBGRAPH operand must have SUBGRAPH lifetime";
    }
    return NULL;
}

/* ADD and MUL: (T, T, INT32) -> (T) for the types NNAPI allows. -1: another operation (not
 * checked here), 0: the operand types do not fit, 1: they do (*type is T). */
static int binary_signature(const Subgraph *sg, const Operation *op, int32_t *type)
{
    if (op->type != OP_ADD && op->type != OP_MUL)
        return -1;
    if (op->n_in != 3 || op->n_out != 1)
        return 0;
    int32_t t = sg->operands[op->in[0]].type;
    if (t != T_TENSOR_FLOAT32 && t != T_TENSOR_QUANT8_ASYMM && t != T_TENSOR_FLOAT16 &&
        t != T_TENSOR_QUANT8_ASYMM_SIGNED && t != T_TENSOR_INT32)
        return 0;
    if (sg->operands[op->in[1]].type != t || sg->operands[op->in[2]].type != T_INT32 ||
        sg->operands[op->out[0]].type != t)
        return 0;
    *type = t;
    return 1;
}

/* DEQUANTIZE64: a TENSOR_QUANT64_ASYMM with valid parameters -> a TENSOR_FLOAT32 of its shape. */
static bool dequantize64_signature(const Model *m, const Subgraph *sg, const Operation *op)
{
    if (!is_example_type(m, op->type, EX_DEQUANTIZE64) || op->n_in != 1 || op->n_out != 1)
        return false;
    const Operand *in = &sg->operands[op->in[0]], *out = &sg->operands[op->out[0]];
    double scale;
    int64_t zero_point;
    if (!is_example_type(m, in->type, EX_TENSOR_QUANT64_ASYMM) || out->type != T_TENSOR_FLOAT32 ||
        in->lifetime == L_NO_VALUE || !quant64_params(in, &scale, &zero_point))
        return false;
    if (in->rank && out->rank) {
        if (in->rank != out->rank)
            return false;
        for (uint32_t d = 0; d < in->rank; d++)
            if (in->dims[d] && out->dims[d] && in->dims[d] != out->dims[d])
                return false;
    }
    return true;
}

static bool operation_supported(const Model *m, const Subgraph *sg, const Operation *op)
{
    int32_t t;
    if (is_extension_type(op->type))
        return dequantize64_signature(m, sg, op);
    return binary_signature(sg, op, &t) == 1 && t == T_TENSOR_FLOAT32;
}

static bool index_list_ok(const Subgraph *sg, const uint32_t *idx, uint32_t n, int32_t lifetime,
                          const char *role, uint8_t *listed, Err *e)
{
    memset(listed, 0, sg->n_operands);
    for (uint32_t i = 0; i < n; i++) {
        if (idx[i] >= sg->n_operands)
            return fail(e, S_INVALID_ARGUMENT, "%s index %u out of range", role, idx[i]);
        if (listed[idx[i]])
            return fail(e, S_INVALID_ARGUMENT, "%s operand %u listed twice", role, idx[i]);
        listed[idx[i]] = 1;
        if (sg->operands[idx[i]].lifetime != lifetime)
            return fail(e, S_INVALID_ARGUMENT, "%s operand %u has the wrong lifetime", role, idx[i]);
    }
    for (uint32_t k = 0; k < sg->n_operands; k++)
        if (sg->operands[k].lifetime == lifetime && !listed[k])
            return fail(e, S_INVALID_ARGUMENT, "operand %u is a model %s but not listed as one", k, role);
    return true;
}

static bool validate_subgraph(const Model *m, const Subgraph *sg, uint32_t name, Arena *a, Err *e)
{
    uint8_t *mark = arena_alloc(a, (uint64_t)sg->n_operands + 1);
    if (!mark)
        return fail(e, S_GENERAL_FAILURE, "out of memory");
    for (uint32_t k = 0; k < sg->n_operands; k++) {
        const char *p = operand_problem(m, &sg->operands[k]);
        if (p)
            return fail(e, S_INVALID_ARGUMENT, "subgraph %u operand %u: %s", name, k, p);
    }
    if (!index_list_ok(sg, sg->inputs, sg->n_inputs, L_INPUT, "input", mark, e) ||
        !index_list_ok(sg, sg->outputs, sg->n_outputs, L_OUTPUT, "output", mark, e))
        return false;
    /* mark[k]: operand k holds a value at this point of the execution order. Operations must
     * come in execution order, each operand that operations write written exactly once. */
    for (uint32_t k = 0; k < sg->n_operands; k++)
        mark[k] = !is_written(sg->operands[k].lifetime);
    for (uint32_t j = 0; j < sg->n_operations; j++) {
        const Operation *op = &sg->operations[j];
        if (is_extension_type(op->type)) {
            if (!prefix_known(m, op->type))
                return fail(e, S_INVALID_ARGUMENT, "operation %u: an extension type whose prefix the model "
                            "does not map", j);
        } else if (op->type < 0 || op->type > OP_LAST) {
            return fail(e, S_INVALID_ARGUMENT, "operation %u: invalid operation type %d", j, op->type);
        }
        for (uint32_t i = 0; i < op->n_in; i++)
            if (op->in[i] >= sg->n_operands)
                return fail(e, S_INVALID_ARGUMENT, "operation %u: input index %u out of range", j, op->in[i]);
        for (uint32_t i = 0; i < op->n_out; i++) {
            uint32_t k = op->out[i];
            if (k >= sg->n_operands)
                return fail(e, S_INVALID_ARGUMENT, "operation %u: output index %u out of range", j, k);
            if (!is_written(sg->operands[k].lifetime))
                return fail(e, S_INVALID_ARGUMENT, "operation %u writes operand %u, which is not a "
                            "temporary or a model output", j, k);
        }
        int32_t t;
        if (binary_signature(sg, op, &t) == 0)
            return fail(e, S_INVALID_ARGUMENT, "operation %u: %s does not accept these operand types", j,
                        op->type == OP_ADD ? "ADD" : "MUL");
        for (uint32_t i = 0; i < op->n_in; i++)
            if (!mark[op->in[i]])
                return fail(e, S_INVALID_ARGUMENT, "operation %u reads operand %u before it is written "
                            "(operations out of execution order, or the operand is never written)", j, op->in[i]);
        for (uint32_t i = 0; i < op->n_out; i++) {
            if (mark[op->out[i]])
                return fail(e, S_INVALID_ARGUMENT, "operand %u is written twice", op->out[i]);
            mark[op->out[i]] = 1;
        }
    }
    for (uint32_t k = 0; k < sg->n_operands; k++)
        if (!mark[k])
            return fail(e, S_INVALID_ARGUMENT, "subgraph %u: operand %u is never written", name, k);
    return true;
}

/* No subgraph reachable from the main one may reference itself, directly or not: Kahn's
 * algorithm on the reference graph (iterative, so a hostile model cannot exhaust the stack). */
static bool check_no_recursion(const Model *m, Arena *a, Err *e)
{
    uint32_t n = m->n_referenced;
    if (!n)
        return true;
    uint32_t *indegree = arena_alloc(a, (uint64_t)n * 4), *stack = arena_alloc(a, (uint64_t)n * 4);
    uint8_t *reached = arena_alloc(a, n);
    if (!indegree || !stack || !reached)
        return fail(e, S_GENERAL_FAILURE, "out of memory");
    uint32_t top = 0, n_reached = 0;
    const Subgraph *main_sg = &m->main;
    for (uint32_t k = 0; k < main_sg->n_operands; k++)
        if (main_sg->operands[k].lifetime == L_SUBGRAPH && !reached[main_sg->operands[k].subgraph]) {
            reached[main_sg->operands[k].subgraph] = 1;
            stack[top++] = main_sg->operands[k].subgraph;
        }
    while (top) {  /* what the main subgraph reaches */
        const Subgraph *sg = &m->referenced[stack[--top]];
        n_reached++;
        for (uint32_t k = 0; k < sg->n_operands; k++)
            if (sg->operands[k].lifetime == L_SUBGRAPH && !reached[sg->operands[k].subgraph]) {
                reached[sg->operands[k].subgraph] = 1;
                stack[top++] = sg->operands[k].subgraph;
            }
    }
    for (uint32_t s = 0; s < n; s++)
        if (reached[s])
            for (uint32_t k = 0; k < m->referenced[s].n_operands; k++)
                if (m->referenced[s].operands[k].lifetime == L_SUBGRAPH)
                    indegree[m->referenced[s].operands[k].subgraph]++;
    for (uint32_t s = 0; s < n; s++)
        if (reached[s] && !indegree[s])
            stack[top++] = s;
    uint32_t done = 0;
    while (top) {
        const Subgraph *sg = &m->referenced[stack[--top]];
        done++;
        for (uint32_t k = 0; k < sg->n_operands; k++)
            if (sg->operands[k].lifetime == L_SUBGRAPH && --indegree[sg->operands[k].subgraph] == 0)
                stack[top++] = sg->operands[k].subgraph;
    }
    if (done != n_reached)
        return fail(e, S_INVALID_ARGUMENT, "a subgraph references itself");
    return true;
}

/* extension_name_to_prefix: a bijection between non-empty names and prefixes 1-65535. */
static bool prefixes_ok(const Model *m, Err *e)
{
    for (uint32_t i = 0; i < m->n_prefixes; i++) {
        if (m->prefixes[i] == 0 || m->prefixes[i] > 0xFFFF)
            return fail(e, S_INVALID_ARGUMENT, "extension prefix %u outside 1-65535", m->prefixes[i]);
        if (!m->prefix_name_lengths[i])
            return fail(e, S_INVALID_ARGUMENT, "an empty extension name for prefix %u", m->prefixes[i]);
        for (uint32_t j = 0; j < i; j++) {
            if (m->prefixes[j] == m->prefixes[i])
                return fail(e, S_INVALID_ARGUMENT, "extension prefix %u given twice", m->prefixes[i]);
            if (m->prefix_name_lengths[j] == m->prefix_name_lengths[i] &&
                memcmp(m->prefix_names[j], m->prefix_names[i], m->prefix_name_lengths[i]) == 0)
                return fail(e, S_INVALID_ARGUMENT, "an extension given two prefixes");
        }
    }
    return true;
}

static bool uses_other_extension(const Model *m)
{
    const Subgraph *sg = &m->main;
    for (uint32_t k = 0; k < sg->n_operands; k++)
        if (is_extension_type(sg->operands[k].type) && !of_example_extension(m, sg->operands[k].type))
            return true;
    for (uint32_t j = 0; j < sg->n_operations; j++)
        if (is_extension_type(sg->operations[j].type) && !of_example_extension(m, sg->operations[j].type))
            return true;
    return false;
}

static bool validate_model(const Model *m, Arena *a, Err *e)
{
    if (!prefixes_ok(m, e))
        return false;
    if (!m->main.n_operations)
        return fail(e, S_INVALID_ARGUMENT, "the model has no operations");
    if (!m->main.n_outputs)
        return fail(e, S_INVALID_ARGUMENT, "the model has no outputs");
    if (!validate_subgraph(m, &m->main, 0, a, e))
        return false;
    for (uint32_t k = 0; k < m->n_referenced; k++)
        if (!validate_subgraph(m, &m->referenced[k], k + 1, a, e))
            return false;
    return check_no_recursion(m, a, e);
}

/* ---- shapes and broadcasting --------------------------------------------------------------- */

/* Merges two partially known shapes (dimension 0 = unknown, rank 0 = unknown rank). */
static bool combine(uint32_t ra, const uint32_t *a, uint32_t rb, const uint32_t *b, uint32_t *rank,
                    uint32_t *out, uint32_t cap)
{
    if (!ra || !rb) {
        uint32_t r = ra ? ra : rb;
        const uint32_t *s = ra ? a : b;
        if (r > cap)
            return false;
        for (uint32_t i = 0; i < r; i++)
            out[i] = s[i];
        *rank = r;
        return true;
    }
    if (ra != rb || ra > cap)
        return false;
    for (uint32_t i = 0; i < ra; i++) {
        if (a[i] && b[i] && a[i] != b[i])
            return false;
        out[i] = a[i] ? a[i] : b[i];
    }
    *rank = ra;
    return true;
}

/* NNAPI broadcasting: align trailing dimensions; each pair equal, or one of them 1. */
static const char *broadcast(uint32_t ra, const uint32_t *a, uint32_t rb, const uint32_t *b, Shape *out)
{
    if (ra > MAX_RANK || rb > MAX_RANK)
        return "ADD and MUL take tensors of rank 4 at most";
    uint32_t r = ra > rb ? ra : rb;
    out->rank = r;
    for (uint32_t i = 0; i < r; i++) {
        uint32_t x = i + ra >= r ? a[i + ra - r] : 1, y = i + rb >= r ? b[i + rb - r] : 1;
        if (x != y && x != 1 && y != 1)
            return "the input shapes cannot be broadcast together";
        out->dims[i] = x == 1 ? y : x;
    }
    return NULL;
}

static bool shape_fits_declared(const Operand *o, const Shape *s)
{
    if (!o->rank)
        return true;
    if (o->rank != s->rank)
        return false;
    for (uint32_t d = 0; d < o->rank; d++)
        if (o->dims[d] && o->dims[d] != s->dims[d])
            return false;
    return true;
}

static bool fully_known(uint32_t rank, const uint32_t *dims)
{
    if (!rank)
        return false;
    for (uint32_t d = 0; d < rank; d++)
        if (!dims[d])
            return false;
    return true;
}

/* What can be checked at compilation: operations whose input shapes the model fixes. */
static bool check_static_shapes(const Model *m, Arena *a, Err *e)
{
    const Subgraph *sg = &m->main;
    Shape *shape = arena_alloc(a, (uint64_t)sg->n_operands * sizeof(Shape));
    uint8_t *known = arena_alloc(a, (uint64_t)sg->n_operands + 1);
    if (!shape || !known)
        return fail(e, S_GENERAL_FAILURE, "out of memory");
    for (uint32_t k = 0; k < sg->n_operands; k++) {
        const Operand *o = &sg->operands[k];
        known[k] = o->rank <= MAX_RANK && fully_known(o->rank, o->dims);
        if (known[k]) {
            shape[k].rank = o->rank;
            memcpy(shape[k].dims, o->dims, o->rank * 4);
        }
    }
    for (uint32_t j = 0; j < sg->n_operations; j++) {
        const Operation *op = &sg->operations[j];
        if (is_extension_type(op->type)) {  /* DEQUANTIZE64: the output has the input's shape */
            if (known[op->in[0]]) {
                if (!shape_fits_declared(&sg->operands[op->out[0]], &shape[op->in[0]]))
                    return fail(e, S_INVALID_ARGUMENT, "operation %u: its output shape differs from its input's", j);
                shape[op->out[0]] = shape[op->in[0]];
                known[op->out[0]] = 1;
            }
            continue;
        }
        const Operand *a0 = &sg->operands[op->in[0]], *a1 = &sg->operands[op->in[1]];
        const Operand *fuse = &sg->operands[op->in[2]];
        if (a0->rank > MAX_RANK || a1->rank > MAX_RANK)
            return fail(e, S_INVALID_ARGUMENT, "operation %u: inputs of rank above 4", j);
        if (is_constant(fuse->lifetime)) {
            int32_t code = (int32_t)le(fuse->data, 4);
            if (code < 0 || code > 3)
                return fail(e, S_INVALID_ARGUMENT, "operation %u: fused activation %d is not 0..3", j, code);
        }
        if (!known[op->in[0]] || !known[op->in[1]])
            continue;
        Shape s;
        const char *p = broadcast(shape[op->in[0]].rank, shape[op->in[0]].dims, shape[op->in[1]].rank,
                                  shape[op->in[1]].dims, &s);
        if (p)
            return fail(e, S_INVALID_ARGUMENT, "operation %u: %s", j, p);
        if (!shape_fits_declared(&sg->operands[op->out[0]], &s))
            return fail(e, S_INVALID_ARGUMENT, "operation %u: its output shape differs from the declared one", j);
        shape[op->out[0]] = s;
        known[op->out[0]] = 1;
    }
    return true;
}

/* ---- prepared models, bursts and the handle table ------------------------------------------ */

typedef struct {
    Arena arena;  /* owns the model: a prepared model is a private copy */
    Model model;
    int refs;     /* its handle and the bursts made from it */
} Prepared;

enum { OBJ_PREPARED = 1, OBJ_BURST = 2 };
typedef struct {
    uint64_t handle;
    int kind;
    Prepared *prepared;
} Object;

static Object *objects;
static size_t n_objects, cap_objects;
static uint64_t next_handle = 1;

static void unref(Prepared *p)
{
    if (--p->refs == 0) {
        arena_free(&p->arena);
        free(p);
    }
}

static uint64_t new_object(int kind, Prepared *p)
{
    if (n_objects == cap_objects) {
        size_t cap = cap_objects ? cap_objects * 2 : 16;
        Object *o = realloc(objects, cap * sizeof *o);
        if (!o)
            return 0;
        objects = o;
        cap_objects = cap;
    }
    objects[n_objects++] = (Object){next_handle, kind, p};
    p->refs++;
    return next_handle++;
}

static Prepared *find_object(uint64_t handle, int kind)
{
    for (size_t i = 0; i < n_objects; i++)
        if (objects[i].handle == handle && objects[i].kind == kind)
            return objects[i].prepared;
    return NULL;
}

static void release_object(uint64_t handle)
{
    for (size_t i = 0; i < n_objects; i++)
        if (objects[i].handle == handle) {
            Prepared *p = objects[i].prepared;
            objects[i] = objects[--n_objects];
            unref(p);
            return;
        }
}

/* ---- requests ------------------------------------------------------------------------------ */

typedef struct {
    int32_t lifetime;
    uint32_t pool, offset, length, rank, *dims;
    bool has_pointer;
    uint8_t *pointer;
    uint64_t pointer_length;
} Argument;

typedef struct {
    uint8_t kind;
    uint8_t *base;
    uint64_t size;
} Pool;

typedef struct {
    uint32_t n_in, n_out, n_pools;
    Argument *in, *out;
    Pool *pools;
} Request;

static void read_argument(Rd *r, Arena *a, Argument *g, Err *e)
{
    g->lifetime = rd_i32(r);
    g->pool = rd_u32(r);
    g->offset = rd_u32(r);
    g->length = rd_u32(r);
    g->dims = rd_u32list(r, a, &g->rank);
    g->has_pointer = rd_bool(r);
    if (g->has_pointer && !rd_region_ref(r, &g->pointer, &g->pointer_length, e) && !r->bad)
        malformed(r, e->msg);
}

static void read_request(Rd *r, Arena *a, Request *q, Err *e)
{
    memset(q, 0, sizeof *q);
    for (int side = 0; side < 2; side++) {
        uint32_t n = rd_count(r, MIN_ARGUMENT);
        Argument *args = arena_alloc(a, (uint64_t)n * sizeof(Argument));
        if (!args)
            { malformed(r, "out of memory"); return; }
        for (uint32_t i = 0; i < n && !r->bad; i++)
            read_argument(r, a, &args[i], e);
        if (side == 0) {
            q->in = args;
            q->n_in = n;
        } else {
            q->out = args;
            q->n_out = n;
        }
    }
    q->n_pools = rd_count(r, MIN_POOL);
    q->pools = arena_alloc(a, (uint64_t)q->n_pools * sizeof(Pool));
    if (!q->pools)
        { malformed(r, "out of memory"); return; }
    for (uint32_t i = 0; i < q->n_pools && !r->bad; i++) {
        Pool *p = &q->pools[i];
        p->kind = rd_u8(r);
        if (p->kind == POOL_REGION) {
            if (!rd_region_ref(r, &p->base, &p->size, e) && !r->bad)
                malformed(r, e->msg);
        } else if (p->kind == POOL_DEVICE_BUFFER) {
            rd_u64(r);  /* this driver allocates no device memory: every token is unknown */
        } else {
            malformed(r, "unknown pool kind");
        }
    }
}

/* The bytes an argument names: a POINTER's region, or a range of a shared-memory pool. */
static bool argument_bytes(const Request *q, const Argument *g, const char *what, uint32_t i, uint8_t **p,
                           uint64_t *len, Err *e)
{
    if (g->lifetime == ARG_POINTER) {
        if (!g->has_pointer)
            return fail(e, S_INVALID_ARGUMENT, "%s %u: POINTER argument without a buffer", what, i);
        *p = g->pointer;
        *len = g->pointer_length;
        return true;
    }
    if (g->lifetime != ARG_POOL)
        return fail(e, S_INVALID_ARGUMENT, "%s %u: invalid argument lifetime %d", what, i, g->lifetime);
    if (g->pool >= q->n_pools)
        return fail(e, S_INVALID_ARGUMENT, "%s %u: pool %u of %u", what, i, g->pool, q->n_pools);
    const Pool *pool = &q->pools[g->pool];
    if (pool->kind != POOL_REGION)
        return fail(e, S_INVALID_ARGUMENT, "%s %u: unknown device memory", what, i);
    if ((uint64_t)g->offset + g->length > pool->size)
        return fail(e, S_INVALID_ARGUMENT, "%s %u: [%u, +%u) outside a pool of %llu bytes", what, i, g->offset,
                    g->length, (unsigned long long)pool->size);
    *p = pool->base + g->offset;
    *len = g->length;
    return true;
}

/* ---- execution ----------------------------------------------------------------------------- */

typedef struct {
    bool present;
    uint32_t rank, *dims;
    void *data;  /* float elements for tensors; an aligned private copy */
    uint64_t bytes;
} Value;

typedef struct {
    Shape *shapes;  /* one per model output */
    uint32_t n_shapes;
    Timing timing;
    bool launch_failed;  /* the request itself was invalid (the asynchronous launch fails) */
} Result;

#define MAX_ELEMENTS (UINT64_C(1) << 56)  /* saturation point: far from overflow, never allocated */
#define MAX_RESULT_ELEMENTS (UINT64_C(1) << 28)  /* largest result computed (1 GiB of floats) */

/* Elements of a shape, saturated at MAX_ELEMENTS (dimensions come from untrusted messages). */
static uint64_t element_count(uint32_t rank, const uint32_t *dims)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < rank; d++) {
        if (dims[d] && n > MAX_ELEMENTS / dims[d])
            return MAX_ELEMENTS;
        n *= dims[d];
    }
    return n;
}

/* Clamps by the fused activation. NaN passes through, as numpy's clip leaves it. */
static float activate(float x, int32_t fuse)
{
    switch (fuse) {
    case 1: return x < 0.f ? 0.f : x;
    case 2: return x < -1.f ? -1.f : x > 1.f ? 1.f : x;
    case 3: return x < 0.f ? 0.f : x > 6.f ? 6.f : x;
    default: return x;
    }
}

static bool run_binary(int32_t type, const Value *a, const Value *b, int32_t fuse, const Operand *out_operand,
                       Value *out, Arena *arena, uint32_t j, Err *e)
{
    Shape s;
    const char *p = broadcast(a->rank, a->dims, b->rank, b->dims, &s);
    if (p)
        return fail(e, S_GENERAL_FAILURE, "operation %u: %s", j, p);
    if (fuse < 0 || fuse > 3)
        return fail(e, S_GENERAL_FAILURE, "operation %u: fused activation %d is not 0..3", j, fuse);
    if (!shape_fits_declared(out_operand, &s))
        return fail(e, S_GENERAL_FAILURE, "operation %u: output shape differs from the declared one", j);
    uint64_t n = element_count(s.rank, s.dims);
    if (n > MAX_RESULT_ELEMENTS)  /* broadcasting can ask for far more than the inputs hold */
        return fail(e, S_RESOURCE_EXHAUSTED_TRANSIENT, "operation %u: a result of %llu elements is too large", j,
                    (unsigned long long)n);
    out->rank = s.rank;
    out->dims = arena_alloc(arena, (uint64_t)s.rank * 4 + 4);
    out->bytes = n * 4;
    out->data = arena_alloc(arena, out->bytes);
    if (!out->dims || !out->data)
        return fail(e, S_RESOURCE_EXHAUSTED_TRANSIENT, "operation %u: out of memory for %llu elements", j,
                    (unsigned long long)n);
    memcpy(out->dims, s.dims, s.rank * 4);
    out->present = true;
    /* Walk the output in row-major order with 4-D strides; a broadcast dimension has stride 0. */
    uint32_t od[MAX_RANK] = {1, 1, 1, 1};
    uint64_t sa[MAX_RANK] = {0}, sb[MAX_RANK] = {0};
    uint32_t off = MAX_RANK - s.rank;
    for (uint32_t i = 0; i < s.rank; i++)
        od[off + i] = s.dims[i];
    uint64_t stride = 1;
    for (int i = (int)a->rank - 1; i >= 0; i--) {
        sa[MAX_RANK - a->rank + (uint32_t)i] = a->dims[i] == 1 ? 0 : stride;
        stride *= a->dims[i];
    }
    stride = 1;
    for (int i = (int)b->rank - 1; i >= 0; i--) {
        sb[MAX_RANK - b->rank + (uint32_t)i] = b->dims[i] == 1 ? 0 : stride;
        stride *= b->dims[i];
    }
    const float *x = a->data, *y = b->data;
    float *z = out->data;
    uint64_t k = 0;
    for (uint32_t i0 = 0; i0 < od[0]; i0++)
        for (uint32_t i1 = 0; i1 < od[1]; i1++)
            for (uint32_t i2 = 0; i2 < od[2]; i2++)
                for (uint32_t i3 = 0; i3 < od[3]; i3++) {
                    float u = x[i0 * sa[0] + i1 * sa[1] + i2 * sa[2] + i3 * sa[3]];
                    float v = y[i0 * sb[0] + i1 * sb[1] + i2 * sb[2] + i3 * sb[3]];
                    z[k++] = activate(type == OP_ADD ? u + v : u * v, fuse);
                }
    return true;
}

/* DEQUANTIZE64: (q - zero point) exactly (128-bit), rounded to double, times the scale, to float. */
static bool run_dequantize64(const Operand *in_operand, const Value *q, Value *out, Arena *arena, uint32_t j, Err *e)
{
    double scale;
    int64_t zero_point;
    if (!q->present)
        return fail(e, S_GENERAL_FAILURE, "operation %u: the input has no value", j);
    if (!quant64_params(in_operand, &scale, &zero_point))
        return fail(e, S_GENERAL_FAILURE, "operation %u: malformed TENSOR_QUANT64_ASYMM parameters", j);
    uint64_t n = q->bytes / 8;
    out->rank = q->rank;
    out->dims = arena_alloc(arena, (uint64_t)q->rank * 4 + 4);
    out->bytes = n * 4;
    out->data = arena_alloc(arena, out->bytes + 4);
    if (!out->dims || !out->data)
        return fail(e, S_RESOURCE_EXHAUSTED_TRANSIENT, "operation %u: out of memory", j);
    memcpy(out->dims, q->dims, q->rank * 4);
    out->present = true;
    const uint8_t *src = q->data;
    float *z = out->data;
    for (uint64_t i = 0; i < n; i++) {
        __int128 diff = (__int128)(int64_t)le(src + 8 * i, 8) - zero_point;
        z[i] = (float)((double)diff * scale);
    }
    return true;
}

static bool deadline_passed(bool has_deadline, int64_t deadline)
{
    return has_deadline && now_ns() > deadline;
}

/* Validates the request against the model, runs it and writes the outputs. */
static bool execute(const Model *m, const Request *q, bool measure, bool has_deadline, int64_t deadline,
                    int64_t start, Arena *a, Result *res, Err *e)
{
    const Subgraph *sg = &m->main;
    res->launch_failed = true;
    res->n_shapes = 0;
    res->timing = NO_TIMING;
    if (q->n_in != sg->n_inputs || q->n_out != sg->n_outputs)
        return fail(e, S_INVALID_ARGUMENT, "request has %u inputs and %u outputs, the model %u and %u", q->n_in,
                    q->n_out, sg->n_inputs, sg->n_outputs);
    Value *val = arena_alloc(a, (uint64_t)sg->n_operands * sizeof(Value));
    res->shapes = arena_alloc(a, (uint64_t)sg->n_outputs * sizeof(Shape));
    uint8_t **dest = arena_alloc(a, (uint64_t)sg->n_outputs * sizeof(uint8_t *));
    uint64_t *dest_len = arena_alloc(a, (uint64_t)sg->n_outputs * 8);
    if (!val || !res->shapes || !dest || !dest_len)
        return fail(e, S_GENERAL_FAILURE, "out of memory");
    for (uint32_t k = 0; k < sg->n_operands; k++) {
        const Operand *o = &sg->operands[k];
        if (is_constant(o->lifetime)) {
            val[k] = (Value){true, o->rank, o->dims, NULL, o->length};
            if (!(val[k].data = arena_alloc(a, o->length)))  /* an aligned copy */
                return fail(e, S_GENERAL_FAILURE, "out of memory");
            memcpy(val[k].data, o->data, o->length);
        }
    }
    /* Inputs: each fully specified by the model and the request, with exactly its bytes. */
    for (uint32_t i = 0; i < q->n_in; i++) {
        const Argument *g = &q->in[i];
        const Operand *o = &sg->operands[sg->inputs[i]];
        if (g->lifetime == ARG_NO_VALUE)
            continue;
        uint8_t *src;
        uint64_t len;
        if (!argument_bytes(q, g, "input", i, &src, &len, e))
            return false;
        Value *v = &val[sg->inputs[i]];
        uint32_t cap = (o->rank > g->rank ? o->rank : g->rank) + 1;
        v->dims = arena_alloc(a, (uint64_t)cap * 4);
        if (!v->dims)
            return fail(e, S_GENERAL_FAILURE, "out of memory");
        if (is_scalar_type(o->type)) {
            if (g->rank)
                return fail(e, S_INVALID_ARGUMENT, "input %u: dimensions given for a scalar", i);
            v->rank = 0;
        } else {
            if (!combine(o->rank, o->dims, g->rank, g->dims, &v->rank, v->dims, cap))
                return fail(e, S_INVALID_ARGUMENT, "input %u: dimensions conflict with the model's", i);
            if (!fully_known(v->rank, v->dims))
                return fail(e, S_INVALID_ARGUMENT, "input %u: dimensions not fully specified", i);
        }
        uint64_t needed = element_count(v->rank, v->dims) *
                          (is_example_type(m, o->type, EX_TENSOR_QUANT64_ASYMM) ? 8 : element_size(o->type));
        if (len != needed)
            return fail(e, S_INVALID_ARGUMENT, "input %u: %llu bytes given, %llu needed", i,
                        (unsigned long long)len, (unsigned long long)needed);
        if (!(v->data = arena_alloc(a, len)))
            return fail(e, S_RESOURCE_EXHAUSTED_TRANSIENT, "out of memory");
        memcpy(v->data, src, len);
        v->bytes = len;
        v->present = true;
    }
    /* Outputs: present, in range, and with dimensions that agree with the model's. */
    for (uint32_t i = 0; i < q->n_out; i++) {
        const Argument *g = &q->out[i];
        const Operand *o = &sg->operands[sg->outputs[i]];
        if (g->lifetime == ARG_NO_VALUE)
            return fail(e, S_INVALID_ARGUMENT, "output %u: outputs may not be omitted", i);
        if (!argument_bytes(q, g, "output", i, &dest[i], &dest_len[i], e))
            return false;
        uint32_t rank, cap = (o->rank > g->rank ? o->rank : g->rank) + 1;
        uint32_t *dims = arena_alloc(a, (uint64_t)cap * 4);
        if (!dims)
            return fail(e, S_GENERAL_FAILURE, "out of memory");
        if (is_scalar_type(o->type) ? g->rank != 0 : !combine(o->rank, o->dims, g->rank, g->dims, &rank, dims, cap))
            return fail(e, S_INVALID_ARGUMENT, "output %u: dimensions conflict with the model's", i);
    }
    res->launch_failed = false;

    /* Run: operations are in execution order (validated at preparation). */
    if (deadline_passed(has_deadline, deadline))
        return fail(e, S_MISSED_DEADLINE_PERSISTENT, "the execution deadline passed");
    int64_t device_start = now_ns();
    for (uint32_t j = 0; j < sg->n_operations; j++) {
        const Operation *op = &sg->operations[j];
        if (deadline_passed(has_deadline, deadline))
            return fail(e, S_MISSED_DEADLINE_TRANSIENT, "the execution deadline passed");
        if (is_extension_type(op->type)) {
            if (!run_dequantize64(&sg->operands[op->in[0]], &val[op->in[0]], &val[op->out[0]], a, j, e))
                return false;
            continue;
        }
        const Value *x = &val[op->in[0]], *y = &val[op->in[1]], *f = &val[op->in[2]];
        if (!x->present || !y->present || !f->present)
            return fail(e, S_GENERAL_FAILURE, "operation %u: a required input has no value", j);
        int32_t fuse;
        memcpy(&fuse, f->data, 4);
        if (!run_binary(op->type, x, y, fuse, &sg->operands[op->out[0]], &val[op->out[0]], a, j, e))
            return false;
    }
    int64_t device_ns = now_ns() - device_start;
    /* Output shapes, then the data only if every output fits (else OUTPUT_INSUFFICIENT_SIZE). */
    bool all_fit = true;
    res->n_shapes = sg->n_outputs;
    for (uint32_t i = 0; i < sg->n_outputs; i++) {
        const Value *v = &val[sg->outputs[i]];
        Shape *s = &res->shapes[i];
        s->rank = v->rank;
        memcpy(s->dims, v->dims, v->rank * 4);
        const Argument *g = &q->out[i];  /* the request's dimensions, where it gives any */
        if (g->rank && g->rank != s->rank)
            return fail(e, S_GENERAL_FAILURE, "output %u: computed rank %u, requested %u", i, s->rank, g->rank);
        for (uint32_t d = 0; d < g->rank; d++)
            if (g->dims[d] && g->dims[d] != s->dims[d])
                return fail(e, S_GENERAL_FAILURE, "output %u: computed shape differs from the requested one", i);
        s->sufficient = dest_len[i] >= v->bytes;
        all_fit = all_fit && s->sufficient;
    }
    if (!all_fit)
        return fail(e, S_OUTPUT_INSUFFICIENT_SIZE, "an output buffer is too small");
    for (uint32_t i = 0; i < sg->n_outputs; i++)
        memcpy(dest[i], val[sg->outputs[i]].data, val[sg->outputs[i]].bytes);
    if (measure)
        res->timing = (Timing){device_ns, now_ns() - start};
    return true;
}

/* ---- message handlers ---------------------------------------------------------------------- */

typedef struct {
    uint64_t call_id;
    int64_t received;  /* when the message arrived: relative deadlines count from here */
    Rd r;
    Arena arena;  /* what decoding this message allocated */
    Err e;
} Call;

static int64_t absolute(int64_t received, int64_t relative)
{
    if (relative > 0 && received > INT64_MAX - relative)
        return INT64_MAX;
    return received + relative;
}

/* A message read to its end, or ERROR INVALID_ARGUMENT naming what is wrong with it. */
static bool decoded(Call *c)
{
    if (!c->r.bad && c->r.pos != c->r.n)
        malformed(&c->r, "bytes left over at the end of the message");
    if (!c->r.bad)
        return true;
    Err e;
    if (c->e.status)
        e = c->e;
    else
        fail(&e, S_INVALID_ARGUMENT, "malformed message: %s", c->r.why ? c->r.why : "?");
    send_error(c->call_id, &e, NULL, 0);
    return false;
}

static void reply_error(Call *c, int32_t status, const char *msg)
{
    Err e;
    fail(&e, status, "%s", msg);
    send_error(c->call_id, &e, NULL, 0);
}

static void w_perf(Wr *w, float exec_time, float power)
{
    w_f32(w, exec_time);
    w_f32(w, power);
}

static void on_hello(Call *c)
{
    const uint8_t *magic = rd_raw(&c->r, 4);
    bool magic_ok = magic && memcmp(magic, "NNTS", 4) == 0;
    uint32_t version = rd_u32(&c->r);
    if (!magic_ok)
        malformed(&c->r, "HELLO without the magic NNTS");
    if (!decoded(c))
        return;
    if (version != PROTOCOL_VERSION)
        { reply_error(c, 1 /* DEVICE_UNAVAILABLE */, "this server speaks protocol version 2 only (version 2 added vendor extensions)"); return; }
    Wr w = {0};
    w_u32(&w, PROTOCOL_VERSION);
    w_str(&w, "nnts-example-c");
    w_str(&w, "nnts example C driver 1.0");
    w_i32(&w, DEVICE_TYPE_CPU);
    w_i64(&w, FEATURE_LEVEL);
    w_perf(&w, 1.0f, 1.0f);  /* relaxed scalar */
    w_perf(&w, 1.0f, 1.0f);  /* relaxed tensor */
    w_u32(&w, 2);            /* the operand types it computes with: TENSOR_FLOAT32 and the INT32 fuse code */
    w_i32(&w, T_INT32);
    w_perf(&w, 1.0f, 1.0f);
    w_i32(&w, T_TENSOR_FLOAT32);
    w_perf(&w, 1.0f, 1.0f);
    w_perf(&w, FLT_MAX, FLT_MAX);  /* IF: not supported */
    w_perf(&w, FLT_MAX, FLT_MAX);  /* WHILE: not supported */
    w_u32(&w, 1);  /* one extension: org.nnts.example, with its one operand type */
    w_str(&w, EXAMPLE_EXTENSION);
    w_u32(&w, 1);
    w_u32(&w, EX_TENSOR_QUANT64_ASYMM);
    w_u8(&w, 1);   /* a tensor */
    w_u32(&w, 8);  /* of 8-byte elements */
    w_u32(&w, 0);  /* no cache files: compilations are not cached */
    w_u32(&w, 0);
    send_frame(REPLY_DEVICE_INFO, c->call_id, &w);
    free(w.p);
}

static void on_supported(Call *c)
{
    Model m;
    read_model(&c->r, &c->arena, &m, &c->e);
    if (!decoded(c))
        return;
    if (!validate_model(&m, &c->arena, &c->e))
        { send_error(c->call_id, &c->e, NULL, 0); return; }
    Wr w = {0};
    w_u32(&w, m.main.n_operations);
    for (uint32_t j = 0; j < m.main.n_operations; j++)
        w_u8(&w, operation_supported(&m, &m.main, &m.main.operations[j]));
    send_frame(REPLY_SUPPORTED, c->call_id, &w);
    free(w.p);
}

static void skip_cache_files(Rd *r)
{
    for (int group = 0; group < 2; group++) {
        uint32_t n = rd_count(r, 5);
        for (uint32_t i = 0; i < n && !r->bad; i++) {
            uint32_t len;
            rd_bytes(r, &len);  /* the path: this driver caches nothing */
            rd_bool(r);
        }
    }
}

/* ---- trace spans (section 8, optional): recorded after TRACE_START, sent on TRACE_COLLECT ------ */

typedef struct {
    const char *name, *phase, *layer;  /* string literals */
    int64_t start, duration;
} Span;
#define MAX_SPANS 4096  /* more between two collects are dropped (a collect reply holds at most 20,000) */
static Span spans[MAX_SPANS];
static uint32_t n_spans;
static bool tracing;

static void record_span(const char *name, const char *phase, const char *layer, int64_t start)
{
    if (tracing && n_spans < MAX_SPANS)
        spans[n_spans++] = (Span){name, phase, layer, start, now_ns() - start};
}

static void on_trace_start(Call *c)
{
    if (!decoded(c))
        return;
    tracing = true;
    Wr w = {0};
    w_i64(&w, now_ns());
    send_frame(REPLY_TRACE_CLOCK, c->call_id, &w);
    free(w.p);
}

static void on_trace_collect(Call *c)
{
    if (!decoded(c))
        return;
    uint64_t tid = (uint64_t)getpid();  /* one thread serves everything */
    Wr w = {0};
    w_u32(&w, (uint32_t)getpid());
    w_str(&w, "nnts_example_driver");
    w_u32(&w, 1);
    w_u64(&w, tid);
    w_str(&w, "main");
    w_u32(&w, n_spans);
    for (uint32_t i = 0; i < n_spans; i++) {
        w_str(&w, spans[i].name);
        w_str(&w, spans[i].phase);
        w_str(&w, spans[i].layer);
        w_i64(&w, spans[i].start);
        w_i64(&w, spans[i].duration);
        w_u64(&w, tid);
    }
    w_u8(&w, 0);  /* more: everything fitted */
    n_spans = 0;
    send_frame(REPLY_TRACE_SPANS, c->call_id, &w);
    free(w.p);
}

static void on_prepare(Call *c)
{
    int64_t started = now_ns();
    Prepared *p = calloc(1, sizeof *p);
    if (!p)
        { reply_error(c, S_GENERAL_FAILURE, "out of memory"); return; }
    read_model(&c->r, &p->arena, &p->model, &c->e);
    int32_t preference = rd_i32(&c->r), priority = rd_i32(&c->r);
    int64_t deadline;
    bool has_deadline = rd_optional_i64(&c->r, &deadline);
    skip_cache_files(&c->r);
    if (rd_bool(&c->r)) {
        uint32_t len;
        rd_bytes(&c->r, &len);  /* the cache token */
    }
    Err *e = &c->e;
    bool ok = decoded(c);
    if (ok) {
        const Model *m = &p->model;
        if (preference < 0 || preference > 2)
            ok = fail(e, S_INVALID_ARGUMENT, "invalid execution preference %d", preference);
        else if (priority != 90 && priority != 100 && priority != 110)
            ok = fail(e, S_INVALID_ARGUMENT, "invalid priority %d", priority);
        else if (has_deadline && deadline < 0)
            ok = fail(e, S_MISSED_DEADLINE_PERSISTENT, "the compilation deadline passed");
        else if (!validate_model(m, &c->arena, e))
            ok = false;
        if (ok && uses_other_extension(m))
            ok = fail(e, S_INVALID_ARGUMENT, "the model uses an extension this driver does not support");
        for (uint32_t j = 0; ok && j < m->main.n_operations; j++)
            if (is_extension_type(m->main.operations[j].type) &&
                !dequantize64_signature(m, &m->main, &m->main.operations[j]))
                ok = fail(e, S_INVALID_ARGUMENT, "operation %u: not DEQUANTIZE64 of org.nnts.example with its "
                          "operands", j);
            else if (!operation_supported(m, &m->main, &m->main.operations[j]))
                ok = fail(e, S_GENERAL_FAILURE, "operation %u (type %d) is not supported", j,
                          m->main.operations[j].type);
        if (ok)
            ok = check_static_shapes(m, &c->arena, e);
        uint64_t handle = ok ? new_object(OBJ_PREPARED, p) : 0;
        if (ok && !handle)
            ok = fail(e, S_GENERAL_FAILURE, "out of memory");
        if (ok) {
            Wr w = {0};
            w_u64(&w, handle);
            record_span("example prepareModel", "compilation", "driver", started);
            send_frame(REPLY_PREPARED, c->call_id, &w);
            free(w.p);
            return;
        }
        send_error(c->call_id, e, NULL, 0);
    }
    arena_free(&p->arena);
    free(p);
}

/* Execution = prepared model handle, Request, measure, deadline, loop timeout. */
typedef struct {
    Prepared *prepared;
    Request q;
    bool measure, has_deadline;
    int64_t deadline;
} Exec;

static void read_execution_tail(Call *c, Exec *x)
{
    read_request(&c->r, &c->arena, &x->q, &c->e);
    x->measure = rd_bool(&c->r);
    int64_t relative;
    x->has_deadline = rd_optional_i64(&c->r, &relative);
    x->deadline = absolute(c->received, relative);
    rd_u64(&c->r);  /* loop timeout: no WHILE here */
}

static void read_execution(Call *c, Exec *x)
{
    uint64_t handle = rd_u64(&c->r);
    x->prepared = find_object(handle, OBJ_PREPARED);
    if (!x->prepared && !c->r.bad)
        malformed(&c->r, "unknown prepared model handle");
    read_execution_tail(c, x);
}

static void reply_executed(Call *c, uint32_t type, const Result *res)
{
    Wr w = {0};
    w_shapes(&w, res->shapes, res->n_shapes);
    w_timing(&w, res->timing);
    send_frame(type, c->call_id, &w);
    free(w.p);
}

static void run_and_reply(Call *c, Exec *x)
{
    Result res = {0};
    int64_t started = now_ns();
    bool ok = execute(&x->prepared->model, &x->q, x->measure, x->has_deadline, x->deadline, c->received,
                      &c->arena, &res, &c->e);
    record_span("example execute", "execution", "driver", started);
    if (ok)
        reply_executed(c, REPLY_EXECUTED, &res);
    else
        send_error(c->call_id, &c->e, res.shapes,
                   c->e.status == S_OUTPUT_INSUFFICIENT_SIZE ? res.n_shapes : 0);
}

static void on_execute_sync(Call *c)
{
    Exec x;
    read_execution(c, &x);
    if (decoded(c))
        run_and_reply(c, &x);
}

static void on_execute_async(Call *c)
{
    Exec x;
    read_execution(c, &x);
    if (!decoded(c))
        return;
    Result res = {0};
    bool ok = execute(&x.prepared->model, &x.q, x.measure, x.has_deadline, x.deadline, c->received, &c->arena,
                      &res, &c->e);
    if (!ok && res.launch_failed)  /* an invalid request fails the launch itself */
        { send_error(c->call_id, &c->e, NULL, 0); return; }
    send_frame(REPLY_LAUNCHED, c->call_id, NULL);
    Wr w = {0};
    w_i32(&w, ok ? S_NONE : c->e.status);
    w_str(&w, ok ? "" : c->e.msg);
    w_shapes(&w, res.shapes, ok || c->e.status == S_OUTPUT_INSUFFICIENT_SIZE ? res.n_shapes : 0);
    w_timing(&w, ok ? res.timing : NO_TIMING);
    send_frame(REPLY_EXECUTION_DONE, c->call_id, &w);
    free(w.p);
}

static bool valid_status(int32_t s)
{
    return (s >= 0 && s <= 8) || s == 10000;
}

static void on_execute_fenced(Call *c)
{
    Exec x;
    read_execution(c, &x);
    uint32_t n_fences = rd_count(&c->r, 4);
    int32_t fence_error = 0;  /* the first fence that stops the execution */
    for (uint32_t i = 0; i < n_fences && !c->r.bad; i++) {
        int32_t state = rd_i32(&c->r);
        if (state != -1 && state != -2 && !valid_status(state))
            malformed(&c->r, "unknown fence state");
        else if (state != S_NONE && !fence_error)
            fence_error = state;
    }
    int64_t after_fence;
    bool has_after = rd_optional_i64(&c->r, &after_fence);
    if (!decoded(c))
        return;
    int64_t launched = now_ns();
    /* No output shapes come back from a fenced execution: every output must be fully specified. */
    const Subgraph *sg = &x.prepared->model.main;
    for (uint32_t i = 0; i < x.q.n_out && i < sg->n_outputs; i++) {
        const Operand *o = &sg->operands[sg->outputs[i]];
        const Argument *g = &x.q.out[i];
        uint32_t rank, dims[MAX_RANK + 1];
        if (g->lifetime == ARG_NO_VALUE || is_scalar_type(o->type))
            continue;
        if (combine(o->rank, o->dims, g->rank, g->dims, &rank, dims, MAX_RANK + 1) && !fully_known(rank, dims))
            { reply_error(c, S_INVALID_ARGUMENT, "execute_fenced: an output has unspecified dimensions"); return; }
    }
    if (fence_error == -1)
        { reply_error(c, S_INVALID_ARGUMENT, "execute_fenced: a null fence"); return; }
    if (fence_error == -2)
        { reply_error(c, S_MISSED_DEADLINE_PERSISTENT, "deadline passed waiting for a fence"); return; }
    if (fence_error)
        { reply_error(c, S_GENERAL_FAILURE, "a waited-for fence signalled an error"); return; }
    int64_t fenced = now_ns();
    if (has_after) {
        int64_t after = absolute(fenced, after_fence);
        x.deadline = x.has_deadline && x.deadline < after ? x.deadline : after;
        x.has_deadline = true;
    }
    Result res = {0};
    if (!execute(&x.prepared->model, &x.q, x.measure, x.has_deadline, x.deadline, c->received, &c->arena,
                 &res, &c->e))
        { send_error(c->call_id, &c->e, NULL, 0); return; }
    Wr w = {0};
    w_i32(&w, S_NONE);
    if (x.measure) {
        int64_t now = now_ns(), device = res.timing.on_device;
        w_timing(&w, (Timing){device, now - launched});
        w_timing(&w, (Timing){device, now - fenced});
    } else {
        w_timing(&w, NO_TIMING);
        w_timing(&w, NO_TIMING);
    }
    send_frame(REPLY_FENCED_DONE, c->call_id, &w);
    free(w.p);
}

static void on_configure_burst(Call *c)
{
    Prepared *p = find_object(rd_u64(&c->r), OBJ_PREPARED);
    if (!p && !c->r.bad)
        malformed(&c->r, "unknown prepared model handle");
    if (!decoded(c))
        return;
    uint64_t handle = new_object(OBJ_BURST, p);  /* a burst keeps its prepared model alive */
    if (!handle)
        { reply_error(c, S_GENERAL_FAILURE, "out of memory"); return; }
    Wr w = {0};
    w_u64(&w, handle);
    send_frame(REPLY_BURST, c->call_id, &w);
    free(w.p);
}

static void on_burst_execute(Call *c)
{
    Exec x;
    x.prepared = find_object(rd_u64(&c->r), OBJ_BURST);
    if (!x.prepared && !c->r.bad)
        malformed(&c->r, "unknown burst handle");
    read_execution_tail(c, &x);
    uint32_t n_tokens = rd_count(&c->r, 8);
    for (uint32_t i = 0; i < n_tokens; i++)
        rd_i64(&c->r);  /* memory identifiers: this burst caches no pools */
    if (!decoded(c))
        return;
    if (n_tokens != x.q.n_pools)
        { reply_error(c, S_INVALID_ARGUMENT, "burst: one memory identifier token per pool needed"); return; }
    run_and_reply(c, &x);
}

static void on_burst_release_memory(Call *c)
{
    Prepared *p = find_object(rd_u64(&c->r), OBJ_BURST);
    rd_i64(&c->r);
    if (!p && !c->r.bad)
        malformed(&c->r, "unknown burst handle");
    if (decoded(c))
        send_frame(REPLY_OK, c->call_id, NULL);
}

/* Device memory and compilation caching are optional for a driver: decline them. */
static void on_not_supported(Call *c)
{
    reply_error(c, S_GENERAL_FAILURE, "not supported by this driver");
}

static void on_buffer_copy(Call *c)
{
    rd_u64(&c->r);
    if (!c->r.bad)
        malformed(&c->r, "unknown buffer handle (this driver allocates no device memory)");
    decoded(c);
}

static void on_region_add(Call *c)
{
    uint64_t id = rd_u64(&c->r), size = rd_u64(&c->r);
    uint32_t len;
    const uint8_t *path = rd_bytes(&c->r, &len);
    if (c->r.bad || c->r.pos != c->r.n || memchr(path, 0, len))
        return;  /* malformed, and no reply to send: ignored */
    char *s = malloc((size_t)len + 1);
    if (!s)
        return;
    memcpy(s, path, len);
    s[len] = 0;
    region_add(id, size, s);
    free(s);
}

static void on_region_remove(Call *c)
{
    uint64_t id = rd_u64(&c->r);
    Region *g = c->r.bad || c->r.pos != c->r.n ? NULL : find_region(id);
    if (g)
        unmap_region(g);  /* nothing else holds its bytes: prepared models keep copies */
}

static void on_release(Call *c)
{
    uint64_t handle = rd_u64(&c->r);
    if (!c->r.bad && c->r.pos == c->r.n)
        release_object(handle);
}

static void dispatch(uint32_t type, Call *c)
{
    switch (type) {
    case HELLO: on_hello(c); return;
    case GET_SUPPORTED_OPERATIONS: on_supported(c); return;
    case PREPARE_MODEL: on_prepare(c); return;
    case PREPARE_MODEL_FROM_CACHE: on_not_supported(c); return;
    case EXECUTE_SYNC: on_execute_sync(c); return;
    case EXECUTE_ASYNC: on_execute_async(c); return;
    case EXECUTE_FENCED: on_execute_fenced(c); return;
    case CONFIGURE_BURST: on_configure_burst(c); return;
    case BURST_EXECUTE: on_burst_execute(c); return;
    case BURST_RELEASE_MEMORY: on_burst_release_memory(c); return;
    case ALLOCATE: on_not_supported(c); return;
    case BUFFER_COPY_TO: case BUFFER_COPY_FROM: on_buffer_copy(c); return;
    case REGION_ADD: on_region_add(c); return;
    case REGION_REMOVE: on_region_remove(c); return;
    case RELEASE: on_release(c); return;
    case TRACE_START: on_trace_start(c); return;
    case TRACE_COLLECT: on_trace_collect(c); return;
    default: reply_error(c, S_INVALID_ARGUMENT, "unknown message type"); return;
    }
}

/* ---- the loop ------------------------------------------------------------------------------ */

static bool read_all(int fd, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

int main(void)
{
    /* stdout carries frames only: keep it for the protocol and point fd 1 at stderr, so that a
     * stray printf can never corrupt the stream. A client that goes away is an EPIPE, not a signal. */
    protocol_out = dup(1);
    if (protocol_out < 0 || dup2(2, 1) < 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        uint8_t header[16];
        if (!read_all(0, header, sizeof header))
            return 0;  /* the client closed the connection */
        uint32_t length = (uint32_t)le(header, 4), type = (uint32_t)le(header + 4, 4);
        if (length < 12 || length > MAX_REQUEST) {
            fprintf(stderr, "nnts_example_driver: frame length %u out of range; closing\n", length);
            return 1;
        }
        uint8_t *body = malloc(length - 12 ? length - 12 : 1);
        if (!body) {
            fprintf(stderr, "nnts_example_driver: no memory for a frame of %u bytes\n", length);
            return 1;
        }
        if (!read_all(0, body, length - 12)) {
            free(body);
            return 0;
        }
        Call c = {.call_id = le(header + 8, 8), .received = now_ns(), .r = {.p = body, .n = length - 12}};
        dispatch(type, &c);
        arena_free(&c.arena);
        free(body);
    }
}
