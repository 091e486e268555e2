/*
 * Several repositories as one source (see repository_set.h). Each member
 * is asked in turn; the set keeps no state of its own between calls.
 */
#include "repository_set.h"

#include <stdlib.h>
#include <string.h>

#include "osprey/log.h"
#include "repository.h"

typedef struct member {
    char *root; /* resolved local folder, or NULL for a source */
    osp_repository_source local;
    const osp_repository_source *source; /* &local, or the caller's */
} member;

struct repository_set {
    member *members;
    size_t n;
    osp_repository_source source;
};

static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void log_not_unique(const char *name) {
    OSP_LOG_ERROR("failed to poll model '%s': not unique across all model "
                  "repositories",
                  name);
}

/* Every member's names, sorted; names in more than one member dropped. */
static osp_error *set_list(void *self, char ***names_out, size_t *n_out) {
    repository_set *set = self;
    char **all = NULL;
    size_t n = 0;
    osp_error *err = NULL;
    for (size_t i = 0; i < set->n && !err; i++) {
        char **names = NULL;
        size_t count = 0;
        const osp_repository_source *s = set->members[i].source;
        if ((err = s->list(s->self, &names, &count)))
            break;
        char **grown = realloc(all, (n + count + 1) * sizeof *all);
        if (!grown) {
            free_names(names, count);
            err = osp_error_out_of_memory();
            break;
        }
        all = grown;
        memcpy(all + n, names, count * sizeof *all);
        n += count;
        free(names);
    }
    if (err) {
        free_names(all, n);
        return err;
    }
    qsort(all, n, sizeof *all, compare_names);
    size_t kept = 0;
    for (size_t i = 0; i < n;) {
        size_t same = i + 1;
        while (same < n && strcmp(all[same], all[i]) == 0)
            same++;
        if (same - i == 1) {
            all[kept++] = all[i];
        } else {
            log_not_unique(all[i]);
            for (size_t k = i; k < same; k++)
                free(all[k]);
        }
        i = same;
    }
    *names_out = all;
    *n_out = kept;
    return NULL;
}

static uint64_t set_fingerprint(void *self, const char *name) {
    repository_set *set = self;
    for (size_t i = 0; i < set->n; i++) {
        const osp_repository_source *s = set->members[i].source;
        uint64_t fp = s->fingerprint(s->self, name);
        if (fp)
            return fp;
    }
    return 0;
}

/* The one member that has `name`: NOT_FOUND when none or several do. */
static osp_error *set_model_dir(void *self, const char *name, char **dir) {
    repository_set *set = self;
    char *found = NULL;
    for (size_t i = 0; i < set->n; i++) {
        const osp_repository_source *s = set->members[i].source;
        char *d = NULL;
        osp_error *err = s->model_dir(s->self, name, &d);
        if (err && osp_error_get_code(err) == OSP_ERROR_NOT_FOUND) {
            osp_error_free(err);
            continue;
        }
        if (err) {
            free(found);
            return err;
        }
        if (found) {
            free(found);
            free(d);
            log_not_unique(name);
            return osp_error_new(OSP_ERROR_NOT_FOUND,
                                 "model '%s' is not unique across all model "
                                 "repositories",
                                 name);
        }
        found = d;
    }
    if (!found)
        return osp_error_new(OSP_ERROR_NOT_FOUND,
                             "no model '%s' in the model repositories", name);
    *dir = found;
    return NULL;
}

osp_error *repository_set_new(const char *const *paths,
                              const osp_repository_source *const *sources,
                              size_t n, repository_set **out) {
    repository_set *set = calloc(1, sizeof *set);
    if (!set || !(set->members = calloc(n ? n : 1, sizeof *set->members))) {
        free(set);
        return osp_error_out_of_memory();
    }
    set->n = n;
    for (size_t i = 0; i < n; i++) {
        member *m = &set->members[i];
        if (sources && sources[i]) {
            m->source = sources[i];
            continue;
        }
        if (!(m->root = realpath(paths[i], NULL))) {
            osp_error *err = osp_error_new(
                OSP_ERROR_INVALID_ARG,
                "failed to stat model repository path '%s': %m", paths[i]);
            repository_set_free(set);
            return err;
        }
        repository_local_source(m->root, &m->local);
        m->source = &m->local;
    }
    set->source = (osp_repository_source){.self = set,
                                          .list = set_list,
                                          .fingerprint = set_fingerprint,
                                          .model_dir = set_model_dir};
    *out = set;
    return NULL;
}

const osp_repository_source *repository_set_source(repository_set *set) {
    return &set->source;
}

void repository_set_free(repository_set *set) {
    if (!set)
        return;
    for (size_t i = 0; i < set->n; i++)
        free(set->members[i].root);
    free(set->members);
    free(set);
}
