/*
 * The S3 repository source (see s3_repository.h).
 *
 * Locking: `lock` guards the snapshot (model names and fingerprints of
 * the last full listing) and the per-model download records; downloads
 * themselves run unlocked, each into its own numbered folder.
 */
#define _GNU_SOURCE /* nftw's FTW_DEPTH, FTW_PHYS */
#include "s3_repository.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "osprey/log.h"
#include "s3_client.h"
#include "s3_url.h"

#define MAX_OBJECTS 1000000    /* in the whole repository */
#define MAX_MODEL_FILES 100000 /* in one model */
#define DOWNLOAD_THREADS 8     /* files of one model fetched at once */
/* Room under PATH_MAX for ".partial-<n>/<model>/" and a key's path. */
#define CACHE_ROOT_MAX (PATH_MAX / 2)

typedef struct model_record {
    char *name;
    uint64_t fingerprint; /* of the last full listing; 0: not in it */
    unsigned long current, previous; /* download folders; 0: none */
    uint64_t current_fingerprint;    /* of the objects `current` holds */
} model_record;

struct s3_repository {
    s3_client *client;
    s3_location loc;
    char *cache_root; /* the private folder this repository made */
    char list_prefix[S3_MAX_PREFIX + 1]; /* "prefix/" or "" */
    osp_repository_source source;
    pthread_mutex_t lock;
    model_record *models;
    size_t n_models;
    atomic_ulong next_download;
};

/* ---- names and paths ---------------------------------------------------- */

/* A path component S3 may name that is safe on disk: not empty, ".",
 * "..", at most NAME_MAX bytes. */
static bool component_ok(const char *s, size_t n) {
    return n > 0 && n <= NAME_MAX && !(n == 1 && s[0] == '.') &&
           !(n == 2 && s[0] == '.' && s[1] == '.');
}

/* The model a key (relative to the repository prefix) belongs to: its
 * first component, when a '/' follows it and it is a visible, safe name.
 * Writes it into name[NAME_MAX + 1]. */
static bool model_of_key(const char *rel, char *name) {
    const char *slash = strchr(rel, '/');
    if (!slash || rel[0] == '.' || !component_ok(rel, (size_t)(slash - rel)))
        return false;
    memcpy(name, rel, (size_t)(slash - rel));
    name[slash - rel] = '\0';
    return true;
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *path) {
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_download(const s3_repository *r, unsigned long n) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%lu", r->cache_root, n);
    remove_tree(path);
}

/* ---- listing -------------------------------------------------------------
 */

static model_record *find_record(s3_repository *r, const char *name) {
    for (size_t i = 0; i < r->n_models; i++)
        if (strcmp(r->models[i].name, name) == 0)
            return &r->models[i];
    return NULL;
}

/* The record of `name`, added when missing; call with `lock` held. NULL
 * when out of memory. */
static model_record *get_record(s3_repository *r, const char *name) {
    model_record *m = find_record(r, name);
    if (m)
        return m;
    model_record *grown =
        realloc(r->models, (r->n_models + 1) * sizeof *r->models);
    if (!grown)
        return NULL;
    r->models = grown;
    m = &r->models[r->n_models];
    memset(m, 0, sizeof *m);
    if (!(m->name = strdup(name)))
        return NULL;
    r->n_models++;
    return m;
}

/* FNV-1a over bytes, continuing from h. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static uint64_t fingerprint_object(uint64_t h, const s3_object *o) {
    h = fnv1a(h, o->key, strlen(o->key) + 1);
    h = fnv1a(h, &o->size, sizeof o->size);
    return fnv1a(h, o->etag, strlen(o->etag) + 1);
}

/* Lists the whole repository: the sorted model names, and each model's
 * fingerprint (its objects' keys, sizes and ETags) into the records. */
