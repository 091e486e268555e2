/*
 * The non-inference RPCs of the service that read or change the server:
 * health (ServerLive, ServerReady, ModelReady, grpc.health.v1 Check),
 * metadata, ModelConfig, ModelStatistics and the model repository. They
 * answer as Triton's gRPC handlers do (statuses and messages of §5 of the
 * protocol reference) and with the same content as the HTTP routes.
 * Everything here is quick except load and unload, which run on a thread
 * of their own (the core's load blocks) while the call waits.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_internal.h"
#include "grpc_model_config.h"
#include "grpc_service.pb-c.h"
#include "health.pb-c.h"
#include "kserve_metadata.h"
#include "kserve_params.h"
#include "kserve_shm.h"
#include "model_config_from_json.h"
#include "osprey/log.h"
#include "osprey/stats.h"

static void reply_oom(kgrpc_call *call) {
    kgrpc_call_finish(call, NULL, GRPC_STATUS_UNAVAILABLE, "out of memory",
                      false);
}

/* Replies err (freed) when set; true when it did. */
static bool failed(kgrpc_call *call, osp_error *err) {
    if (!err)
        return false;
    kgrpc_call_reply_error(call, err);
    osp_error_free(err);
    return true;
}

static bool server_ready(const kgrpc_server *s) {
    return s->opts.strict_readiness ? osp_server_is_ready(s->opts.core)
                                    : osp_server_is_live(s->opts.core);
}

/* ---- health ---- */

/* Unpacks a request that carries no fields only to check that it parses
 * (Triton answers "Unable to parse request" otherwise). False after
 * replying. */
static bool fieldless_request_parses(kgrpc_call *call,
                                     const ProtobufCMessageDescriptor *desc) {
    ProtobufCMessage *req = kgrpc_call_unpack(call, desc);
    if (!req)
        return false;
    protobuf_c_message_free_unpacked(req, NULL);
    return true;
}

void kgrpc_server_live(kgrpc_call *call) {
    if (!fieldless_request_parses(
            call, &inference__server_live_request__descriptor))
        return;
    Inference__ServerLiveResponse resp = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
    resp.live = osp_server_is_live(call->server->opts.core);
    kgrpc_call_reply(call, &resp.base);
}

void kgrpc_server_ready(kgrpc_call *call) {
    if (!fieldless_request_parses(
            call, &inference__server_ready_request__descriptor))
        return;
    Inference__ServerReadyResponse resp =
        INFERENCE__SERVER_READY_RESPONSE__INIT;
    resp.ready = server_ready(call->server);
    kgrpc_call_reply(call, &resp.base);
}

void kgrpc_health_check(kgrpc_call *call) {
    Grpc__Health__V1__HealthCheckRequest *req =
        (Grpc__Health__V1__HealthCheckRequest *)kgrpc_call_unpack(
            call, &grpc__health__v1__health_check_request__descriptor);
    if (!req)
        return;
    /* Triton answers for the server whatever the service name. */
    Grpc__Health__V1__HealthCheckResponse resp =
        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status =
        server_ready(call->server)
            ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
            : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    protobuf_c_message_free_unpacked(&req->base, NULL);
    kgrpc_call_reply(call, &resp.base);
}

