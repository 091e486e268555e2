/*
 * The "onnxruntime" model backend: Triton's ONNX contract on Osprey's own
 * graph runtime (onnx_runtime.h).
 *
 *   model_new      reads <version>/<default_model_filename or model.onnx>
 *                  (a file, or a folder of that name holding model.onnx
 *                  and its external data), prepares the graph once, and
 *                  checks the config against it with the messages of
 *                  Triton's onnxruntime backend.
 *   instance_new   a session (arena) on the instance's device; the
 *                  weights are the model's on the CPU, one device copy per
 *                  GPU shared by the instances on it. A model with STRING
 *                  tensors runs its graph on the CPU device also for a GPU
 *                  instance (as onnxruntime's CUDA provider runs string
 *                  nodes on the CPU): inputs come to the host, outputs go
 *                  back to the instance's GPU, and the model says so once
 *                  in the log.
 *   execute        the batch's inputs go in where the core put them; the
 *                  outputs the requests asked for are written straight
 *                  into the core's buffers.
 *   auto_complete  Triton's rules for configs without inputs or outputs.
 *
 * A model with sequence_batching: the graph takes the control inputs and
 * the states' input_name tensors the core adds to each batch as graph
 * inputs of those names, and gives each state's next value as the graph
 * output named by its output_name (Triton's onnxruntime backend does the
 * same; see docs/sequence_batching.md).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onnx_runtime.h"
#include "osprey/backend.h"
#include "osprey/log.h"

#define ONNX_DEFAULT_FILENAME "model.onnx"
#define ONNX_DEFAULT_MAX_BATCH_SIZE 4

typedef struct onnx_backend_model {
    char *name;
    onnx_rt_model *rt;
    bool batching;
    int intra_op_threads; /* parameter intra_op_thread_count; 0 = default */
    int cpu_instances;    /* instances the config may put on the CPU */
    /* batch input i (the config's inputs, then those the sequence batcher
     * adds: osp_execute_input order) is graph input input_map[i]; graph
     * output k is config output output_map[k], or -1 when the config
     * leaves it out */
    size_t *input_map;
    size_t n_inputs;        /* batch inputs: every graph input */
    size_t n_config_inputs; /* of which the config's */
    int *output_map;
    /* per graph output: the output_name of the state whose next value it
     * is (borrowed from the config), or NULL */
    const char **state_output;
    size_t n_graph_outputs;
    atomic_bool host_run_logged; /* a GPU instance said it runs on the CPU */
} onnx_backend_model;

/* A STRING tensor's runtime form (onnx_strings.h): its elements as
 * references, in a buffer the instance keeps and grows. */
typedef struct string_refs {
    onnx_string *refs;
    size_t cap; /* elements */
} string_refs;

/* A STRING graph output of this run: the runtime writes references into
 * refs; after the run they become the wire form in the core's buffer
 * `core_index` (its size is only known then). */
typedef struct string_output {
    bool wanted;
    size_t core_index;
    osp_shape shape;
    string_refs buf;
} string_output;

/* A GPU instance whose graph runs on the CPU device (a model with STRING
 * tensors): its own CPU stream, and host buffers (grown, kept) for the
 * inputs that have no host copy and for every output, copied to and
 * from the GPU on the instance's stream. */
typedef struct host_run {
    osp_device *device;   /* the instance's GPU (borrowed) */
    osp_stream *stream;   /* the instance's GPU stream (borrowed) */
    osp_stream *cpu;      /* owned: where the session runs */
    osp_buffer **inputs;  /* per graph input */
    osp_buffer **outputs; /* per graph output */
    void **output_dst;    /* per graph output: the core's GPU buffer, or
                             NULL when this run has none to fill */
    size_t *output_bytes;
} host_run;

typedef struct onnx_backend_instance {
    onnx_backend_model *model;
    onnx_session *session;
    onnx_io *inputs;               /* per graph input, filled each execute */
    string_refs *string_inputs;    /* per graph input */
    string_output *string_outputs; /* per graph output */
    host_run *host;                /* NULL: the session is on the device */
} onnx_backend_instance;

/* The model file of a version folder: default_model_filename, or
 * model.onnx. Caller frees *out. */
static osp_error *model_path(const osp_model_config *config,
                             const char *version_path, char **out) {
    const char *file = config->default_model_filename &&
                               config->default_model_filename[0]
                           ? config->default_model_filename
                           : ONNX_DEFAULT_FILENAME;
    if (strchr(file, '/') || strcmp(file, "..") == 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "default_model_filename '%s' must name a file "
                             "in the version folder",
                             file);
    size_t len = strlen(version_path) + strlen(file) + 2;
    *out = malloc(len);
    if (!*out)
        return osp_error_out_of_memory();
    snprintf(*out, len, "%s/%s", version_path, file);
    return NULL;
}

static osp_error *read_model(const osp_model_config *config,
                             const char *version_path, onnx_model **out) {
    char *path = NULL;
    osp_error *err = model_path(config, version_path, &path);
    if (!err)
        err = onnx_model_load_file(path, NULL, out);
    if (err)
        err = osp_error_wrap(err, "unable to load model '%s'", config->name);
    free(path);
    return err;
}

/* "[a,b,c]" of a graph value's declared dims (-1 where symbolic). */
static void format_dims(const onnx_value_info *vi, char *buf, size_t cap) {
    osp_shape s = {.rank = vi->has_shape ? vi->rank : 0};
    memcpy(s.dims, vi->dims, sizeof s.dims);
    osp_shape_format(&s, buf, cap);
}

