/* Model warmup (see warmup.h). */
#include "warmup.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model_internal.h"
#include "osprey/log.h"

/* A warmup input file larger than this is refused. */
#define WARMUP_FILE_MAX_BYTES (64u << 20)

/* One input of a sample: where it goes and the bytes of one batch row. */
typedef struct warmup_tensor {
    const osp_warmup_input *config;
    size_t input;    /* batch input index: config inputs, then extras */
    osp_buffer *row; /* owned */
} warmup_tensor;

/* The outcome of one sample request (its completion callback's user). */
typedef struct warmup_outcome {
    osp_error *error; /* owned; NULL on success */
} warmup_outcome;

/* A sample request's responses (a decoupled model may send none, only
 * the final flag): the first error is the sample's. */
static void warmup_respond(osp_infer_response *resp, bool final, void *user) {
    (void)final;
    warmup_outcome *outcome = user;
    if (resp && resp->error && !outcome->error)
        outcome->error = osp_error_new(osp_error_get_code(resp->error), "%s",
                                       osp_error_message(resp->error));
    osp_infer_response_free(resp);
}

/* The batch input named `name`: config input or sequence extra. */
static bool find_input(const osp_model *model, const char *name, size_t *index,
                       osp_datatype *dtype) {
    const osp_model_config *cfg = model->config;
    int i = osp_model_config_input_index(cfg, name);
    if (i >= 0) {
        *index = (size_t)i;
        *dtype = cfg->inputs[i].dtype;
        return true;
    }
    size_t extras =
        model->sequences ? sequence_batcher_extra_inputs(model->sequences) : 0;
    for (size_t k = 0; k < extras; k++) {
        const char *extra;
        sequence_batcher_extra_input(model->sequences, k, &extra, dtype);
        if (!strcmp(extra, name)) {
            *index = cfg->n_inputs + k;
            return true;
        }
    }
    return false;
}

/* Reads warmup/<file> of the model folder (the version folder's parent). */
static osp_error *read_warmup_file(const osp_model *model,
                                   const osp_warmup_input *in,
                                   osp_buffer **out) {
    char path[PATH_MAX];
    const char *slash = strrchr(model->version_path, '/');
    int dir_len = slash ? (int)(slash - model->version_path) : 1;
    snprintf(path, sizeof path, "%.*s/warmup/%s", dir_len,
             slash ? model->version_path : ".", in->input_data_file);
    osp_error *err = NULL;
    struct stat info;
    FILE *f = fopen(path, "rb");
    if (!f || fstat(fileno(f), &info) != 0 ||
        (size_t)info.st_size > WARMUP_FILE_MAX_BYTES) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "failed to read input data file 'warmup/%s' of "
                            "input '%s': %s",
                            in->input_data_file, in->key,
                            f ? "larger than 64 MiB" : strerror(errno));
    } else if (!(*out = osp_buffer_new_host((size_t)info.st_size))) {
        err = osp_error_out_of_memory();
    } else if (info.st_size && fread((*out)->data, 1, (size_t)info.st_size,
                                     f) != (size_t)info.st_size) {
        osp_buffer_free(*out);
        *out = NULL;
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "failed to read input data file 'warmup/%s'",
                            in->input_data_file);
    }
    if (f)
        fclose(f);
    return err;
}

/* One batch row of input `in`, as Triton builds it: zeros; random bytes
 * (a fixed seed, so every load warms up alike; BYTES get zeros: empty
 * elements); or the file's first bytes (BYTES: the whole file). Triton's
 * messages for dims left variable, no data kind, and a short file. */
static osp_error *make_row(const osp_model *model, const osp_warmup_input *in,
                           osp_buffer **out) {
    int64_t elements = 1;
    for (int d = 0; d < in->dims.rank; d++) {
        if (in->dims.dims[d] < 0)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "warmup setting expects all variable-size "
                                 "dimensions are specified for input '%s'",
                                 in->key);
        elements *= in->dims.dims[d];
        if (elements > (int64_t)WARMUP_FILE_MAX_BYTES)
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "warmup input '%s' is larger than 64 MiB",
                                 in->key);
    }
    bool bytes = in->dtype == OSP_TYPE_BYTES;
    size_t size =
        (size_t)elements * (bytes ? 4 : osp_datatype_byte_size(in->dtype));
    if (in->data == OSP_WARMUP_DATA_UNSET)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "warmup setting expects input '%s' to have "
                             "input_data_type set",
                             in->key);
    if (in->data == OSP_WARMUP_INPUT_DATA_FILE) {
        osp_buffer *file = NULL;
        osp_error *err = read_warmup_file(model, in, &file);
        if (err || bytes) {
            *out = file;
            return err;
        }
        if (file->size < size) {
            /* Triton's words, its missing space included */
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "warmup setting expects %zu bytes, but the "
                                "data provided from %sonly has %zu bytes",
                                size, in->input_data_file, file->size);
        } else if (!(*out = osp_buffer_new_host(size))) {
            err = osp_error_out_of_memory();
        } else if (size) {
            memcpy((*out)->data, file->data, size);
        }
        osp_buffer_free(file);
        return err;
    }
    if (!(*out = osp_buffer_new_host(size)))
        return osp_error_out_of_memory();
    unsigned char *p = (*out)->data;
    memset(p, 0, size);
    uint32_t x = 2463534242u;
    for (size_t i = 0; in->data == OSP_WARMUP_RANDOM_DATA && !bytes && i < size;
         i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
    return NULL;
}

/* Builds a request of the sample (rows repeated batch_size times) as the
 * scheduler would have taken it from the queue. Caller owns *out. */