/* An unknown model or version is not an error here: ready is false. */
void kgrpc_model_ready(kgrpc_call *call) {
    Inference__ModelReadyRequest *req =
        (Inference__ModelReadyRequest *)kgrpc_call_unpack(
            call, &inference__model_ready_request__descriptor);
    if (!req)
        return;
    int64_t version;
    osp_error *err = kserve_parse_version(req->version, &version);
    if (!err) {
        Inference__ModelReadyResponse resp =
            INFERENCE__MODEL_READY_RESPONSE__INIT;
        osp_model *model = NULL;
        osp_error *get = osp_server_model_get(call->server->opts.core,
                                              req->name, version, &model);
        resp.ready = get == NULL;
        osp_error_free(get);
        osp_model_unref(model);
        kgrpc_call_reply(call, &resp.base);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
    failed(call, err);
}

/* ---- metadata ---- */

void kgrpc_server_metadata(kgrpc_call *call) {
    if (!fieldless_request_parses(
            call, &inference__server_metadata_request__descriptor))
        return;
    const kgrpc_server *s = call->server;
    Inference__ServerMetadataResponse resp =
        INFERENCE__SERVER_METADATA_RESPONSE__INIT;
    size_t n = 0;
    while (kserve_extensions[n])
        n++;
    resp.name = (char *)(s->opts.server_id ? s->opts.server_id : "triton");
    resp.version = (char *)kserve_server_version();
    resp.n_extensions = n;
    resp.extensions = (char **)kserve_extensions;
    kgrpc_call_reply(call, &resp.base);
}

/* A held reference to the model a (name, version string) request names. */
static osp_error *get_model(kgrpc_call *call, const char *name,
                            const char *version, int64_t *version_num,
                            osp_model **model) {
    osp_error *err = kserve_parse_version(version, version_num);
    if (err)
        return err;
    return osp_server_model_get(call->server->opts.core, name, *version_num,
                                model);
}

/* TensorMetadata of a model's inputs or outputs; the shape has a leading
 * -1 for batching models. `shapes` holds n * (OSP_MAX_DIMS + 1). */
static void
tensor_metadata(const osp_model_io *io, size_t n, bool batch,
                Inference__ModelMetadataResponse__TensorMetadata *tm,
                Inference__ModelMetadataResponse__TensorMetadata **ptrs,
                int64_t *shapes) {
    for (size_t i = 0; i < n; i++) {
        inference__model_metadata_response__tensor_metadata__init(&tm[i]);
        tm[i].name = io[i].name;
        tm[i].datatype = (char *)osp_datatype_wire_name(io[i].dtype);
        int64_t *shape = shapes + i * (OSP_MAX_DIMS + 1);
        size_t k = 0;
        if (batch)
            shape[k++] = -1;
        for (int d = 0; d < io[i].dims.rank; d++)
            shape[k++] = io[i].dims.dims[d];
        tm[i].shape = shape;
        tm[i].n_shape = k;
        ptrs[i] = &tm[i];
    }
}

void kgrpc_model_metadata(kgrpc_call *call) {
    Inference__ModelMetadataRequest *req =
        (Inference__ModelMetadataRequest *)kgrpc_call_unpack(
            call, &inference__model_metadata_request__descriptor);
    if (!req)
        return;
    osp_model *model = NULL;
    int64_t version, *versions = NULL;
    size_t n_versions = 0;
    char **version_text = NULL;
    Inference__ModelMetadataResponse__TensorMetadata *tm = NULL, **ptrs = NULL;
    int64_t *shapes = NULL;
    osp_error *err = get_model(call, req->name, req->version, &version, &model);
    if (err)
        goto out;
    const osp_model_config *cfg = osp_model_get_config(model);
    if (version < 0) {
        if ((err = osp_model_ready_versions(call->server->opts.core, req->name,
                                            &versions, &n_versions)))
            goto out;
    } else {
        if (!(versions = malloc(sizeof *versions))) {
            err = osp_error_out_of_memory();
            goto out;
        }
        versions[0] = version;
        n_versions = 1;
    }
    size_t n_io = cfg->n_inputs + cfg->n_outputs;
    version_text = calloc(n_versions ? n_versions : 1, sizeof *version_text);
    tm = calloc(n_io ? n_io : 1, sizeof *tm);
    ptrs = calloc(n_io ? n_io : 1, sizeof *ptrs);
    shapes = calloc((n_io ? n_io : 1) * (OSP_MAX_DIMS + 1), sizeof *shapes);
    if (!version_text || !tm || !ptrs || !shapes) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < n_versions; i++) {
        if (!(version_text[i] = malloc(24))) {
            err = osp_error_out_of_memory();
            goto out;
        }
        snprintf(version_text[i], 24, "%" PRId64, versions[i]);
    }
    bool batch = cfg->max_batch_size > 0;
    tensor_metadata(cfg->inputs, cfg->n_inputs, batch, tm, ptrs, shapes);
    tensor_metadata(cfg->outputs, cfg->n_outputs, batch, tm + cfg->n_inputs,
                    ptrs + cfg->n_inputs,
                    shapes + cfg->n_inputs * (OSP_MAX_DIMS + 1));
    Inference__ModelMetadataResponse resp =
        INFERENCE__MODEL_METADATA_RESPONSE__INIT;
    resp.name = req->name;
    resp.versions = version_text;
    resp.n_versions = n_versions;
    resp.platform = cfg->platform[0] ? cfg->platform : cfg->backend;
    resp.inputs = ptrs;
    resp.n_inputs = cfg->n_inputs;
    resp.outputs = ptrs + cfg->n_inputs;
    resp.n_outputs = cfg->n_outputs;
    kgrpc_call_reply(call, &resp.base);
out:
    for (size_t i = 0; version_text && i < n_versions; i++)
        free(version_text[i]);
    free(version_text);
    free(versions);
    free(tm);
    free(ptrs);
    free(shapes);
    osp_model_unref(model);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    failed(call, err);
}