/* Whether a graph tensor can carry a batch: dim 0 symbolic. */
static bool batchable(const onnx_value_info *vi) {
    return vi->has_shape && vi->rank >= 1 && vi->dims[0] < 0;
}

static const onnx_value_info *find_value(const onnx_value_info *vis, size_t n,
                                         const char *name, size_t *index) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(vis[i].name, name) == 0) {
            if (index)
                *index = i;
            return &vis[i];
        }
    return NULL;
}

/* "a, b, c": the names of vis, for messages. */
static void list_names(const onnx_value_info *vis, size_t n, char *buf,
                       size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "",
                         vis[i].name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* Checks one config tensor against its graph value: datatype, and dims
 * (with the batch dim when the model batches), as Triton's backends
 * compare them. */
static osp_error *check_tensor(const osp_model_config *config,
                               const osp_model_io *io,
                               const onnx_value_info *vi, const char *kind) {
    if (vi->dtype != io->dtype)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "unable to load model '%s', configuration expects datatype %s "
            "for %s '%s', model provides %s",
            config->name, osp_datatype_config_name(io->dtype), kind,
            io->name, osp_datatype_config_name(vi->dtype));
    if (!vi->has_shape)
        return NULL;
    char graph[256], cfg[256];
    format_dims(vi, graph, sizeof graph);
    bool batching = config->max_batch_size > 0;
    if (batching && !batchable(vi))
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "model '%s', tensor '%s': for the model to support batching the "
            "shape should have at least 1 dimension and the first dimension "
            "must be -1; but shape expected by the model is %s",
            config->name, io->name, graph);
    int skip = batching ? 1 : 0;
    osp_shape full = {.rank = io->dims.rank + skip};
    if (full.rank > OSP_MAX_DIMS)
        full.rank = OSP_MAX_DIMS;
    if (batching)
        full.dims[0] = -1;
    for (int d = 0; d + skip < full.rank; d++)
        full.dims[d + skip] = io->dims.dims[d];
    osp_shape_format(&full, cfg, sizeof cfg);
    bool same = full.rank == vi->rank;
    for (int d = skip; same && d < vi->rank; d++)
        same = vi->dims[d] < 0 || full.dims[d] < 0 ||
               vi->dims[d] == full.dims[d];
    if (!same)
        return osp_error_new(
            OSP_ERROR_INVALID_ARG,
            "model '%s', tensor '%s': the model expects %d dimensions "
            "(shape %s) but the model configuration specifies %d dimensions "
            "(%sshape %s)",
            config->name, io->name, vi->rank, graph, full.rank,
            batching ? "an initial batch dimension because max_batch_size > "
                       "0 followed by the explicit tensor shape, making "
                       "complete "
                     : "",
            cfg);
    return NULL;
}

/* ---- sequence batching --------------------------------------------------
 * The inputs the core adds to a batch of a sequence_batching model come
 * after the config's, in this order: the control inputs, then the states'
 * input_name tensors (osprey/backend.h). */

static size_t sequence_input_count(const osp_model_config *config) {
    const osp_sequence_batching *seq = &config->sequence_batching;
    return seq->enabled ? seq->n_controls + seq->n_states : 0;
}

/* The name of added input k. Borrowed from the config. */
static const char *sequence_input_name(const osp_model_config *config,
                                       size_t k) {
    const osp_sequence_batching *seq = &config->sequence_batching;
    return k < seq->n_controls ? seq->controls[k].name
                               : seq->states[k - seq->n_controls].input_name;
}

/* Whether graph input `name` is one the sequence batcher feeds. */
static bool is_sequence_input(const osp_model_config *config,
                              const char *name) {
    for (size_t k = 0; k < sequence_input_count(config); k++)
        if (strcmp(sequence_input_name(config, k), name) == 0)
            return true;
    return false;
}

/* Whether graph output `name` is a state's next value. */
static bool is_state_output(const osp_model_config *config, const char *name) {
    const osp_sequence_batching *seq = &config->sequence_batching;
    for (size_t k = 0; seq->enabled && k < seq->n_states; k++)
        if (strcmp(seq->states[k].output_name, name) == 0)
            return true;
    return false;
}

/* The ONNX name of a tensor type, as Triton's onnxruntime backend prints
 * it in its sequence control messages (FLOAT, INT32, BOOL, ...). */
static const char *onnx_type_name(osp_datatype dt) {
    switch (dt) {
    case OSP_TYPE_FP32:
        return "FLOAT";
    case OSP_TYPE_FP16:
        return "FLOAT16";
    case OSP_TYPE_FP64:
        return "DOUBLE";
    case OSP_TYPE_BF16:
        return "BFLOAT16";
    case OSP_TYPE_BYTES:
        return "STRING";
    case OSP_TYPE_INVALID:
        return "UNDEFINED";
    default:
        return osp_datatype_wire_name(dt);
    }
}

/* A control input against its graph input, with the messages of Triton's
 * onnxruntime backend: present, dims [1] after the batch dim, the
 * control's datatype (a TYPE_STRING CORRID is a STRING graph input). */
