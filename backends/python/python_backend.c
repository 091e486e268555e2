/*
 * The python backend: Triton's model.py files (class TritonPythonModel) run
 * unchanged, each instance in its own stub process (python_stub.h) that
 * executes stub/osprey_python_stub.py in the configured Python. A batch's
 * inputs are copied once into the shared-memory region the stub maps;
 * execute() gets one InferenceRequest per request of the batch, whose
 * tensors are numpy views of its own rows there. The stub writes each
 * request's response into the region and the server answers each request
 * with its own outputs or error (osp_execute_respond). A decoupled model's
 * instance has a reader thread (python_decoupled.h); one that is not has
 * a watcher of its channel between requests, for the BLS calls of its
 * model's threads (python_watch.h).
 *
 * Settings (--backend-config=python,<key>=<value>):
 *   python-executable         the Python to run (default: python3 in PATH);
 *                             a model's EXECUTION_ENV_PATH parameter, a
 *                             Python prefix folder, wins over it
 *   shm-default-byte-size     initial region size (Triton's; 1 MiB)
 *   shm-growth-byte-size      growth step (Triton's; 1 MiB)
 *   shm-region-max-byte-size  largest region, and the most tensor bytes
 *                             of a frame with tensors inline (Osprey's;
 *                             1 GiB)
 *   stub-timeout-seconds      how long initialize may take (Triton's; 30)
 *   execute-timeout-seconds   how long one execute may take before the stub
 *                             is killed and restarted (Osprey's; 0 = none;
 *                             a model parameter of that name wins)
 *   stub-memory-limit-byte-size  the stub's RLIMIT_DATA; a MemoryError in
 *                             execute then ends the stub, which is
 *                             restarted (Osprey's; 0 = none; a model
 *                             parameter of that name wins)
 * Model parameter FORCE_CPU_ONLY_INPUT_TENSORS (Triton's, "yes" or "no",
 * default "yes"): with "no", a GPU instance hands its inputs (but BYTES
 * ones) to the stub as GPU tensors, without the copy into the region.
 * GPU tensors the model returns (Tensor.from_dlpack) come back through
 * CUDA IPC and are copied once into the response (python_gpu.h).
 * A stub that dies fails its batch with "Stub process '<instance>' is not
 * healthy." and is started again for the next batch.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../builtin.h"
#include "osprey/clock.h"
#include "osprey/log.h"
#include "python_args.h"
#include "python_complete.h"
#include "python_decoupled.h"
#include "python_gpu.h"
#include "python_protocol.h"
#include "python_requests.h"
#include "python_stub.h"
#include "python_watch.h"

#ifndef OSPREY_PYTHON_STUB_DIR
#define OSPREY_PYTHON_STUB_DIR "backends/python/stub"
#endif

/* The server BLS requests go to (attach_server); one server per process
 * runs python models. */
static _Atomic(osp_server *) bls_server;

static void python_attach_server(osp_server *server) {
    atomic_store(&bls_server, server);
}

typedef struct python_model {
    char *name;
    char *model_file;       /* absolute path of model.py */
    char *model_repository; /* the model's folder */
    char *version;          /* "1" */
    char *python;           /* executable */
    char *stub_script;
    char *config_json;
    /* per config output, then per sequence_batching state (its
     * output_name: the response tensor that is the next state) */
    osp_datatype *output_dtypes;
    char **output_names;
    size_t n_outputs; /* config outputs */
    size_t n_states;
    size_t shm_initial, shm_growth, shm_limit;
    uint64_t memory_limit; /* stub-memory-limit-byte-size; 0 = none */
    uint64_t init_timeout_ns, execute_timeout_ns;
    bool decoupled; /* responses come through the response sender */
    /* FORCE_CPU_ONLY_INPUT_TENSORS "no": a GPU instance's inputs go to
     * the stub as GPU tensors */
    bool gpu_inputs;
    atomic_int next_instance;
} python_model;

typedef struct python_instance {
    python_model *model;
    osp_device *device;
    bool on_gpu;
    int device_id;
    pystub stub;
    uint64_t batches;  /* EXECs sent: RESPONSE frames name theirs */
    pydec *dec;        /* a decoupled model's open requests; else NULL */
    pybls_outbox *bls; /* else: its BLS calls; owned */
    pywatch *watch;    /* else: its channel between requests; owned */
} python_instance;

/* Reads a size or seconds setting: the model parameter `key` if given and
 * `model_param`, else --backend-config's, else `fallback`. */