void kgrpc_model_config(kgrpc_call *call) {
    Inference__ModelConfigRequest *req =
        (Inference__ModelConfigRequest *)kgrpc_call_unpack(
            call, &inference__model_config_request__descriptor);
    if (!req)
        return;
    osp_model *model = NULL;
    int64_t version;
    osp_error *err = get_model(call, req->name, req->version, &version, &model);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (failed(call, err))
        return;
    size_t len;
    uint8_t *packed =
        kgrpc_pack_model_config_response(osp_model_get_config(model), &len);
    osp_model_unref(model);
    if (!packed) {
        reply_oom(call);
        return;
    }
    grpc_byte_buffer *bb = kgrpc_byte_buffer_copy(packed, len);
    free(packed);
    kgrpc_call_finish(call, bb, GRPC_STATUS_OK, NULL, false);
}

/* ---- statistics ---- */

/* Storage for one model's statistics message. */
typedef struct stats_msg {
    Inference__ModelStatistics model;
    Inference__InferStatistics infer;
    Inference__StatisticDuration durations[8];
    char version[24];
    Inference__InferBatchStatistics *batches;
    Inference__InferBatchStatistics **batch_ptrs;
    Inference__StatisticDuration *batch_durations;
    Inference__ModelStatistics__ResponseStatsEntry *response_entries;
    Inference__ModelStatistics__ResponseStatsEntry **response_ptrs;
    Inference__InferResponseStatistics *responses;
    Inference__StatisticDuration *response_durations;
    char (*response_keys)[24];
} stats_msg;

static Inference__StatisticDuration *duration(Inference__StatisticDuration *d,
                                              const osp_duration_stat *s) {
    inference__statistic_duration__init(d);
    d->count = s->count;
    d->ns = s->ns;
    return d;
}