static osp_error *check_control(const osp_model_config *config,
                                const osp_sequence_control *c,
                                const onnx_value_info *vi) {
    if (!vi)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "configuration specified sequence control "
                             "'%s', but model does not provide that input",
                             c->name);
    bool batching = config->max_batch_size > 0;
    if (vi->has_shape) {
        int skip = batching && vi->rank > 0 ? 1 : 0;
        osp_shape debatched = {.rank = vi->rank - skip};
        for (int d = skip; d < vi->rank; d++)
            debatched.dims[d - skip] = vi->dims[d];
        if (debatched.rank != 1 || debatched.dims[0] != 1) {
            char dims[256];
            osp_shape_format(&debatched, dims, sizeof dims);
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "unable to load model '%s', sequence "
                                 "control '%s' in model has dims %s but dims "
                                 "[1] is expected",
                                 config->name, c->name, dims);
        }
        if (batching && !batchable(vi)) {
            char graph[256];
            format_dims(vi, graph, sizeof graph);
            return osp_error_new(
                OSP_ERROR_INVALID_ARG,
                "model '%s', tensor '%s': for the model to support batching "
                "the shape should have at least 1 dimension and the first "
                "dimension must be -1; but shape expected by the model is %s",
                config->name, c->name, graph);
        }
    }
    if (vi->dtype != c->dtype)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "unable to load model '%s', sequence control "
                             "'%s', the model expects data-type %s but the "
                             "model configuration specifies data-type %s",
                             config->name, c->name, onnx_type_name(vi->dtype),
                             osp_datatype_config_name(c->dtype));
    return NULL;
}

/* The graph inputs and outputs of the sequence batcher's tensors: each
 * control and each state's input_name is a graph input (mapped at
 * input_map[config->n_inputs + k]), each state's output_name a graph
 * output (marked in m->state_output), with the types and dims the config
 * gives them. */
static osp_error *check_sequence_tensors(const osp_model_config *config,
                                         const onnx_graph *g,
                                         onnx_backend_model *m) {
    const osp_sequence_batching *seq = &config->sequence_batching;
    if (!seq->enabled)
        return NULL;
    for (size_t k = 0; k < seq->n_controls; k++) {
        size_t gi = 0;
        const onnx_value_info *vi =
            find_value(g->inputs, g->n_inputs, seq->controls[k].name, &gi);
        osp_error *err = check_control(config, &seq->controls[k], vi);
        if (err)
            return err;
        m->input_map[config->n_inputs + k] = gi;
    }
    for (size_t k = 0; k < seq->n_states; k++) {
        const osp_sequence_state *st = &seq->states[k];
        size_t gi = 0, go = 0;
        const onnx_value_info *in =
            find_value(g->inputs, g->n_inputs, st->input_name, &gi);
        const onnx_value_info *out =
            find_value(g->outputs, g->n_outputs, st->output_name, &go);
        if (!in || !out)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "unable to load model '%s', configuration "
                                 "specified state %s '%s', but model does "
                                 "not provide that %s",
                                 config->name, in ? "output" : "input",
                                 in ? st->output_name : st->input_name,
                                 in ? "output" : "input");
        osp_model_io as_input = {
            .name = st->input_name, .dtype = st->dtype, .dims = st->dims};
        osp_model_io as_output = as_input;
        as_output.name = st->output_name;
        osp_error *err = check_tensor(config, &as_input, in, "input");
        if (!err)
            err = check_tensor(config, &as_output, out, "output");
        if (err)
            return err;
        m->input_map[config->n_inputs + seq->n_controls + k] = gi;
        m->state_output[go] = st->output_name;
    }
    return NULL;
}

/* The config's inputs and outputs, and the sequence batcher's tensors,
 * against the graph: names, types, dims; fills the maps. */
static osp_error *check_config(const osp_model_config *config,
                               const onnx_graph *g, onnx_backend_model *m) {
    char names[1024];
    /* The sequence tensors first, as Triton's backend checks its controls
     * before it counts the inputs. */
    osp_error *seq_err = check_sequence_tensors(config, g, m);
    if (seq_err)
        return seq_err;
    size_t fed = config->n_inputs + sequence_input_count(config);
    if (fed > g->n_inputs)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "unable to load model '%s', configuration "
                             "expects %zu inputs, model provides at most %zu",
                             config->name, fed, g->n_inputs);
    for (size_t i = 0; i < config->n_inputs; i++) {
        const osp_model_io *io = &config->inputs[i];
        size_t gi = 0;
        const onnx_value_info *vi =
            find_value(g->inputs, g->n_inputs, io->name, &gi);
        if (!vi) {
            list_names(g->inputs, g->n_inputs, names, sizeof names);
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "unexpected inference input '%s', allowed "
                                 "inputs are: %s",
                                 io->name, names);
        }
        osp_error *err = check_tensor(config, io, vi, "input");
        if (err)
            return err;
        m->input_map[i] = gi;
    }
    /* Every graph input must be fed: the runtime has no defaults. */
    for (size_t gi = 0; gi < g->n_inputs; gi++)
        if (osp_model_config_input_index(config, g->inputs[gi].name) < 0 &&
            !is_sequence_input(config, g->inputs[gi].name))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "unable to load model '%s', the model "
                                 "input '%s' is missing from the "
                                 "configuration",
                                 config->name, g->inputs[gi].name);
    for (size_t k = 0; k < g->n_outputs; k++)
        m->output_map[k] = -1;
    for (size_t i = 0; i < config->n_outputs; i++) {
        const osp_model_io *io = &config->outputs[i];
        size_t k = 0;
        const onnx_value_info *vi =
            find_value(g->outputs, g->n_outputs, io->name, &k);
        if (!vi) {
            list_names(g->outputs, g->n_outputs, names, sizeof names);
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "unexpected inference output '%s', allowed "
                                 "outputs are: %s",
                                 io->name, names);
        }
        osp_error *err = check_tensor(config, io, vi, "output");
        if (err)
            return err;
        m->output_map[k] = (int)i;
    }
    return NULL;
}

/* Triton's onnxruntime parameters intra_op_thread_count (threads one
 * instance's ops may use; 0 or absent: the device's default) and
 * inter_op_thread_count (accepted: the plan runs its steps in order). */