static osp_error *read_setting(const osp_model_config *config, const char *key,
                               bool model_param, uint64_t fallback,
                               uint64_t *out) {
    const char *v =
        model_param ? osp_model_config_parameter(config, key) : NULL;
    if (!v)
        v = osp_model_config_backend_setting(config, key);
    if (!v) {
        *out = fallback;
        return NULL;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-')
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "python model '%s': setting '%s' must be a "
                             "non-negative integer, got '%s'",
                             config->name, key, v);
    *out = n;
    return NULL;
}

/* Triton's FORCE_CPU_ONLY_INPUT_TENSORS: "yes" (the default) or "no". */
static osp_error *read_force_cpu_inputs(const osp_model_config *config,
                                        bool *gpu_inputs) {
    const char *v =
        osp_model_config_parameter(config, "FORCE_CPU_ONLY_INPUT_TENSORS");
    *gpu_inputs = v && strcmp(v, "no") == 0;
    if (v && strcmp(v, "no") != 0 && strcmp(v, "yes") != 0)
        return osp_error_new(OSP_ERROR_UNSUPPORTED,
                             "Incorrect value for "
                             "FORCE_CPU_ONLY_INPUT_TENSORS: '%s' (\"yes\" or "
                             "\"no\")",
                             v);
    return NULL;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The Python to run: EXECUTION_ENV_PATH (a Python prefix folder; Triton's
 * $$TRITON_MODEL_DIRECTORY names the model's folder), else the
 * python-executable setting, else python3. Messages never name server
 * paths. */
static osp_error *choose_python(const osp_model_config *config,
                                const char *model_dir, char **out) {
    const char *env = osp_model_config_parameter(config, "EXECUTION_ENV_PATH");
    if (!env || !*env) {
        const char *exe =
            osp_model_config_backend_setting(config, "python-executable");
        *out = strdup(exe && *exe ? exe : "python3");
        return *out ? NULL : osp_error_out_of_memory();
    }
    static const char token[] = "$$TRITON_MODEL_DIRECTORY";
    char prefix[PATH_MAX];
    const char *at = strstr(env, token);
    int n = at ? snprintf(prefix, sizeof prefix, "%.*s%s%s", (int)(at - env),
                          env, model_dir, at + strlen(token))
               : snprintf(prefix, sizeof prefix, "%s", env);
    if (n < 0 || (size_t)n >= sizeof prefix)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "python model '%s': EXECUTION_ENV_PATH is too "
                             "long",
                             config->name);
    struct stat st;
    if (ends_with(prefix, ".tar.gz") || ends_with(prefix, ".tgz") ||
        (stat(prefix, &st) == 0 && S_ISREG(st.st_mode)))
        return osp_error_new(
            OSP_ERROR_UNSUPPORTED,
            "python model '%s': EXECUTION_ENV_PATH names an archive (a "
            "conda-pack tarball); Osprey runs an unpacked Python "
            "environment: point EXECUTION_ENV_PATH at its folder, the one "
            "holding bin/python3",
            config->name);
    char exe[PATH_MAX];
    n = snprintf(exe, sizeof exe, "%s/bin/python3", prefix);
    if (n < 0 || (size_t)n >= sizeof exe || access(exe, X_OK) != 0)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "python model '%s': EXECUTION_ENV_PATH holds "
                             "no executable bin/python3",
                             config->name);
    *out = strdup(exe);
    return *out ? NULL : osp_error_out_of_memory();
}

/* The stub's script: $OSPREY_PYTHON_STUB_DIR (an installed copy) or the
 * source tree's. Returns buf. */
static const char *stub_script_path(char *buf, size_t cap) {
    const char *dir = getenv("OSPREY_PYTHON_STUB_DIR");
    snprintf(buf, cap, "%s/osprey_python_stub.py",
             dir && *dir ? dir : OSPREY_PYTHON_STUB_DIR);
    return buf;
}

/* Finds `<version_path>/<default_model_filename or model.py>` and sets
 * *file (its absolute path), *model_dir (the model's folder) and *version
 * (the version folder's name); the caller owns all three. */