static bool fill_stats(stats_msg *m, const osp_model_stats *s) {
    inference__model_statistics__init(&m->model);
    inference__infer_statistics__init(&m->infer);
    snprintf(m->version, sizeof m->version, "%" PRId64, s->version);
    m->model.name = s->name;
    m->model.version = m->version;
    m->model.last_inference = s->last_inference_ms;
    m->model.inference_count = s->inference_count;
    m->model.execution_count = s->execution_count;
    m->infer.success = duration(&m->durations[0], &s->success);
    m->infer.fail = duration(&m->durations[1], &s->fail);
    m->infer.queue = duration(&m->durations[2], &s->queue);
    m->infer.compute_input = duration(&m->durations[3], &s->compute_input);
    m->infer.compute_infer = duration(&m->durations[4], &s->compute_infer);
    m->infer.compute_output = duration(&m->durations[5], &s->compute_output);
    m->infer.cache_hit = duration(&m->durations[6], &s->cache_hit);
    m->infer.cache_miss = duration(&m->durations[7], &s->cache_miss);
    m->model.inference_stats = &m->infer;
    size_t nb = s->n_batch_stats;
    m->batches = calloc(nb ? nb : 1, sizeof *m->batches);
    m->batch_ptrs = calloc(nb ? nb : 1, sizeof *m->batch_ptrs);
    m->batch_durations = calloc((nb ? nb : 1) * 3, sizeof *m->batch_durations);
    if (!m->batches || !m->batch_ptrs || !m->batch_durations)
        return false;
    for (size_t i = 0; i < nb; i++) {
        const osp_batch_stat *b = &s->batch_stats[i];
        Inference__InferBatchStatistics *pb = &m->batches[i];
        inference__infer_batch_statistics__init(pb);
        pb->batch_size = b->batch_size;
        pb->compute_input =
            duration(&m->batch_durations[3 * i], &b->compute_input);
        pb->compute_infer =
            duration(&m->batch_durations[3 * i + 1], &b->compute_infer);
        pb->compute_output =
            duration(&m->batch_durations[3 * i + 2], &b->compute_output);
        m->batch_ptrs[i] = pb;
    }
    m->model.batch_stats = m->batch_ptrs;
    m->model.n_batch_stats = nb;
    /* A decoupled model's per-response statistics, keyed by index. */
    size_t nr = s->n_response_stats;
    m->response_entries = calloc(nr ? nr : 1, sizeof *m->response_entries);
    m->response_ptrs = calloc(nr ? nr : 1, sizeof *m->response_ptrs);
    m->responses = calloc(nr ? nr : 1, sizeof *m->responses);
    m->response_durations =
        calloc((nr ? nr : 1) * 6, sizeof *m->response_durations);
    m->response_keys = calloc(nr ? nr : 1, sizeof *m->response_keys);
    if (!m->response_entries || !m->response_ptrs || !m->responses ||
        !m->response_durations || !m->response_keys)
        return false;
    for (size_t i = 0; i < nr; i++) {
        const osp_response_stat *r = &s->response_stats[i];
        Inference__InferResponseStatistics *pr = &m->responses[i];
        Inference__StatisticDuration *d = &m->response_durations[6 * i];
        inference__infer_response_statistics__init(pr);
        pr->compute_infer = duration(&d[0], &r->compute_infer);
        pr->compute_output = duration(&d[1], &r->compute_output);
        pr->success = duration(&d[2], &r->success);
        pr->fail = duration(&d[3], &r->fail);
        pr->empty_response = duration(&d[4], &r->empty_response);
        pr->cancel = duration(&d[5], &r->cancel);
        snprintf(m->response_keys[i], sizeof m->response_keys[i], "%llu",
                 (unsigned long long)r->index);
        inference__model_statistics__response_stats_entry__init(
            &m->response_entries[i]);
        m->response_entries[i].key = m->response_keys[i];
        m->response_entries[i].value = pr;
        m->response_ptrs[i] = &m->response_entries[i];
    }
    m->model.response_stats = m->response_ptrs;
    m->model.n_response_stats = nr;
    return true;
}

void kgrpc_model_statistics(kgrpc_call *call) {
    Inference__ModelStatisticsRequest *req =
        (Inference__ModelStatisticsRequest *)kgrpc_call_unpack(
            call, &inference__model_statistics_request__descriptor);
    if (!req)
        return;
    osp_model_stats *stats = NULL;
    size_t n = 0;
    stats_msg *msgs = NULL;
    Inference__ModelStatistics **ptrs = NULL;
    int64_t version;
    osp_error *err = kserve_parse_version(req->version, &version);
    if (!err)
        err = osp_server_model_statistics(call->server->opts.core, req->name,
                                          version, &stats, &n);
    if (err)
        goto out;
    msgs = calloc(n ? n : 1, sizeof *msgs);
    ptrs = calloc(n ? n : 1, sizeof *ptrs);
    bool ok = msgs && ptrs;
    for (size_t i = 0; ok && i < n; i++) {
        ok = fill_stats(&msgs[i], &stats[i]);
        ptrs[i] = &msgs[i].model;
    }
    if (!ok) {
        err = osp_error_out_of_memory();
        goto out;
    }
    Inference__ModelStatisticsResponse resp =
        INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
    resp.model_stats = ptrs;
    resp.n_model_stats = n;
    kgrpc_call_reply(call, &resp.base);
out:
    for (size_t i = 0; msgs && i < n; i++) {
        free(msgs[i].batches);
        free(msgs[i].batch_ptrs);
        free(msgs[i].batch_durations);
        free(msgs[i].response_entries);
        free(msgs[i].response_ptrs);
        free(msgs[i].responses);
        free(msgs[i].response_durations);
        free(msgs[i].response_keys);
    }
    free(msgs);
    free(ptrs);
    osp_model_stats_free(stats, n);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    failed(call, err);
}