static osp_error *repo_list(void *self, char ***names_out, size_t *n_out) {
    s3_repository *r = self;
    s3_object *objs = NULL;
    size_t n_objs = 0;
    osp_error *err =
        s3_client_list(r->client, r->list_prefix, MAX_OBJECTS, &objs, &n_objs);
    if (err)
        return err;
    char **names = NULL;
    size_t n = 0;
    uint64_t *prints = NULL;
    size_t skip = strlen(r->list_prefix);
    for (size_t i = 0; i < n_objs && !err; i++) {
        char name[NAME_MAX + 1];
        if (!model_of_key(objs[i].key + skip, name))
            continue;
        /* S3 lists keys in order, so a model's objects are together. */
        if (n == 0 || strcmp(names[n - 1], name) != 0) {
            char **more_names = realloc(names, (n + 1) * sizeof *names);
            if (more_names)
                names = more_names;
            uint64_t *more_prints =
                more_names ? realloc(prints, (n + 1) * sizeof *prints) : NULL;
            if (more_prints)
                prints = more_prints;
            if (!more_names || !more_prints || !(names[n] = strdup(name))) {
                err = osp_error_out_of_memory();
                break;
            }
            prints[n++] = 14695981039346656037ull;
        }
        prints[n - 1] = fingerprint_object(prints[n - 1], &objs[i]);
    }
    s3_objects_free(objs, n_objs);
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n_models && !err; i++)
        r->models[i].fingerprint = 0;
    for (size_t i = 0; i < n && !err; i++) {
        model_record *m = get_record(r, names[i]);
        if (!m)
            err = osp_error_out_of_memory();
        else
            m->fingerprint = prints[i] ? prints[i] : 1;
    }
    pthread_mutex_unlock(&r->lock);
    free(prints);
    if (err) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return err;
    }
    *names_out = names;
    *n_out = n;
    return NULL;
}

static uint64_t repo_fingerprint(void *self, const char *name) {
    s3_repository *r = self;
    pthread_mutex_lock(&r->lock);
    const model_record *m = find_record(r, name);
    uint64_t fp = m ? m->fingerprint : 0;
    pthread_mutex_unlock(&r->lock);
    return fp;
}

/* ---- downloading a model ------------------------------------------------
 * The model's objects are fetched by up to DOWNLOAD_THREADS threads into
 * .partial-<n>/<model>/, which is renamed to <n> once every file is
 * complete; the first failure stops the others and removes the folder. */

typedef struct download_job {
    s3_repository *repo;
    const s3_object *objs;
    size_t n_objs;
    size_t skip;     /* bytes of each key before the model's relative path */
    const char *dir; /* the model's folder in the partial download */
    atomic_size_t next;
    pthread_mutex_t lock; /* guards err */
    osp_error *err;
} download_job;

/* Creates the folders of `rel` (a path relative to dir) and checks each
 * component; *file_path gets dir/rel. */
static osp_error *make_parents(const char *dir, const char *rel,
                               char *file_path) {
    if ((size_t)snprintf(file_path, PATH_MAX, "%s/%s", dir, rel) >= PATH_MAX)
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "S3 key '%.200s': path too long", rel);
    size_t base = strlen(dir) + 1;
    for (const char *c = rel;;) {
        const char *slash = strchr(c, '/');
        size_t len = slash ? (size_t)(slash - c) : strlen(c);
        if (!component_ok(c, len))
            return osp_error_new(OSP_ERROR_INVALID_ARG,
                                 "S3 key '%.200s': an empty, '.' or '..' "
                                 "component, or one longer than %d bytes",
                                 rel, NAME_MAX);
        if (!slash)
            return NULL;
        size_t end = base + (size_t)(slash - rel);
        file_path[end] = '\0';
        int rc = mkdir(file_path, 0700);
        file_path[end] = '/';
        if (rc != 0 && errno != EEXIST)
            return osp_error_new(OSP_ERROR_INTERNAL,
                                 "cannot create a folder in the model cache: "
                                 "%s",
                                 strerror(errno));
        c = slash + 1;
    }
}

static void *download_worker(void *arg) {
    download_job *job = arg;
    for (;;) {
        pthread_mutex_lock(&job->lock);
        bool failed = job->err != NULL;
        pthread_mutex_unlock(&job->lock);
        size_t i = atomic_fetch_add(&job->next, 1);
        if (failed || i >= job->n_objs)
            break;
        const s3_object *o = &job->objs[i];
        const char *rel = o->key + job->skip;
        size_t len = strlen(rel);
        if (len == 0 || rel[len - 1] == '/')
            continue; /* a folder marker */
        char path[PATH_MAX];
        osp_error *err = make_parents(job->dir, rel, path);
        if (!err)
            err = s3_client_download(job->repo->client, o, path);
        if (err) {
            pthread_mutex_lock(&job->lock);
            if (!job->err)
                job->err = err;
            else
                osp_error_free(err);
            pthread_mutex_unlock(&job->lock);
        }
    }
    return NULL;
}