static osp_error *locate_model_file(const osp_model_config *config,
                                    const char *version_path, char **file,
                                    char **model_dir, char **version) {
    const char *name = config->default_model_filename[0]
                           ? config->default_model_filename
                           : "model.py";
    char path[PATH_MAX], dir[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", version_path, name);
    if (!realpath(path, dir))
        return osp_error_new(OSP_ERROR_NOT_FOUND,
                             "python model '%s': no '%s' in the version folder",
                             config->name, name);
    *file = strdup(dir);
    *strrchr(dir, '/') = '\0'; /* the version folder */
    *version = strdup(strrchr(dir, '/') + 1);
    *strrchr(dir, '/') = '\0'; /* the model's folder */
    *model_dir = strdup(dir);
    if (*file && *version && *model_dir)
        return NULL;
    free(*file);
    free(*version);
    free(*model_dir);
    *file = *version = *model_dir = NULL;
    return osp_error_out_of_memory();
}

static void python_model_free(void *opaque) {
    python_model *m = opaque;
    if (!m)
        return;
    for (size_t i = 0; i < m->n_outputs + m->n_states && m->output_names; i++)
        free(m->output_names[i]);
    free(m->output_names);
    free(m->output_dtypes);
    free(m->name);
    free(m->model_file);
    free(m->model_repository);
    free(m->version);
    free(m->python);
    free(m->stub_script);
    free(m->config_json);
    free(m);
}

static osp_error *python_model_new(const osp_model_config *config,
                                   const char *version_path, void **out) {
    osp_error *err = NULL;
    uint64_t timeout_s = 0, exec_timeout_s = 0;
    python_model *m = calloc(1, sizeof *m);
    if (!m)
        return osp_error_out_of_memory();
    if ((err = locate_model_file(config, version_path, &m->model_file,
                                 &m->model_repository, &m->version)))
        goto out;
    char script[PATH_MAX];
    m->stub_script = strdup(stub_script_path(script, sizeof script));
    m->name = strdup(config->name);
    if (!m->stub_script || !m->name) {
        err = osp_error_out_of_memory();
        goto out;
    }
    if ((err = choose_python(config, m->model_repository, &m->python)))
        goto out;
    uint64_t v;
    if ((err = read_setting(config, "shm-default-byte-size", false, 1u << 20,
                            &v)))
        goto out;
    m->shm_initial = v;
    if ((err =
             read_setting(config, "shm-growth-byte-size", false, 1u << 20, &v)))
        goto out;
    m->shm_growth = v ? v : 1u << 20;
    if ((err = read_setting(config, "shm-region-max-byte-size", false,
                            1ull << 30, &v)))
        goto out;
    m->shm_limit = v;
    if ((err = read_setting(config, "stub-timeout-seconds", false, 30,
                            &timeout_s)) ||
        (err = read_setting(config, "execute-timeout-seconds", true, 0,
                            &exec_timeout_s)))
        goto out;
    if ((err = read_setting(config, "stub-memory-limit-byte-size", true, 0,
                            &m->memory_limit)) ||
        (err = read_force_cpu_inputs(config, &m->gpu_inputs)))
        goto out;
    m->init_timeout_ns = timeout_s * 1000000000ull;
    m->execute_timeout_ns = exec_timeout_s * 1000000000ull;
    pyproto_text json = {0};
    pyargs_config_json(&json, config);
    m->config_json = json.data;
    m->decoupled = config->decoupled;
    m->n_outputs = config->n_outputs;
    const osp_sequence_batching *seq = &config->sequence_batching;
    m->n_states = seq->enabled ? seq->n_states : 0;
    if (m->decoupled && m->n_states) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "python model '%s': implicit state "
                            "(sequence_batching state) is not supported for "
                            "a decoupled model",
                            config->name);
        goto out;
    }
    size_t n_named = m->n_outputs + m->n_states;
    m->output_dtypes = calloc(n_named + 1, sizeof *m->output_dtypes);
    m->output_names = calloc(n_named + 1, sizeof *m->output_names);
    if (json.failed || !m->output_dtypes || !m->output_names) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t o = 0; o < n_named; o++) {
        const osp_sequence_state *st =
            o < m->n_outputs ? NULL : &seq->states[o - m->n_outputs];
        m->output_dtypes[o] = st ? st->dtype : config->outputs[o].dtype;
        if (!(m->output_names[o] =
                  strdup(st ? st->output_name : config->outputs[o].name))) {
            err = osp_error_out_of_memory();
            goto out;
        }
    }
out:
    if (err)
        python_model_free(m);
    else
        *out = m;
    return err;
}

/* Starts the instance's stub and runs initialize(); on failure the stub is
 * stopped and the error says why (the Python exception as Triton shows
 * it, or that the stub died). */