/* ---- repository ---- */

static osp_error *repository_name_error(void) {
    return osp_error_new(OSP_ERROR_UNSUPPORTED,
                         "'repository_name' specification is not supported");
}

void kgrpc_repository_index(kgrpc_call *call) {
    Inference__RepositoryIndexRequest *req =
        (Inference__RepositoryIndexRequest *)kgrpc_call_unpack(
            call, &inference__repository_index_request__descriptor);
    if (!req)
        return;
    osp_repository_entry *entries = NULL;
    size_t n = 0;
    Inference__RepositoryIndexResponse__ModelIndex *models = NULL,
                                                   **ptrs = NULL;
    char(*versions)[24] = NULL;
    osp_error *err = NULL;
    if (req->repository_name && req->repository_name[0]) {
        err = repository_name_error();
        goto out;
    }
    if ((err = osp_server_repository_index(call->server->opts.core, req->ready,
                                           &entries, &n)))
        goto out;
    models = calloc(n ? n : 1, sizeof *models);
    ptrs = calloc(n ? n : 1, sizeof *ptrs);
    versions = calloc(n ? n : 1, sizeof *versions);
    if (!models || !ptrs || !versions) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        inference__repository_index_response__model_index__init(&models[i]);
        models[i].name = entries[i].name;
        if (entries[i].version >= 0)
            snprintf(versions[i], sizeof versions[i], "%" PRId64,
                     entries[i].version);
        models[i].version = versions[i];
        models[i].state = (char *)osp_model_state_name(entries[i].state);
        models[i].reason = entries[i].reason ? entries[i].reason : "";
        ptrs[i] = &models[i];
    }
    Inference__RepositoryIndexResponse resp =
        INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
    resp.models = ptrs;
    resp.n_models = n;
    kgrpc_call_reply(call, &resp.base);
out:
    free(models);
    free(ptrs);
    free(versions);
    osp_repository_index_free(entries, n);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    failed(call, err);
}

/* A load or unload on its own thread; it holds a reference on the call. */
typedef struct control_job {
    kgrpc_call *call;
    bool load;
    char *model;
    osp_load_override override;
    bool has_override;
} control_job;

static void control_job_free(control_job *job) {
    free((char *)job->override.config_pbtxt);
    for (size_t i = 0; i < job->override.n_files; i++) {
        free((char *)job->override.files[i].path);
        free((void *)job->override.files[i].data);
    }
    free((osp_model_file *)job->override.files);
    free(job->model);
    free(job);
}

static void *control_thread(void *p) {
    control_job *job = p;
    kgrpc_call *call = job->call;
    osp_server *core = call->server->opts.core;
    osp_error *err =
        !job->load ? osp_server_unload_model(core, job->model)
        : job->has_override
            ? osp_server_load_model_override(core, job->model, &job->override)
            : osp_server_load_model(core, job->model);
    if (!failed(call, err)) {
        if (job->load) {
            Inference__RepositoryModelLoadResponse resp =
                INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
            kgrpc_call_reply(call, &resp.base);
        } else {
            Inference__RepositoryModelUnloadResponse resp =
                INFERENCE__REPOSITORY_MODEL_UNLOAD_RESPONSE__INIT;
            kgrpc_call_reply(call, &resp.base);
        }
    }
    control_job_free(job);
    kgrpc_call_unref(call);
    return NULL;
}

/* Runs the job on a detached thread; on failure replies and frees it. */
static void control_start(control_job *job) {
    kgrpc_call *call = job->call;
    kgrpc_call_ref(call);
    pthread_t tid;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&tid, &attr, control_thread, job);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        control_job_free(job);
        kgrpc_call_finish(call, NULL, GRPC_STATUS_UNAVAILABLE,
                          "failed to start the model control thread", false);
        kgrpc_call_unref(call);
    }
}

/* One load parameter, as Triton's gRPC load handler takes it: "config" a
 * string_param (ModelConfig JSON), "file:<path>" a bytes_param; any other
 * key is refused. */
