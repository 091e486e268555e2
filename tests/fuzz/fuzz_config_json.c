/*
 * libFuzzer target for the load API's "config" parameter: ModelConfig JSON
 * rewritten as protobuf text (server/http/model_config_from_json.c), then
 * parsed by the config parser. Any input must give a config or an error
 * without crashing, leaking or reading out of bounds. Build: see README.md.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model_config_from_json.h"
#include "osprey/model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *json = malloc(size + 1); /* the rewrite needs json[size] == 0 */
    if (!json)
        return 0;
    memcpy(json, data, size);
    json[size] = '\0';
    char *text = NULL;
    osp_error *err = model_config_json_to_pbtxt(json, size, &text);
    if (!err) {
        osp_model_config *cfg = NULL;
        err = osp_model_config_parse(text, strlen(text), "fuzz", &cfg);
        osp_model_config_free(cfg);
    }
    osp_error_free(err);
    free(text);
    free(json);
    return 0;
}