static osp_error *instance_start(python_instance *inst) {
    python_model *m = inst->model;
    pystub_options options = {
        .python = m->python,
        .stub_script = m->stub_script,
        .shm_initial = m->shm_initial,
        .shm_growth = m->shm_growth,
        .shm_limit = m->shm_limit,
        .doorbell_fd = inst->watch ? pywatch_doorbell_fd(inst->watch) : 0,
    };
    osp_error *err = pystub_start(&inst->stub, &options);
    if (err)
        return err;
    pyargs_instance args = {
        .model_file = m->model_file,
        .model_repository = m->model_repository,
        .model_version = m->version,
        .instance_name = inst->stub.name,
        .kind = inst->on_gpu ? "GPU" : "CPU",
        .device_id = inst->device_id,
        .config_json = m->config_json,
        .shm_growth = m->shm_growth,
        .shm_limit = m->shm_limit,
        .frame_max = inst->stub.max_frame,
        .doorbell = inst->watch != NULL,
        .memory_limit = m->memory_limit,
    };
    pyproto_text init = {0};
    pyargs_init_payload(&init, m->name, &args);
    if (init.failed) {
        pyproto_text_free(&init);
        pystub_stop(&inst->stub, 0);
        return osp_error_out_of_memory();
    }
    uint32_t type = 0;
    uint8_t *reply = NULL;
    size_t len = 0;
    pystub_call_status st =
        pystub_call(&inst->stub, PYPROTO_INIT, init.data, init.len,
                    osp_now_ns() + m->init_timeout_ns, &type, &reply, &len);
    pyproto_text_free(&init);
    if (st == PYSTUB_TIMED_OUT)
        err = osp_error_new(OSP_ERROR_UNAVAILABLE,
                            "python model '%s': initialize of instance '%s' "
                            "did not finish within stub-timeout-seconds",
                            m->name, inst->stub.name);
    else if (st == PYSTUB_DEAD)
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "python model '%s': the stub of instance '%s' "
                            "exited during initialize (its output is in the "
                            "server log; is numpy installed in its Python?)",
                            m->name, inst->stub.name);
    else if (type != PYPROTO_OK)
        err = osp_error_new(OSP_ERROR_INTERNAL, "%s",
                            type == PYPROTO_ERROR ? (char *)reply
                                                  : "unexpected answer");
    free(reply);
    if (err)
        pystub_stop(&inst->stub, 0);
    return err;
}

static void convert_response(const void *model, const pyproto_response *resp,
                             const uint8_t *data, osp_sent_response *sent,
                             osp_infer_output **outputs);

/* A model that is not decoupled: the outbox of the instance's BLS calls
 * and the watcher of its channel between requests (python_watch.h),
 * watching from now on. */
static osp_error *instance_watch_new(python_instance *inst) {
    if (!(inst->bls =
              pybls_outbox_new(pyproto_frame_max(inst->model->shm_limit))))
        return osp_error_new(OSP_ERROR_UNAVAILABLE,
                             "python backend: cannot make the BLS outbox "
                             "(out of memory or file descriptors)");
    inst->stub.bls = inst->bls;
    osp_error *err = pywatch_new(&inst->stub, inst->bls, &inst->watch);
    if (err) {
        pybls_outbox_unref(inst->bls);
        inst->bls = inst->stub.bls = NULL;
    }
    return err;
}

/* Stops the watcher and drops the outbox (calls still in the core keep it
 * until they end, their answers dropped). The stub is already stopped. */
static void instance_watch_free(python_instance *inst) {
    pywatch_free(inst->watch);
    inst->watch = NULL;
    if (inst->bls) {
        pybls_outbox_close(inst->bls);
        pybls_outbox_unref(inst->bls);
        inst->bls = inst->stub.bls = NULL;
    }
}