static osp_error *read_thread_counts(const osp_model_config *config,
                                     int *intra) {
    static const char *const keys[] = {"intra_op_thread_count",
                                       "inter_op_thread_count"};
    for (size_t k = 0; k < 2; k++) {
        const char *v = osp_model_config_parameter(config, keys[k]);
        if (!v)
            continue;
        char *end = NULL;
        long n = strtol(v, &end, 10);
        if (!*v || *end || n < 0 || n > 1024)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "unable to load model '%s': parameter '%s' "
                                 "must be a non-negative integer, got '%s'",
                                 config->name, keys[k], v);
        if (k == 0)
            *intra = (int)n;
    }
    return NULL;
}

/* A "true"/"false" model parameter (absent: `fallback`, which a backend
 * setting of the same name with dashes for underscores replaces, as
 * --backend-config=onnxruntime,allow-tf32=true). */
static osp_error *read_bool(const osp_model_config *config, const char *key,
                            const char *setting, bool fallback, bool *out) {
    const char *v = osp_model_config_parameter(config, key);
    const char *what = "parameter", *name = key;
    if (!v && setting &&
        (v = osp_model_config_backend_setting(config, setting))) {
        what = "backend config";
        name = setting;
    }
    if (!v) {
        *out = fallback;
        return NULL;
    }
    if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "unable to load model '%s': %s '%s' must be "
                             "true or false, got '%s'",
                             config->name, what, name, v);
    *out = v[0] == 't';
    return NULL;
}

/* Whether an instance of the model may land on a GPU: a GPU is there and
 * a group asks for KIND_GPU or KIND_AUTO (no group at all is KIND_AUTO). */
static bool may_run_on_gpu(const osp_model_config *config) {
    if (osp_device_cuda_count() == 0)
        return false;
    if (config->n_instance_groups == 0)
        return true;
    for (size_t i = 0; i < config->n_instance_groups; i++) {
        osp_instance_kind kind = config->instance_groups[i].kind;
        if (kind == OSP_INSTANCE_KIND_GPU || kind == OSP_INSTANCE_KIND_AUTO)
            return true;
    }
    return false;
}

/* The GPU options (docs/gpu.md): cuda_graphs (default: Triton's
 * optimization { cuda { graphs } }, false), cuda_graph_max_shapes (input
 * shapes an instance keeps graphs for, 1..1024, default 16), allow_tf32
 * (or --backend-config=onnxruntime,allow-tf32=...; default false) and
 * precision (fp32, the default, or fp16: every FP32 matrix product in
 * FP16 with FP32 accumulation, constant weights held in FP16). allow_tf32
 * and precision are checked everywhere but only kept for a model that may
 * run on a GPU: on the CPU they change nothing, and the plan would still
 * reserve workspace for them. */
static osp_error *read_gpu_options(const osp_model_config *config,
                                   onnx_rt_options *opts) {
    osp_error *err = NULL;
    if ((err = read_bool(config, "cuda_graphs", NULL,
                         config->optimization.cuda_graphs, &opts->graphs)) ||
        (err = read_bool(config, "allow_tf32", "allow-tf32", false,
                         &opts->allow_tf32)))
        return err;
    const char *v = osp_model_config_parameter(config, "precision");
    if (v && strcmp(v, "fp32") != 0 && strcmp(v, "fp16") != 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "unable to load model '%s': parameter "
                             "'precision' must be fp32 or fp16, got '%s'",
                             config->name, v);
    opts->fp16_weights = v && strcmp(v, "fp16") == 0;
    if (!may_run_on_gpu(config))
        opts->allow_tf32 = opts->fp16_weights = false;
    v = osp_model_config_parameter(config, "cuda_graph_max_shapes");
    if (!v)
        return NULL;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 1 || n > 1024)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "unable to load model '%s': parameter "
                             "'cuda_graph_max_shapes' must be an integer "
                             "from 1 to 1024, got '%s'",
                             config->name, v);
    opts->max_graphs = (size_t)n;
    return NULL;
}

/* Instances of groups that run on the CPU (KIND_CPU, or KIND_AUTO, which
 * is the CPU on a machine without GPUs); a count of 0 means 1. */
static int count_cpu_instances(const osp_model_config *config) {
    int64_t n = 0;
    for (size_t i = 0; i < config->n_instance_groups; i++) {
        const osp_instance_group *g = &config->instance_groups[i];
        if (g->kind == OSP_INSTANCE_KIND_CPU ||
            g->kind == OSP_INSTANCE_KIND_AUTO)
            n += g->count > 0 ? g->count : 1;
    }
    return n > 1024 ? 1024 : (int)n;
}

/* The CPUs this process may run on. */
static int usable_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

/* The thread cap of a CPU instance's stream: intra_op_thread_count when
 * given; else, with several CPU instances, the CPUs shared out among
 * them (at least 1 each), so that instances running at once do not
 * oversubscribe the machine; else 0, the device's default. */
static int instance_threads(const onnx_backend_model *m, bool on_cpu) {
    if (m->intra_op_threads > 0)
        return m->intra_op_threads;
    if (!on_cpu || m->cpu_instances <= 1)
        return 0;
    int share = usable_cpus() / m->cpu_instances;
    return share > 1 ? share : 1;
}

static void backend_model_free(void *model) {
    onnx_backend_model *m = model;
    if (!m)
        return;
    onnx_rt_model_free(m->rt);
    free(m->input_map);
    free(m->output_map);
    free(m->state_output);
    free(m->name);
    free(m);
}

