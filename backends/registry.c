/* Name -> built-in backend (osp_backend_find, osprey/backend.h). */
#include <stddef.h>
#include <string.h>

#include "builtin.h"

static const osp_backend *const builtin_backends[] = {
    &osp_backend_identity,
    &osp_backend_add_sub,
    &osp_backend_dense,
};

const osp_backend *osp_backend_find(const char *name) {
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof builtin_backends / sizeof *builtin_backends;
         i++) {
        if (strcmp(builtin_backends[i]->name, name) == 0)
            return builtin_backends[i];
    }
    return NULL;
}