static osp_error *python_instance_new(void *opaque, osp_device *device,
                                      osp_stream *stream, void **out) {
    (void)stream;
    python_model *m = opaque;
    python_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return osp_error_out_of_memory();
    osp_device_info info;
    osp_device_get_info(device, &info);
    inst->model = m;
    inst->device = device;
    inst->on_gpu = info.type == OSP_DEVICE_CUDA;
    inst->device_id = info.index;
    inst->stub.control = -1;
    inst->stub.region.fd = -1;
    inst->stub.server = atomic_load(&bls_server);
    snprintf(inst->stub.name, sizeof inst->stub.name, "%s_0_%d", m->name,
             atomic_fetch_add(&m->next_instance, 1));
    osp_error *err = m->decoupled ? NULL : instance_watch_new(inst);
    if (err) {
        free(inst);
        return err;
    }
    if (inst->watch)
        pywatch_take(inst->watch);
    err = instance_start(inst);
    if (inst->watch)
        pywatch_give(inst->watch);
    if (!err && m->decoupled) {
        /* The reader thread owns the channel's reads from now on. */
        if (!(inst->dec = malloc(sizeof *inst->dec))) {
            err = osp_error_out_of_memory();
        } else {
            err = pydec_init(inst->dec, &inst->stub, m, m->name,
                             convert_response);
            if (!err && (err = pydec_start(inst->dec)))
                pydec_destroy(inst->dec);
            if (err) {
                free(inst->dec);
                inst->dec = NULL;
            }
        }
        if (err)
            pystub_stop(&inst->stub, 0);
    }
    if (err) {
        instance_watch_free(inst);
        free(inst);
        return err;
    }
    *out = inst;
    return NULL;
}

static void python_instance_free(void *opaque) {
    python_instance *inst = opaque;
    if (!inst)
        return;
    if (inst->dec) {
        pydec_stop(inst->dec, 5000);
        pydec_destroy(inst->dec);
        free(inst->dec);
    }
    if (inst->watch)
        pywatch_stop(inst->watch); /* finalize's calls: pystub_stop's */
    pystub_stop(&inst->stub, 5000);
    instance_watch_free(inst);
    free(inst);
}

/* Whether input `t` goes to the stub as a GPU tensor (exported, not
 * copied): FORCE_CPU_ONLY_INPUT_TENSORS "no" on a GPU instance, as
 * Triton hands over inputs that are in GPU memory; BYTES inputs always
 * travel in the region. */
static bool input_stays_on_gpu(const python_instance *inst,
                               const osp_backend_tensor *t) {
    return inst->on_gpu && inst->model->gpu_inputs &&
           t->dtype != OSP_TYPE_BYTES && t->byte_size > 0;
}

/* Copies a batch input from the instance's device into the region: on a
 * GPU an async copy on the batch's stream, ordered after the core's input
 * uploads (place_inputs waits for it before the stub reads the region).
 * Responses come back in host memory, so nothing is copied the other
 * way. */
static osp_error *copy_input_to_region(python_instance *inst,
                                       osp_execute_ctx *ctx, void *dst,
                                       const void *src, size_t n) {
    if (n == 0)
        return NULL;
    if (!inst->on_gpu) {
        memcpy(dst, src, n);
        return NULL;
    }
    return osp_memcpy_async(osp_execute_stream(ctx), dst, src, n,
                            OSP_COPY_DEVICE_TO_HOST);
}

/* The batch's requests as pyreq_append_requests reads them (caller frees
 * *out): the core's views, or for a context without them one request with
 * the batch's outputs. */
static osp_error *batch_requests(const osp_execute_ctx *ctx, size_t n_outputs,
                                 osp_batch_request **out, bool **wanted) {
    size_t n = osp_execute_request_count(ctx);
    *out = calloc(n, sizeof **out);
    *wanted = calloc(n_outputs + 1, sizeof **wanted);
    if (!*out || !*wanted)
        return osp_error_out_of_memory();
    for (size_t o = 0; o < n_outputs; o++)
        (*wanted)[o] = osp_execute_output_requested(ctx, o);
    for (size_t r = 0; r < n; r++) {
        const osp_batch_request *view = osp_execute_request(ctx, r);
        (*out)[r] =
            view ? *view
                 : (osp_batch_request){.id = "", .output_requested = *wanted};
    }
    return NULL;
}

/* Places the batch's inputs in the region once and builds the EXEC
 * payload: one request per request of the batch, each viewing its own
 * rows of the inputs (python_requests.h). */
