/* Applying a python model's auto_complete_config answer
 * (python_complete.h). */
#define _GNU_SOURCE
#include "python_complete.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static osp_error *bad_line(const osp_model_config *config, const char *why,
                           const char *line) {
    return osp_error_new(
        OSP_ERROR_INVALID_ARG,
        "python model '%s': auto_complete_config: %s ('%.80s')", config->name,
        why, line);
}

/* Parses "d0,d1,..." (may be empty) into dims. */
static bool parse_dims(const char *s, osp_shape *dims) {
    dims->rank = 0;
    while (*s) {
        char *end = NULL;
        errno = 0;
        long long d = strtoll(s, &end, 10);
        if (errno || end == s || d < -1 || dims->rank == OSP_MAX_DIMS)
            return false;
        dims->dims[dims->rank++] = d;
        if (*end == ',')
            end++;
        else if (*end)
            return false;
        s = end;
    }
    return true;
}

/* Appends one tensor from fields (NAME, TYPE, [OPTIONAL,] DIMS). */
static osp_error *add_io(osp_model_config *config, bool input, char **fields,
                         int n, const char *line) {
    if (n != (input ? 4 : 3) || !fields[0][0])
        return bad_line(config, "malformed tensor", line);
    osp_model_io io = {0};
    io.dtype = osp_datatype_from_config_name(fields[1]);
    if (io.dtype == OSP_TYPE_INVALID)
        return bad_line(config, "unknown data_type", line);
    if (!parse_dims(fields[n - 1], &io.dims))
        return bad_line(config, "bad dims", line);
    io.optional = input && strcmp(fields[2], "1") == 0;
    osp_model_io **list = input ? &config->inputs : &config->outputs;
    size_t *count = input ? &config->n_inputs : &config->n_outputs;
    osp_model_io *grown = realloc(*list, (*count + 1) * sizeof **list);
    if (!grown)
        return osp_error_out_of_memory();
    *list = grown;
    if (!(io.name = strdup(fields[0])))
        return osp_error_out_of_memory();
    grown[(*count)++] = io;
    return NULL;
}

osp_error *pycomplete_apply(osp_model_config *config, const char *text) {
    char *copy = strdup(text);
    if (!copy)
        return osp_error_out_of_memory();
    osp_error *err = NULL;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line && !err;
         line = strtok_r(NULL, "\n", &save)) {
        char original[128];
        snprintf(original, sizeof original, "%s", line);
        char *fields[6];
        int n = 0;
        for (char *f = line; n < 6;) {
            fields[n++] = f;
            char *tab = strchr(f, '\t');
            if (!tab)
                break;
            *tab = '\0';
            f = tab + 1;
        }
        const char *key = fields[0];
        if (strcmp(key, "max_batch_size") == 0 && n == 2) {
            char *end = NULL;
            long v = strtol(fields[1], &end, 10);
            if (*end || end == fields[1] || v < 0 || v > INT32_MAX)
                err = bad_line(config, "bad max_batch_size", original);
            else
                config->max_batch_size = (int32_t)v;
        } else if (strcmp(key, "dynamic_batching") == 0 && n == 1) {
            config->dynamic_batching.enabled = true;
        } else if (strcmp(key, "decoupled") == 0 && n == 2) {
            config->decoupled = strcmp(fields[1], "1") == 0;
        } else if (strcmp(key, "input") == 0 || strcmp(key, "output") == 0) {
            err = add_io(config, key[0] == 'i', fields + 1, n - 1, original);
        } else {
            err = bad_line(config, "unknown line", original);
        }
    }
    free(copy);
    return err;
}