static osp_error *
take_load_parameter(control_job *job, const char *key,
                    const Inference__ModelRepositoryParameter *v) {
    if (strcmp(key, "config") == 0) {
        if (!v ||
            v->parameter_choice_case !=
                INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "invalid value type for load parameter '%s', "
                                 "expected string_param.",
                                 key);
        char *pbtxt = NULL;
        osp_error *err = model_config_json_to_pbtxt(
            v->string_param, strlen(v->string_param), &pbtxt);
        if (err)
            return osp_load_override_error(job->model, err);
        free((char *)job->override.config_pbtxt);
        job->override.config_pbtxt = pbtxt;
        job->has_override = true;
        return NULL;
    }
    if (strncmp(key, "file:", 5) == 0) {
        if (!v ||
            v->parameter_choice_case !=
                INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_BYTES_PARAM)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "invalid value type for load parameter '%s', "
                                 "expected bytes_param.",
                                 key);
        osp_load_override *ov = &job->override;
        osp_model_file *files =
            realloc((void *)ov->files, (ov->n_files + 1) * sizeof *files);
        if (files)
            ov->files = files;
        char *path = strdup(key + 5);
        void *data = malloc(v->bytes_param.len ? v->bytes_param.len : 1);
        if (!files || !path || !data) {
            free(path);
            free(data);
            return osp_error_out_of_memory();
        }
        if (v->bytes_param.len)
            memcpy(data, v->bytes_param.data, v->bytes_param.len);
        files[ov->n_files++] = (osp_model_file){path, data, v->bytes_param.len};
        job->has_override = true;
        return NULL;
    }
    return osp_error_new(OSP_ERROR_INVALID_ARG,
                         "unrecognized load parameter '%s'.", key);
}

/* A load (load=true) or unload job of `model` for the call (strings
 * borrowed, copied); a repository name is refused as Triton does. On
 * error *out may still hold a job for control_submit to free. */
static osp_error *control_job_new(kgrpc_call *call, const char *model,
                                  const char *repository_name, bool load,
                                  control_job **out) {
    control_job *job = calloc(1, sizeof *job);
    *out = job;
    if (!job || !(job->model = strdup(model)))
        return osp_error_out_of_memory();
    job->call = call;
    job->load = load;
    if (repository_name && repository_name[0])
        return repository_name_error();
    return NULL;
}

/* Starts job, or answers the call with err (ownership of both moves). */
static void control_submit(kgrpc_call *call, control_job *job, osp_error *err) {
    if (err) {
        if (job)
            control_job_free(job);
        failed(call, err);
        return;
    }
    control_start(job);
}

void kgrpc_repository_load(kgrpc_call *call) {
    Inference__RepositoryModelLoadRequest *req =
        (Inference__RepositoryModelLoadRequest *)kgrpc_call_unpack(
            call, &inference__repository_model_load_request__descriptor);
    if (!req)
        return;
    control_job *job = NULL;
    osp_error *err = control_job_new(call, req->model_name,
                                     req->repository_name, true, &job);
    for (size_t i = 0; i < req->n_parameters && !err; i++)
        err = take_load_parameter(job, req->parameters[i]->key,
                                  req->parameters[i]->value);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    control_submit(call, job, err);
}

void kgrpc_repository_unload(kgrpc_call *call) {
    Inference__RepositoryModelUnloadRequest *req =
        (Inference__RepositoryModelUnloadRequest *)kgrpc_call_unpack(
            call, &inference__repository_model_unload_request__descriptor);
    if (!req)
        return;
    control_job *job = NULL;
    osp_error *err = control_job_new(call, req->model_name,
                                     req->repository_name, false, &job);
    for (size_t i = 0; i < req->n_parameters && !err; i++) {
        const Inference__ModelRepositoryParameter *v =
            req->parameters[i]->value;
        if (strcmp(req->parameters[i]->key, "unload_dependents") != 0)
            continue;
        /* No ensembles: there are no dependents to unload. */
        if (!v ||
            v->parameter_choice_case !=
                INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM)
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "invalid value type for 'unload_dependents' "
                                "parameter, expected bool_param.");
        break;
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
    control_submit(call, job, err);
}