/* Fetches objs (the model's, borrowed) into `dir` (exists). */
static osp_error *download_all(s3_repository *r, const s3_object *objs,
                               size_t n, size_t skip, const char *dir) {
    download_job job = {
        .repo = r, .objs = objs, .n_objs = n, .skip = skip, .dir = dir};
    atomic_init(&job.next, 0);
    pthread_mutex_init(&job.lock, NULL);
    size_t want = n < DOWNLOAD_THREADS ? n : DOWNLOAD_THREADS;
    pthread_t threads[DOWNLOAD_THREADS];
    size_t started = 0;
    for (; started + 1 < want; started++)
        if (pthread_create(&threads[started], NULL, download_worker, &job))
            break; /* the threads there are (this one at least) do it all */
    download_worker(&job);
    for (size_t t = 0; t < started; t++)
        pthread_join(threads[t], NULL);
    pthread_mutex_destroy(&job.lock);
    return job.err;
}

/* Remembers download `n` as the model's current one and removes the one
 * before the previous (no load uses it any more: loads of one model are
 * serialised, and the previous one may still be serving). */
static osp_error *record_download(s3_repository *r, const char *name,
                                  unsigned long n, uint64_t fingerprint) {
    pthread_mutex_lock(&r->lock);
    model_record *m = get_record(r, name);
    unsigned long stale = 0;
    if (m) {
        stale = m->previous;
        m->previous = m->current;
        m->current = n;
        m->current_fingerprint = fingerprint;
    }
    pthread_mutex_unlock(&r->lock);
    if (!m)
        return osp_error_out_of_memory();
    if (stale)
        remove_download(r, stale);
    return NULL;
}

static osp_error *repo_model_dir(void *self, const char *name, char **dir_out) {
    s3_repository *r = self;
    char prefix[S3_MAX_PREFIX + NAME_MAX + 3];
    if (!component_ok(name, strlen(name)) || strchr(name, '/'))
        return osp_error_new(OSP_ERROR_INVALID_ARG,
                             "model name '%.64s' is not allowed", name);
    snprintf(prefix, sizeof prefix, "%s%s/", r->list_prefix, name);
    s3_object *objs = NULL;
    size_t n_objs = 0;
    osp_error *err =
        s3_client_list(r->client, prefix, MAX_MODEL_FILES, &objs, &n_objs);
    if (err)
        return err;
    if (n_objs == 0) {
        char where[S3_MAX_PREFIX + 400];
        s3_location_describe(&r->loc, where, sizeof where);
        return osp_error_new(OSP_ERROR_NOT_FOUND, "no model '%s' in %s", name,
                             where);
    }
    /* The objects unchanged since the current download: that folder
     * again (the server reads a model's config before it loads it). */
    uint64_t fingerprint = 14695981039346656037ull;
    for (size_t i = 0; i < n_objs; i++)
        fingerprint = fingerprint_object(fingerprint, &objs[i]);
    pthread_mutex_lock(&r->lock);
    const model_record *known = find_record(r, name);
    unsigned long current = known && known->current_fingerprint == fingerprint
                                ? known->current
                                : 0;
    pthread_mutex_unlock(&r->lock);
    if (current) {
        s3_objects_free(objs, n_objs);
        char done[PATH_MAX];
        snprintf(done, sizeof done, "%s/%lu/%s", r->cache_root, current, name);
        if (!(*dir_out = strdup(done)))
            return osp_error_out_of_memory();
        return NULL;
    }
    unsigned long n = atomic_fetch_add(&r->next_download, 1) + 1;
    /* Fits: open() keeps cache_root under CACHE_ROOT_MAX. */
    char partial[PATH_MAX], model_dir[PATH_MAX + NAME_MAX + 2], done[PATH_MAX];
    snprintf(partial, sizeof partial, "%s/.partial-%lu", r->cache_root, n);
    snprintf(model_dir, sizeof model_dir, "%s/%s", partial, name);
    snprintf(done, sizeof done, "%s/%lu", r->cache_root, n);
    if (mkdir(partial, 0700) != 0 || mkdir(model_dir, 0700) != 0) {
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "cannot create a folder in the model cache: %s",
                            strerror(errno));
    } else {
        err = download_all(r, objs, n_objs, strlen(prefix), model_dir);
    }
    s3_objects_free(objs, n_objs);
    if (!err && rename(partial, done) != 0)
        err = osp_error_new(OSP_ERROR_INTERNAL,
                            "cannot complete a download in the model cache: "
                            "%s",
                            strerror(errno));
    if (err) {
        remove_tree(partial);
        return osp_error_wrap(err, "failed to download model '%s'", name);
    }
    char *dir = malloc(strlen(done) + strlen(name) + 2);
    if (!dir || (err = record_download(r, name, n, fingerprint))) {
        free(dir);
        remove_tree(done);
        return err ? err : osp_error_out_of_memory();
    }
    sprintf(dir, "%s/%s", done, name);
    *dir_out = dir;
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------
 */