static osp_error *make_request(osp_model *model, const osp_model_warmup *w,
                               const warmup_tensor *tensors,
                               warmup_outcome *outcome, pending_request **out) {
    const osp_model_config *cfg = model->config;
    int64_t rows = cfg->max_batch_size > 0 ? (int64_t)w->batch_size : 1;
    size_t n_map = model_batch_input_count(model);
    pending_request *p = calloc(1, sizeof(*p));
    if (!p)
        return osp_error_out_of_memory();
    p->model = model_ref(model);
    p->respond = warmup_respond;
    p->user = outcome;
    p->batch_size = cfg->max_batch_size > 0 ? rows : 0;
    p->req = osp_infer_request_new(cfg->name, model->version);
    p->input_map = malloc(sizeof(int) * (n_map + 1));
    p->output_requested = calloc(cfg->n_outputs + 1, sizeof(bool));
    p->response_outputs = calloc(cfg->n_outputs + 1, sizeof(size_t));
    osp_error *err = NULL;
    if (!p->req || !p->input_map || !p->output_requested ||
        !p->response_outputs) {
        err = osp_error_out_of_memory();
        goto out;
    }
    for (size_t i = 0; i < n_map; i++)
        p->input_map[i] = -1;
    for (size_t o = 0; o < cfg->n_outputs; o++) {
        p->output_requested[o] = true;
        p->response_outputs[o] = o;
    }
    p->n_response_outputs = cfg->n_outputs;
    for (size_t i = 0; i < w->n_inputs && !err; i++) {
        const warmup_tensor *t = &tensors[i];
        osp_shape shape = {0};
        if (cfg->max_batch_size > 0)
            shape.dims[shape.rank++] = rows;
        for (int d = 0; d < t->config->dims.rank; d++)
            shape.dims[shape.rank++] = t->config->dims.dims[d];
        osp_buffer *data = osp_buffer_new_host(t->row->size * (size_t)rows);
        if (!data) {
            err = osp_error_out_of_memory();
            break;
        }
        for (int64_t r = 0; r < rows; r++)
            memcpy((char *)data->data + (size_t)r * t->row->size, t->row->data,
                   t->row->size);
        err = osp_infer_request_add_input(p->req, t->config->key,
                                          t->config->dtype, &shape, data);
        if (err)
            osp_buffer_free(data);
        else
            p->input_map[t->input] = (int)(p->req->n_inputs - 1);
    }
out:
    if (err) {
        pending_request_free(p);
        return err;
    }
    *out = p;
    return NULL;
}

/* Runs sample w on every instance, w->count times each. */
static osp_error *run_sample(osp_model *model, const osp_model_warmup *w) {
    osp_error *err = NULL;
    warmup_tensor *tensors = calloc(w->n_inputs + 1, sizeof(*tensors));
    if (!tensors)
        return osp_error_out_of_memory();
    for (size_t i = 0; i < w->n_inputs && !err; i++) {
        const osp_warmup_input *in = &w->inputs[i];
        osp_datatype dtype;
        tensors[i].config = in;
        if (!find_input(model, in->key, &tensors[i].input, &dtype))
            err = osp_error_new(OSP_ERROR_INVALID_ARG,
                                "unexpected inference input '%s' for model "
                                "'%s'",
                                in->key, model->config->name);
        else if (dtype != in->dtype)
            err = osp_error_new(
                OSP_ERROR_INVALID_ARG,
                "inference input '%s' data-type is '%s', but model '%s' "
                "expects '%s'",
                in->key, osp_datatype_wire_name(in->dtype), model->config->name,
                osp_datatype_wire_name(dtype));
        else
            err = make_row(model, in, &tensors[i].row);
    }
    uint32_t count = w->count ? w->count : 1;
    for (size_t n = 0; n < model->n_instances && !err; n++) {
        for (uint32_t c = 0; c < count && !err; c++) {
            /* Triton's words, which its QA greps for (the instance named
             * as Triton names those of a model's first group). */
            OSP_LOG_VERBOSE("model '%s' instance %s_0_%zu is running "
                            "warmup sample '%s' for iteration %u",
                            model->config->name, model->config->name, n,
                            w->name, c + 1);
            warmup_outcome outcome = {0};
            pending_request *p = NULL;
            if ((err = make_request(model, w, tensors, &outcome, &p)))
                break;
            instance_execute_batch(&model->instances[n], &p, 1);
            err = outcome.error;
        }
    }
    for (size_t i = 0; i < w->n_inputs; i++)
        osp_buffer_free(tensors[i].row);
    free(tensors);
    return err;
}

osp_error *warmup_run(osp_model *model) {
    const osp_model_config *cfg = model->config;
    osp_error *err = NULL;
    for (size_t w = 0; w < cfg->n_warmups && !err; w++) {
        const osp_model_warmup *sample = &cfg->warmups[w];
        if (sample->batch_size == 0) {
            OSP_LOG_VERBOSE("skipping batch 0 warmup sample '%s'",
                            sample->name);
            continue;
        }
        if ((err = run_sample(model, sample))) {
            /* As Triton: each response error followed by "; ". */
            osp_error *wrapped = osp_error_new(
                OSP_ERROR_INVALID_ARG, "failed to run warmup sample '%s': %s; ",
                sample->name, osp_error_message(err));
            osp_error_free(err);
            err = wrapped;
        }
        else
            OSP_LOG_INFO("model '%s' version %lld: warmup sample '%s' ran %u "
                         "time(s) on each of %zu instance(s)",
                         cfg->name, (long long)model->version, sample->name,
                         sample->count ? sample->count : 1, model->n_instances);
    }
    if (cfg->n_warmups == 0 || err)
        return err;
    /* The samples do not count: statistics start when the model is ready. */
    model_stats_destroy(&model->stats);
    return model_stats_init(&model->stats, cfg->max_batch_size);
}
