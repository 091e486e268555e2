/*
 * What initialize(self, args) receives: Triton's args dict, with the model
 * config as JSON, packed into the stub's INIT payload (python_protocol.h).
 */
#pragma once

#include <stdbool.h>

#include "osprey/model_config.h"
#include "python_protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends the fields of `config` (borrowed) that Triton's model_config JSON
 * carries and model.py files read (name, backend, max_batch_size, input,
 * output, instance_group, parameters, dynamic_batching,
 * model_transaction_policy) to `t` as one JSON object. */
void pyargs_config_json(pyproto_text *t, const osp_model_config *config);

typedef struct pyargs_instance {
    const char *model_file;       /* absolute path of model.py */
    const char *model_repository; /* the model's folder, as Triton gives it */
    const char *model_version;    /* "1" */
    const char *instance_name;    /* "<model>_0_<n>" */
    const char *kind;             /* "CPU" or "GPU" */
    int device_id;
    const char *config_json; /* from pyargs_config_json */
    size_t shm_growth, shm_limit;
    size_t frame_max;      /* largest frame it may send (pyproto_frame_max) */
    bool doorbell;         /* it has a doorbell (fd 5, python_watch.h) */
    uint64_t memory_limit; /* the stub's RLIMIT_DATA; 0 = none */
} pyargs_instance;

/* The INIT payload for one instance into `t`. */
void pyargs_init_payload(pyproto_text *t, const char *model_name,
                         const pyargs_instance *instance);

#ifdef __cplusplus
}
#endif