static osp_error *place_inputs(python_instance *inst, osp_execute_ctx *ctx,
                               pyproto_text *exec) {
    python_model *m = inst->model;
    size_t n_in = osp_execute_input_count(ctx), end = 0, n_placed = 0;
    for (size_t i = 0; i < n_in; i++) {
        const osp_backend_tensor *t = osp_execute_input(ctx, i);
        if (builtin_input_given(t) && !input_stays_on_gpu(inst, t))
            end = pyshm_align(end) + t->byte_size;
    }
    if (end == SIZE_MAX)
        end = SIZE_MAX - 1;
    osp_error *err = pyshm_region_reserve(&inst->stub.region, end);
    if (err)
        return err;
    pyreq_input *placed = calloc(n_in + 1, sizeof *placed);
    osp_batch_request *requests = NULL;
    bool *wanted = NULL;
    if (!placed) {
        err = osp_error_out_of_memory();
        goto out;
    }
    size_t offset = 0;
    for (size_t i = 0; i < n_in && !err; i++) {
        const osp_backend_tensor *t = osp_execute_input(ctx, i);
        if (!builtin_input_given(t))
            continue;
        if (input_stays_on_gpu(inst, t)) {
            pyreq_input *in = &placed[n_placed++];
            *in = (pyreq_input){.name = t->name,
                                .dtype = t->dtype,
                                .shape = t->shape,
                                .byte_size = t->byte_size,
                                .on_gpu = true};
            uint64_t at = 0;
            err = pygpu_export(inst->device, t->data, &in->gpu, &at);
            in->offset = (size_t)at;
            continue;
        }
        offset = pyshm_align(offset);
        err = copy_input_to_region(inst, ctx, inst->stub.region.base + offset,
                                   t->data, t->byte_size);
        placed[n_placed++] = (pyreq_input){
            .name = t->name,
            .dtype = t->dtype,
            .shape = t->shape,
            .offset = offset,
            .byte_size = t->byte_size,
            .bytes = (const uint8_t *)inst->stub.region.base + offset,
        };
        offset += t->byte_size;
    }
    if (!err && inst->on_gpu)
        err = osp_stream_synchronize(osp_execute_stream(ctx));
    if (!err)
        err = batch_requests(ctx, m->n_outputs, &requests, &wanted);
    if (err)
        goto out;
    uint64_t head[3] = {inst->stub.region.size, pyshm_align(offset),
                        ++inst->batches};
    pyproto_text_append(exec, head, sizeof head);
    err = pyreq_append_requests(exec, placed, n_placed, requests,
                                osp_execute_request_count(ctx), m->output_names,
                                m->n_outputs);
    if (!err && exec->failed)
        err = osp_error_out_of_memory();
out:
    free(placed);
    free(requests);
    free(wanted);
    return err;
}

/* The osp_error of a stub's error response. */
static osp_error *response_error(const pyproto_response *resp) {
    return osp_error_new(pyproto_error_code(resp->error_code), "%s",
                         resp->error_message);
}

/* Fills `sent` from the stub's response `resp`, whose tensors lie at
 * `data` + their offsets: its error, or its outputs copied into host
 * buffers (the core takes them; *outputs is the array, the caller frees
 * it after sending). A state output whose datatype is not the config's
 * makes it an error response. */
static void sent_from_stub(const python_model *m, const pyproto_response *resp,
                           const uint8_t *data, osp_sent_response *sent,
                           osp_infer_output **outputs) {
    *sent = (osp_sent_response){0};
    *outputs = NULL;
    if (resp->is_error) {
        sent->error = response_error(resp);
        return;
    }
    if (!(*outputs = calloc(resp->n_outputs + 1, sizeof **outputs))) {
        sent->error = osp_error_out_of_memory();
        return;
    }
    sent->outputs = *outputs;
    size_t n_named = m->n_outputs + m->n_states; /* config outputs, states */
    for (size_t k = 0; k < resp->n_outputs && !sent->error; k++) {
        const pyproto_output *out = &resp->outputs[k];
        /* Triton passes an output with the datatype the model gave it,
         * whatever the config says; only a state's must be the config's
         * (the next state's buffer is sized by it). */
        size_t o = m->n_outputs;
        while (o < n_named && strcmp(m->output_names[o], out->name) != 0)
            o++;
        if (o < n_named && out->dtype != m->output_dtypes[o]) {
            sent->error = osp_error_new(
                OSP_ERROR_INTERNAL,
                "python model '%s': state output '%s' is %s but the model "
                "configuration says %s",
                m->name, out->name, osp_datatype_wire_name(out->dtype),
                osp_datatype_wire_name(m->output_dtypes[o]));
            break;
        }
        osp_buffer *buf =
            osp_buffer_new_host(out->byte_size ? out->byte_size : 1);
        if (!buf) {
            sent->error = osp_error_out_of_memory();
            break;
        }
        osp_error *copy = pygpu_read_tensor(out, data, buf->data);
        if (copy) {
            osp_buffer_free(buf);
            sent->error =
                osp_error_new(osp_error_get_code(copy), "python model '%s': %s",
                              m->name, osp_error_message(copy));
            osp_error_free(copy);
            break;
        }
        (*outputs)[k] = (osp_infer_output){.name = out->name,
                                           .dtype = out->dtype,
                                           .shape = out->shape,
                                           .data = buf,
                                           .byte_size = out->byte_size};
        sent->n_outputs = k + 1;
    }
    if (sent->error) { /* an error response instead: no outputs */
        for (size_t k = 0; k < sent->n_outputs; k++)
            osp_buffer_free((*outputs)[k].data);
        sent->outputs = NULL;
        sent->n_outputs = 0;
    }
}