static osp_error *backend_model_new(const osp_model_config *config,
                                    const char *version_path, void **out) {
    onnx_model *file = NULL;
    osp_error *err = read_model(config, version_path, &file);
    if (err)
        return err;
    onnx_backend_model *m = calloc(1, sizeof *m);
    if (!m) {
        onnx_model_free(file);
        return osp_error_out_of_memory();
    }
    const onnx_graph *g = file->graph;
    m->n_inputs = config->n_inputs + sequence_input_count(config);
    m->n_config_inputs = config->n_inputs;
    m->n_graph_outputs = g ? g->n_outputs : 0;
    m->batching = config->max_batch_size > 0;
    m->name = strdup(config->name);
    m->input_map = calloc(m->n_inputs + 1, sizeof *m->input_map);
    m->output_map = calloc(m->n_graph_outputs + 1, sizeof *m->output_map);
    m->state_output = calloc(m->n_graph_outputs + 1, sizeof *m->state_output);
    if (!m->name || !m->input_map || !m->output_map || !m->state_output) {
        onnx_model_free(file);
        err = osp_error_out_of_memory();
        goto out;
    }
    if (!g) {
        onnx_model_free(file);
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "unable to load model '%s': the file has no graph",
                            config->name);
        goto out;
    }
    if ((err = check_config(config, g, m))) {
        onnx_model_free(file);
        goto out;
    }
    if ((err = read_thread_counts(config, &m->intra_op_threads))) {
        onnx_model_free(file);
        goto out;
    }
    m->cpu_instances = count_cpu_instances(config);
    onnx_rt_options opts = {.fuse = config->optimization.graph_level != -1};
    if ((err = read_gpu_options(config, &opts))) {
        onnx_model_free(file);
        goto out;
    }
    if ((err = onnx_rt_model_new(file, &opts, &m->rt)))
        err = osp_error_wrap(err, "unable to load model '%s'", config->name);
    for (size_t i = 0; i < config->optimization.n_cpu_accelerators; i++)
        OSP_LOG_WARN("model '%s': CPU execution accelerator '%s' is "
                     "ignored: Osprey runs ONNX models on its own runtime",
                     config->name,
                     config->optimization.cpu_accelerators[i].name);
out:
    if (err) {
        backend_model_free(m);
        return err;
    }
    *out = m;
    return NULL;
}

/* ---- GPU instances of models with STRING tensors ------------------------
 */

static void host_run_free(host_run *h, size_t n_inputs, size_t n_outputs) {
    if (!h)
        return;
    /* the last copies from the host buffers may still be queued */
    osp_error_free(osp_stream_synchronize(h->stream));
    for (size_t i = 0; h->inputs && i < n_inputs; i++)
        osp_buffer_free(h->inputs[i]);
    for (size_t k = 0; h->outputs && k < n_outputs; k++)
        osp_buffer_free(h->outputs[k]);
    free(h->inputs);
    free(h->outputs);
    free(h->output_dst);
    free(h->output_bytes);
    osp_stream_free(h->cpu);
    free(h);
}

/* The host side of a GPU instance of model m (see host_run); *out owned
 * by the caller (host_run_free). */
static osp_error *host_run_new(const onnx_backend_model *m, osp_device *device,
                               osp_stream *stream, host_run **out) {
    host_run *h = calloc(1, sizeof *h);
    if (!h)
        return osp_error_out_of_memory();
    h->device = device;
    h->stream = stream;
    h->inputs = calloc(m->n_inputs + 1, sizeof *h->inputs);
    h->outputs = calloc(m->n_graph_outputs + 1, sizeof *h->outputs);
    h->output_dst = calloc(m->n_graph_outputs + 1, sizeof *h->output_dst);
    h->output_bytes = calloc(m->n_graph_outputs + 1, sizeof *h->output_bytes);
    osp_error *err = h->inputs && h->outputs && h->output_dst && h->output_bytes
                         ? osp_stream_new(osp_device_cpu(), &h->cpu)
                         : osp_error_out_of_memory();
    if (err) {
        host_run_free(h, m->n_inputs, m->n_graph_outputs);
        return err;
    }
    *out = h;
    return NULL;
}

/* *buf with room for `bytes` (host memory for copies to and from h's GPU,
 * pinned where the pool has room), grown as needed. */
static osp_error *host_buffer_reserve(host_run *h, osp_buffer **buf,
                                      size_t bytes) {
    if (*buf && (*buf)->size >= bytes)
        return NULL;
    osp_buffer_free(*buf);
    *buf = NULL;
    return osp_device_alloc_host(h->device, bytes ? bytes : 1, buf);
}

/* Host copies of the batch's inputs for the CPU session: each input's own
 * host bytes where the core has them, else a copy from the GPU (one
 * synchronisation for all). io[gi].data and host_data point at them. */
static osp_error *host_run_inputs(onnx_backend_instance *inst,
                                  osp_execute_ctx *ctx) {
    onnx_backend_model *m = inst->model;
    host_run *h = inst->host;
    bool copied = false;
    osp_error *err = NULL;
    for (size_t i = 0; i < m->n_inputs && !err; i++) {
        const osp_backend_tensor *t = osp_execute_input(ctx, i);
        onnx_io *io = &inst->inputs[m->input_map[i]];
        static const char nothing; /* where an empty input points */
        if (!t->data || t->host_data || t->byte_size == 0) {
            io->data = io->host_data =
                t->data && !t->host_data ? &nothing : t->host_data;
            continue;
        }
        osp_buffer **buf = &h->inputs[m->input_map[i]];
        if (!(err = host_buffer_reserve(h, buf, t->byte_size)))
            err = osp_memcpy_async(h->stream, (*buf)->data, t->data,
                                   t->byte_size, OSP_COPY_DEVICE_TO_HOST);
        io->data = io->host_data = *buf ? (*buf)->data : NULL;
        copied = true;
    }
    return !err && copied ? osp_stream_synchronize(h->stream) : err;
}