osp_error *s3_repository_open(const char *url, const char *cache_dir,
                              const char *ca_file, s3_repository **out) {
    s3_repository *r = calloc(1, sizeof *r);
    if (!r)
        return osp_error_out_of_memory();
    pthread_mutex_init(&r->lock, NULL);
    atomic_init(&r->next_download, 0);
    s3_credentials creds = {0};
    char where[S3_MAX_PREFIX + 400];
    osp_error *err = s3_location_parse(url, &r->loc);
    if (!err && !(err = s3_credentials_load(&creds)))
        err = s3_client_new(&r->loc, &creds, ca_file, &r->client);
    s3_credentials_destroy(&creds); /* zeroed when the client took it */
    if (err)
        goto fail;
    s3_location_describe(&r->loc, where, sizeof where);
    if (r->loc.prefix[0])
        snprintf(r->list_prefix, sizeof r->list_prefix, "%s/", r->loc.prefix);
    if (!cache_dir || !cache_dir[0]) {
        cache_dir = getenv("TMPDIR");
        if (!cache_dir || !cache_dir[0])
            cache_dir = "/tmp";
    }
    size_t len = strlen(cache_dir) + sizeof "/osprey-s3-XXXXXX";
    if (len > CACHE_ROOT_MAX) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "the model cache folder's path is longer than %d "
                            "bytes",
                            CACHE_ROOT_MAX - 20);
        goto fail;
    }
    if (!(r->cache_root = malloc(len))) {
        err = osp_error_out_of_memory();
        goto fail;
    }
    snprintf(r->cache_root, len, "%s/osprey-s3-XXXXXX", cache_dir);
    if (!mkdtemp(r->cache_root)) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "cannot create the model cache in '%s': %s",
                            cache_dir, strerror(errno));
        free(r->cache_root);
        r->cache_root = NULL;
        goto fail;
    }
    OSP_LOG_INFO("model repository %s: credentials from %s, region %s, "
                 "cache %s",
                 where, s3_client_credentials_source(r->client),
                 s3_client_region(r->client), r->cache_root);
    char **names = NULL;
    size_t n = 0;
    if ((err = repo_list(r, &names, &n)))
        goto fail;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    r->source = (osp_repository_source){.self = r,
                                        .list = repo_list,
                                        .fingerprint = repo_fingerprint,
                                        .model_dir = repo_model_dir};
    *out = r;
    return NULL;
fail:
    s3_repository_close(r);
    return err;
}

const osp_repository_source *s3_repository_source(s3_repository *r) {
    return &r->source;
}

void s3_repository_close(s3_repository *r) {
    if (!r)
        return;
    if (r->cache_root)
        remove_tree(r->cache_root);
    free(r->cache_root);
    s3_client_free(r->client);
    for (size_t i = 0; i < r->n_models; i++)
        free(r->models[i].name);
    free(r->models);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