/* sent_from_stub as the decoupled reader calls it (pydec_convert_fn). */
static void convert_response(const void *model, const pyproto_response *resp,
                             const uint8_t *data, osp_sent_response *sent,
                             osp_infer_output **outputs) {
    sent_from_stub(model, resp, data, sent, outputs);
}

/* Answers each request of the batch with its response of the stub's
 * RESULT (as many as requests, in order): its outputs or its error. */
static osp_error *answer_requests(python_instance *inst, osp_execute_ctx *ctx,
                                  const pyproto_result *result) {
    size_t n = osp_execute_request_count(ctx);
    if (result->n_responses != n)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "python backend: %zu responses for %zu requests",
                             result->n_responses, n);
    osp_error *err = NULL;
    for (size_t r = 0; r < n && !err; r++) {
        osp_sent_response sent;
        osp_infer_output *outputs = NULL;
        sent_from_stub(inst->model, &result->responses[r],
                       (const uint8_t *)inst->stub.region.base, &sent,
                       &outputs);
        err = osp_execute_respond(ctx, r, &sent);
        free(outputs);
    }
    return err;
}

/* Runs a decoupled model's request (its batch is one request) on the
 * instance's open-request table (python_decoupled.h): returns once the
 * stub's execute has returned; the request's responses keep flowing to its
 * sender from the reader thread until its final flag. */
static osp_error *execute_decoupled(python_instance *inst, osp_execute_ctx *ctx,
                                    const pyproto_text *exec,
                                    uint64_t deadline) {
    osp_response_sender *sender = osp_execute_response_sender(ctx, 0);
    if (!sender)
        return osp_error_new(OSP_ERROR_INTERNAL,
                             "python backend: no response sender");
    osp_error *err =
        pydec_execute(inst->dec, sender, inst->batches, exec, deadline);
    if (err && pydec_is_dead(inst->dec))
        OSP_LOG_ERROR("python model '%s': the stub of instance '%s' died",
                      inst->model->name, inst->stub.name);
    return err;
}

/* Runs one batch on the stub; a dead or hung stub fails the batch with
 * Triton's "not healthy" message and is restarted for the next one. The
 * caller holds the channel of a model that is not decoupled. */
static osp_error *execute_batch(python_instance *inst, osp_execute_ctx *ctx) {
    python_model *m = inst->model;
    osp_error *err = NULL;
    pyproto_text exec = {0};
    uint8_t *reply = NULL;
    size_t len = 0;
    uint32_t type = 0;

    if (inst->dec && pydec_is_dead(inst->dec))
        pydec_reap(inst->dec); /* the reader has ended its requests */
    if (inst->stub.pid == 0) {
        OSP_LOG_WARN("python model '%s': restarting the stub of instance '%s'",
                     m->name, inst->stub.name);
        if ((err = instance_start(inst)))
            return err;
        if (inst->dec && (err = pydec_start(inst->dec))) {
            pystub_stop(&inst->stub, 0);
            return err;
        }
    }
    if ((err = place_inputs(inst, ctx, &exec)))
        goto out;
    uint64_t deadline =
        m->execute_timeout_ns ? osp_now_ns() + m->execute_timeout_ns : 0;
    if (m->decoupled) {
        err = execute_decoupled(inst, ctx, &exec, deadline);
        goto out;
    }
    inst->stub.exec_ctx = ctx; /* for request.is_cancelled() */
    inst->stub.exec_batch = inst->batches;
    pystub_call_status st =
        pystub_call(&inst->stub, PYPROTO_EXEC, exec.data, exec.len, deadline,
                    &type, &reply, &len);
    inst->stub.exec_ctx = NULL;
    if (st != PYSTUB_ANSWERED) {
        OSP_LOG_ERROR("python model '%s': the stub of instance '%s' %s",
                      m->name, inst->stub.name,
                      st == PYSTUB_TIMED_OUT
                          ? "did not answer within execute-timeout-seconds "
                            "and was killed"
                          : "died");
        err = pystub_unhealthy_error(&inst->stub);
        goto out;
    }
    if (type == PYPROTO_ERROR) {
        err = osp_error_new(OSP_ERROR_INTERNAL, "%s", (char *)reply);
        goto out;
    }
    pyproto_result result;
    if (type != PYPROTO_RESULT ||
        (err = pyproto_result_decode(reply, len, &result))) {
        if (!err)
            err = osp_error_new(OSP_ERROR_INTERNAL,
                                "python backend: unexpected answer %u from "
                                "the stub",
                                type);
        goto out;
    }
    err = pyshm_region_follow(&inst->stub.region, result.region_size);
    if (!err)
        err = answer_requests(inst, ctx, &result);
    /* The stub may free the GPU tensors it lent now: copied, or failed. */
    pygpu_release(&inst->stub, result.responses, result.n_responses);
    pyproto_result_destroy(&result);
out:
    free(reply);
    pyproto_text_free(&exec);
    return err;
}