/* Graph output `index` of a host run: the core's GPU buffer for it, and a
 * host buffer the CPU session writes, copied into it after the run. */
static osp_error *host_run_output(host_run *h, osp_execute_ctx *ctx,
                                  size_t index, size_t core_index,
                                  const osp_shape *shape, size_t byte_size,
                                  void **data) {
    void *dst = NULL;
    osp_error *err =
        osp_execute_output_alloc(ctx, core_index, shape, byte_size, &dst);
    if (!err)
        err = host_buffer_reserve(h, &h->outputs[index], byte_size);
    if (err)
        return err;
    h->output_dst[index] = dst;
    h->output_bytes[index] = byte_size;
    *data = h->outputs[index]->data;
    return NULL;
}

/* After a host run that succeeded (copy): every output the core wants
 * copied to its GPU buffer on the instance's stream, which is waited for
 * (the host buffers are reused by the next batch). After a failed one,
 * only forgets the outputs. */
static osp_error *host_run_finish(onnx_backend_instance *inst, bool copy) {
    host_run *h = inst->host;
    osp_error *err = NULL;
    for (size_t k = 0; k < inst->model->n_graph_outputs; k++) {
        void *dst = h->output_dst[k];
        h->output_dst[k] = NULL;
        if (copy && !err && dst && h->output_bytes[k])
            err = osp_memcpy_async(h->stream, dst, h->outputs[k]->data,
                                   h->output_bytes[k], OSP_COPY_HOST_TO_DEVICE);
    }
    if (!copy)
        return NULL;
    osp_error *sync = osp_stream_synchronize(h->stream);
    if (err) {
        osp_error_free(sync);
        return err;
    }
    return sync;
}

static void backend_instance_free(void *instance) {
    onnx_backend_instance *inst = instance;
    if (!inst)
        return;
    onnx_session_free(inst->session);
    host_run_free(inst->host, inst->model->n_inputs,
                  inst->model->n_graph_outputs);
    for (size_t i = 0; inst->string_inputs && i < inst->model->n_inputs; i++)
        free(inst->string_inputs[i].refs);
    for (size_t k = 0;
         inst->string_outputs && k < inst->model->n_graph_outputs; k++)
        free(inst->string_outputs[k].buf.refs);
    free(inst->string_inputs);
    free(inst->string_outputs);
    free(inst->inputs);
    free(inst);
}

static osp_error *backend_instance_new(void *model, osp_device *device,
                                       osp_stream *stream, void **out) {
    onnx_backend_model *m = model;
    onnx_backend_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return osp_error_out_of_memory();
    inst->model = m;
    inst->inputs = calloc(m->n_inputs + 1, sizeof *inst->inputs);
    inst->string_inputs = calloc(m->n_inputs + 1, sizeof *inst->string_inputs);
    inst->string_outputs =
        calloc(m->n_graph_outputs + 1, sizeof *inst->string_outputs);
    osp_device_info info;
    osp_device_get_info(device, &info);
    osp_error *err = inst->inputs && inst->string_inputs && inst->string_outputs
                         ? NULL
                         : osp_error_out_of_memory();
    osp_device *run_on = device;
    osp_stream *run_stream = stream;
    if (!err && info.type != OSP_DEVICE_CPU &&
        onnx_rt_model_has_strings(m->rt)) {
        err = host_run_new(m, device, stream, &inst->host);
        run_on = osp_device_cpu();
        run_stream = inst->host ? inst->host->cpu : NULL;
        if (!err && !atomic_exchange(&m->host_run_logged, true))
            OSP_LOG_INFO("model '%s' has STRING tensors: its instances on "
                         "GPUs run the graph on the CPU device, inputs and "
                         "outputs copied to and from the GPU",
                         m->name);
    }
    if (!err)
        err = onnx_session_new(m->rt, run_on, run_stream, &inst->session);
    int threads = instance_threads(m, run_on == osp_device_cpu());
    if (!err && threads > 0)
        err = osp_stream_set_threads(run_stream, threads);
    if (err) {
        backend_instance_free(inst);
        return osp_error_wrap(err, "unable to load model '%s'", m->name);
    }
    *out = inst;
    return NULL;
}

typedef struct output_binding {
    onnx_backend_instance *inst;
    osp_execute_ctx *ctx;
} output_binding;

/* Room for `count` references in r (kept for the next runs). */
static osp_error *string_refs_reserve(string_refs *r, size_t count) {
    if (count <= r->cap)
        return NULL;
    onnx_string *grown = realloc(r->refs, count * sizeof *grown);
    if (!grown)
        return osp_error_out_of_memory();
    r->refs = grown;
    r->cap = count;
    return NULL;
}

/* The buffer of graph output `index` in the core: a requested config
 * output, or a state's next value (always wanted). Sets *core_index, or
 * *wanted = false when nobody wants it. */
static osp_error *output_target(output_binding *b, size_t index, bool *wanted,
                                size_t *core_index) {
    onnx_backend_model *m = b->inst->model;
    int ci = m->output_map[index];
    *wanted = false;
    if (m->state_output[index]) {
        int si = osp_execute_output_index(b->ctx, m->state_output[index]);
        if (si < 0)
            return osp_error_new(OSP_ERROR_INTERNAL,
                                 "model '%s': the core has no state output "
                                 "'%s'",
                                 m->name, m->state_output[index]);
        *wanted = true;
        *core_index = (size_t)si;
        return NULL;
    }
    if (ci < 0 || !osp_execute_output_requested(b->ctx, (size_t)ci))
        return NULL;
    *wanted = true;
    *core_index = (size_t)ci;
    return NULL;
}

