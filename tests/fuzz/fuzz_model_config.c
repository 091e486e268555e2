/*
 * libFuzzer target for the config.pbtxt parser (pbtxt.c + model_config.c)
 * and, on what parses, an ensemble's graph checks (ensemble_graph.c).
 * Any input must give either a config or an INVALID_ARG error, without
 * crashing, leaking or reading out of bounds. Build: see README.md.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ensemble_graph.h"
#include "osprey/model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size copy, so ASan catches any read past `size`. */
    char *text = malloc(size ? size : 1);
    if (!text)
        return 0;
    if (size)
        memcpy(text, data, size);

    osp_model_config *cfg = NULL;
    osp_error *err = osp_model_config_parse(text, size, "fuzz.pbtxt", &cfg);
    if (err) {
        if (osp_error_get_code(err) != OSP_ERROR_INVALID_ARG &&
            osp_error_get_code(err) != OSP_ERROR_INTERNAL)
            abort(); /* parse errors are INVALID_ARG (INTERNAL: OOM) */
        if (strncmp(osp_error_message(err), "fuzz.pbtxt:", 11) != 0 &&
            osp_error_get_code(err) == OSP_ERROR_INVALID_ARG)
            abort(); /* every message names the file */
        osp_error_free(err);
    } else {
        /* Touch the result the way the server does. */
        for (size_t i = 0; i < cfg->n_inputs; i++)
            if (osp_model_config_input_index(cfg, cfg->inputs[i].name) !=
                (int)i)
                abort();
        for (size_t i = 0; i < cfg->n_outputs; i++)
            if (osp_model_config_output_index(cfg, cfg->outputs[i].name) !=
                (int)i)
                abort();
        if (!cfg->name || !cfg->platform || !cfg->backend)
            abort();
        osp_model_config_parameter(cfg, "key");
        /* An ensemble's graph checks; a graph that passes gets a plan. */
        osp_error *graph = ensemble_check_config(cfg);
        ensemble_plan *plan = NULL;
        if (!graph && cfg->ensemble_scheduling.enabled) {
            graph = ensemble_plan_new(cfg, &plan);
            ensemble_plan_free(plan);
        }
        osp_error_free(graph);
        osp_model_config_free(cfg);
    }
    free(text);
    return 0;
}