static osp_error *python_execute(void *opaque, osp_execute_ctx *ctx) {
    python_instance *inst = opaque;
    if (!inst->watch)
        return execute_batch(inst, ctx);
    pywatch_take(inst->watch);
    osp_error *err = execute_batch(inst, ctx);
    pywatch_give(inst->watch);
    return err;
}

/* Triton's auto_complete_config: a short-lived stub imports model.py, runs
 * TritonPythonModel.auto_complete_config on the config so far and answers
 * what it added (python_complete.h). */
static osp_error *python_auto_complete(osp_model_config *config,
                                       const char *version_path) {
    char *file = NULL, *model_dir = NULL, *version = NULL, *python = NULL;
    uint64_t timeout_s = 0;
    pyproto_text request = {0};
    pystub stub = {.control = -1, .region.fd = -1};
    uint8_t *reply = NULL;
    size_t len = 0;
    uint32_t type = 0;
    osp_error *err = NULL;
    char script[PATH_MAX];
    stub_script_path(script, sizeof script);
    if ((err = locate_model_file(config, version_path, &file, &model_dir,
                                 &version)) ||
        (err = choose_python(config, model_dir, &python)) ||
        (err = read_setting(config, "stub-timeout-seconds", false, 30,
                            &timeout_s)))
        goto out;
    snprintf(stub.name, sizeof stub.name, "%s_auto_complete", config->name);
    pystub_options options = {.python = python,
                              .stub_script = script,
                              .shm_growth = 4096,
                              .shm_limit = 4096};
    if ((err = pystub_start(&stub, &options)))
        goto out;
    pyproto_text_printf(&request, "{\"model_file\":");
    pyproto_text_json_string(&request, file);
    pyproto_text_printf(&request, ",\"model_repository\":");
    pyproto_text_json_string(&request, model_dir);
    pyproto_text_printf(&request, ",\"config\":");
    pyargs_config_json(&request, config);
    pyproto_text_printf(&request, "}");
    if (request.failed) {
        err = osp_error_out_of_memory();
        goto out;
    }
    pystub_call_status st = pystub_call(
        &stub, PYPROTO_AUTO_COMPLETE, request.data, request.len,
        osp_now_ns() + timeout_s * 1000000000ull, &type, &reply, &len);
    if (st != PYSTUB_ANSWERED)
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "python model '%s': the stub exited or hung "
                            "during auto_complete_config (its output is in "
                            "the server log)",
                            config->name);
    else if (type == PYPROTO_ERROR)
        err = osp_error_new(OSP_ERROR_INTERNAL, "%s", (char *)reply);
    else
        err = pycomplete_apply(config, (char *)reply);
out:
    pystub_stop(&stub, 0);
    pyproto_text_free(&request);
    free(reply);
    free(file);
    free(model_dir);
    free(version);
    free(python);
    return err;
}

const osp_backend builtin_backend_python = {
    .name = "python",
    .model_new = python_model_new,
    .model_free = python_model_free,
    .instance_new = python_instance_new,
    .instance_free = python_instance_free,
    .execute = python_execute,
    .auto_complete = python_auto_complete,
    .attach_server = python_attach_server,
};