/* onnx_output_alloc_fn: the core's buffer for a wanted output; for a
 * STRING output, the instance's reference buffer (see string_output). */
static osp_error *alloc_output(void *arg, size_t index, osp_datatype dtype,
                               const osp_shape *shape, size_t byte_size,
                               void **data) {
    output_binding *b = arg;
    bool wanted = false;
    size_t core_index = 0;
    *data = NULL;
    osp_error *err = output_target(b, index, &wanted, &core_index);
    if (err || !wanted)
        return err;
    if (dtype != OSP_TYPE_BYTES && !b->inst->host)
        return osp_execute_output_alloc(b->ctx, core_index, shape, byte_size,
                                        data);
    if (dtype != OSP_TYPE_BYTES)
        return host_run_output(b->inst->host, b->ctx, index, core_index, shape,
                               byte_size, data);
    string_output *so = &b->inst->string_outputs[index];
    size_t count = byte_size / ONNX_STRING_BYTES;
    if ((err = string_refs_reserve(&so->buf, count ? count : 1)))
        return err;
    so->wanted = true;
    so->core_index = core_index;
    so->shape = *shape;
    *data = so->buf.refs;
    return NULL;
}

/* A STRING input's references into its wire bytes `wire` (t's bytes in
 * host memory: the core's, valid during execute, or a host run's copy).
 * At least 4 bytes per element, so the references take at most 4 times
 * the request's bytes. */
static osp_error *string_input(onnx_backend_instance *inst, size_t gi,
                               const osp_backend_tensor *t, const void *wire,
                               onnx_io *io) {
    int64_t count = 0;
    if (!osp_shape_element_count(&t->shape, &count) || count < 0 ||
        (uint64_t)count > t->byte_size / 4)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "model '%s': input '%s' has %zu bytes, too few "
                             "for its %lld strings",
                             inst->model->name, t->name, t->byte_size,
                             (long long)count);
    string_refs *r = &inst->string_inputs[gi];
    osp_error *err = string_refs_reserve(r, count ? (size_t)count : 1);
    if (err)
        return err;
    char what[256];
    snprintf(what, sizeof what, "model '%s', input '%s'", inst->model->name,
             t->name);
    if ((err =
             onnx_strings_from_wire(wire, t->byte_size, count, r->refs, what)))
        return err;
    io->data = r->refs;
    io->byte_size = (size_t)count * ONNX_STRING_BYTES;
    io->host_data = NULL;
    return NULL;
}

/* After the run: each wanted STRING output's references become the wire
 * form in the core's buffer for it (through a host buffer of a host run,
 * copied to the GPU by host_run_finish). */
static osp_error *finish_string_outputs(onnx_backend_instance *inst,
                                        osp_execute_ctx *ctx) {
    host_run *h = inst->host;
    osp_error *err =
        osp_stream_synchronize(h ? h->cpu : osp_execute_stream(ctx));
    for (size_t k = 0; !err && k < inst->model->n_graph_outputs; k++) {
        string_output *so = &inst->string_outputs[k];
        if (!so->wanted)
            continue;
        so->wanted = false;
        int64_t count = 0;
        osp_shape_element_count(&so->shape, &count);
        size_t bytes = 0;
        void *data = NULL;
        if ((err = onnx_strings_wire_size(so->buf.refs, count, &bytes)))
            break;
        if (h)
            err = host_run_output(h, ctx, k, so->core_index, &so->shape, bytes,
                                  &data);
        else
            err = osp_execute_output_alloc(ctx, so->core_index, &so->shape,
                                           bytes, &data);
        if (err)
            break;
        if (data)
            onnx_strings_to_wire(so->buf.refs, count, data);
    }
    return err;
}

static osp_error *backend_execute(void *instance, osp_execute_ctx *ctx) {
    onnx_backend_instance *inst = instance;
    onnx_backend_model *m = inst->model;
    osp_error *err = NULL;
    for (size_t i = 0; i < m->n_inputs; i++) {
        const osp_backend_tensor *t = osp_execute_input(ctx, i);
        /* A warmup sample of a sequence model names the control and state
         * inputs itself; one it left out cannot run. */
        if (!t || (i >= m->n_config_inputs && !t->data))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "model '%s': input '%s' was not given",
                                 m->name, t && t->name ? t->name : "?");
        onnx_io *io = &inst->inputs[m->input_map[i]];
        io->dtype = t->dtype;
        io->shape = t->shape;
        io->data = t->data;
        io->byte_size = t->byte_size;
        io->host_data = t->host_data;
    }
    /* a host run reads every input on the host */
    if (inst->host && (err = host_run_inputs(inst, ctx)))
        return err;
    for (size_t i = 0; i < m->n_inputs; i++) {
        const osp_backend_tensor *t = osp_execute_input(ctx, i);
        onnx_io *io = &inst->inputs[m->input_map[i]];
        if (t->dtype == OSP_TYPE_BYTES &&
            (err = string_input(inst, m->input_map[i], t,
                                inst->host ? io->data : t->data, io)))
            return err;
    }
    for (size_t k = 0; k < m->n_graph_outputs; k++)
        inst->string_outputs[k].wanted = false;
    output_binding b = {.inst = inst, .ctx = ctx};
    err = onnx_session_run(inst->session, inst->inputs, m->n_inputs,
                           alloc_output, &b);
    if (!err)
        err = finish_string_outputs(inst, ctx);
    if (inst->host) {
        osp_error *done = host_run_finish(inst, err == NULL);
        err = err ? err : done;
    }
    return err;
}

/* ---- auto-complete -----------------------------------------------------
 */

/* The config tensors for graph values vis[n] (the graph's inputs when
 * `inputs`, else its outputs): names, types, dims (after the batch dim
 * when batching; symbolic dims are -1). The sequence batcher's tensors
 * (control inputs, state inputs and outputs) are left out: the core
 * feeds and takes them, a client never sends or receives them. */
static osp_error *complete_tensors(const osp_model_config *config,
                                   const onnx_value_info *vis, size_t n,
                                   bool inputs, bool batching,
                                   osp_model_io **out, size_t *n_out) {
    const char *model = config->name;
    osp_model_io *ios = calloc(n ? n : 1, sizeof *ios);
    if (!ios)
        return osp_error_out_of_memory();
    osp_error *err = NULL;
    size_t kept = 0;
    for (size_t i = 0; i < n && !err; i++) {
        const onnx_value_info *vi = &vis[i];
        if (inputs ? is_sequence_input(config, vi->name)
                   : is_state_output(config, vi->name))
            continue;
        osp_model_io *io = &ios[kept++];
        if (!(io->name = strdup(vi->name))) {
            err = osp_error_out_of_memory();
            break;
        }
        io->dtype = vi->dtype;
        if (vi->dtype == OSP_TYPE_INVALID)
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "unable to autofill for '%s', tensor '%s' "
                                "has a type the backend does not support",
                                model, vi->name);
        else if (!vi->has_shape)
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "unable to autofill for '%s', tensor '%s' "
                                "has no shape in the model",
                                model, vi->name);
        int skip = batching ? 1 : 0;
        io->dims.rank = vi->rank - skip;
        for (int d = skip; !err && d < vi->rank; d++)
            io->dims.dims[d - skip] = vi->dims[d] < 0 ? -1 : vi->dims[d];
        if (!err && io->dims.rank == 0)
            err = osp_error_new(
                OSP_ERROR_INVALID_ARG,
                "unable to autofill for '%s', tensor '%s' is a scalar, "
                "which a configuration cannot declare for a model %s",
                model, vi->name,
                batching ? "whose only dimension is the batch"
                         : "that does not batch");
    }
    if (err) {
        for (size_t i = 0; i < kept; i++)
            free(ios[i].name);
        free(ios);
        return err;
    }
    *out = ios;
    *n_out = kept;
    return NULL;
}

/* Triton's onnxruntime auto-complete (only called when the config has no
 * inputs or no outputs): what is missing comes from the graph; the model
 * batches when every input and output has a symbolic first dim, and then
 * max_batch_size 0 becomes default-max-batch-size (4, or
 * --backend-config=onnxruntime,default-max-batch-size=N) and a model
 * without a scheduler gets dynamic_batching {}. A max_batch_size the
 * graph cannot batch is an error. Unlike Triton's, which lists every
 * graph tensor, the sequence batcher's control and state tensors are not
 * made config inputs or outputs (see complete_tensors). */
static osp_error *backend_auto_complete(osp_model_config *config,
                                        const char *version_path) {
    onnx_model *file = NULL;
    osp_error *err = read_model(config, version_path, &file);
    if (err)
        return err;
    const onnx_graph *g = file->graph;
    if (!g) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "unable to autofill for '%s', the file has no "
                            "graph",
                            config->name);
        goto out;
    }
    bool can_batch = g->n_inputs + g->n_outputs > 0;
    for (size_t i = 0; i < g->n_inputs; i++)
        can_batch &= batchable(&g->inputs[i]);
    for (size_t i = 0; i < g->n_outputs; i++)
        can_batch &= batchable(&g->outputs[i]);
    if (config->max_batch_size > 0 && !can_batch) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "unable to autofill for '%s', configuration "
                            "specified max-batch %d but model only supports "
                            "max-batch 0",
                            config->name, config->max_batch_size);
        goto out;
    }
    if (config->max_batch_size == 0 && can_batch) {
        long dflt = ONNX_DEFAULT_MAX_BATCH_SIZE;
        const char *setting =
            osp_model_config_backend_setting(config, "default-max-batch-size");
        if (setting) {
            char *end = NULL;
            dflt = strtol(setting, &end, 10);
            if (!*setting || *end || dflt < 0 || dflt > INT32_MAX) {
                err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                    "backend config 'default-max-batch-size' "
                                    "must be a non-negative integer, got "
                                    "'%s'",
                                    setting);
                goto out;
            }
        }
        config->max_batch_size = (int32_t)dflt;
        /* As Triton: not for a sequence model, whose scheduler is the
         * sequence batcher. */
        if (dflt > 0 && !config->dynamic_batching.enabled &&
            !config->sequence_batching.enabled)
            config->dynamic_batching.enabled = true;
    }
    bool batching = config->max_batch_size > 0;
    if (config->n_inputs == 0 &&
        (err = complete_tensors(config, g->inputs, g->n_inputs, true, batching,
                                &config->inputs, &config->n_inputs)))
        goto out;
    if (config->n_outputs == 0)
        err = complete_tensors(config, g->outputs, g->n_outputs, false,
                               batching, &config->outputs, &config->n_outputs);
out:
    onnx_model_free(file);
    return err;
}

const osp_backend builtin_backend_onnxruntime = {
    .name = "onnxruntime",
    .model_new = backend_model_new,
    .model_free = backend_model_free,
    .instance_new = backend_instance_new,
    .instance_free = backend_instance_free,
    .execute = backend_execute,
    .auto_complete = backend_auto_complete,
};
