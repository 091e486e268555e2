/*
 * Credentials and region from the environment and the AWS shared files
 * (see s3_credentials.h). The files are INI: "[section]" lines, then
 * "key = value"; '#' and ';' start comments. In the config file a profile's
 * section is "[profile NAME]" (but "[default]").
 */
#include "s3_credentials.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INI_LINE 4096

static char *env_value(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? strdup(v) : NULL;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* The values of `keys[0..n)` in section `section` of INI file `path` into
 * values[] (each strdup'ed, left alone when absent). *found says whether
 * the section exists. A missing file is no error (nothing found). */
static osp_error *ini_read(const char *path, const char *section,
                           const char *const *keys, char **values, size_t n,
                           bool *found) {
    *found = false;
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT || errno == ENOTDIR
                   ? NULL
                   : osp_error_new(OSP_ERROR_INVALID_ARG,
                                   "cannot read AWS file '%s': %s", path,
                                   strerror(errno));
    char line[MAX_INI_LINE];
    bool in_section = false;
    osp_error *err = NULL;
    while (!err && fgets(line, sizeof line, f)) {
        char *s = trim(line);
        if (!s[0] || s[0] == '#' || s[0] == ';')
            continue;
        if (s[0] == '[') {
            char *end = strchr(s, ']');
            if (end)
                *end = '\0';
            in_section = strcmp(trim(s + 1), section) == 0;
            *found |= in_section;
            continue;
        }
        char *eq = strchr(s, '=');
        if (!in_section || !eq)
            continue;
        *eq = '\0';
        const char *key = trim(s);
        const char *value = trim(eq + 1);
        for (size_t i = 0; i < n; i++) {
            if (strcmp(key, keys[i]) != 0 || !value[0])
                continue;
            free(values[i]);
            if (!(values[i] = strdup(value)))
                err = osp_error_out_of_memory();
        }
    }
    fclose(f);
    return err;
}

/* $name, or ~/.aws/<file>. Caller frees; NULL when neither can be had. */
static char *aws_file_path(const char *env_name, const char *file) {
    char *p = env_value(env_name);
    if (p)
        return p;
    const char *home = getenv("HOME");
    if (!home || !home[0])
        return NULL;
    size_t n = strlen(home) + strlen(file) + 8;
    if (!(p = malloc(n)))
        return NULL;
    snprintf(p, n, "%s/.aws/%s", home, file);
    return p;
}

void s3_credentials_destroy(s3_credentials *c) {
    free(c->access_key_id);
    free(c->secret_access_key);
    free(c->session_token);
    free(c->region);
    memset(c, 0, sizeof *c);
}

osp_error *s3_credentials_load(s3_credentials *out) {
    static const char *const keys[] = {"aws_access_key_id",
                                       "aws_secret_access_key",
                                       "aws_session_token", "region"};
    char *values[4] = {NULL, NULL, NULL, NULL};
    osp_error *err = NULL;
    memset(out, 0, sizeof *out);
    char *env_profile = env_value("AWS_PROFILE");
    const char *profile = env_profile ? env_profile : "default";
    char *cred_path =
        aws_file_path("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    char *config_path = aws_file_path("AWS_CONFIG_FILE", "config");
    char config_section[300];
    snprintf(config_section, sizeof config_section, "%s%s",
             strcmp(profile, "default") ? "profile " : "", profile);
    bool in_credentials = false, in_config = false;
    /* The config file first, so that the credentials file's keys win. */
    if (config_path)
        err =
            ini_read(config_path, config_section, keys, values, 4, &in_config);
    if (!err && cred_path)
        err = ini_read(cred_path, profile, keys, values, 3, &in_credentials);
    if (err)
        goto out;
    if (env_profile && !in_credentials && !in_config) {
        err = osp_error_new(OSP_ERROR_INVALID_ARG,
                            "AWS_PROFILE '%.128s' is in neither the shared "
                            "credentials file nor the config file",
                            env_profile);
        goto out;
    }
    char *env_id = env_value("AWS_ACCESS_KEY_ID");
    char *env_secret = env_value("AWS_SECRET_ACCESS_KEY");
    if (env_id || env_secret) {
        out->source = "the environment";
        out->access_key_id = env_id;
        out->secret_access_key = env_secret;
        out->session_token = env_value("AWS_SESSION_TOKEN");
    } else if (values[0] || values[1]) {
        out->source =
            in_credentials ? "the shared credentials file" : "the config file";
        out->access_key_id = values[0];
        out->secret_access_key = values[1];
        out->session_token = values[2];
        values[0] = values[1] = values[2] = NULL;
    } else {
        out->source = "nowhere (anonymous requests)";
    }
    if (!out->access_key_id != !out->secret_access_key) {
        err = osp_error_new(
            OSP_ERROR_INVALID_ARG, "AWS credentials from %s have %s but not %s",
            out->source,
            out->access_key_id ? "an access key id" : "a secret access key",
            out->access_key_id ? "its secret access key" : "an access key id");
        goto out;
    }
    out->region = env_value("AWS_REGION");
    if (!out->region)
        out->region = env_value("AWS_DEFAULT_REGION");
    if (!out->region && values[3]) {
        out->region = values[3];
        values[3] = NULL;
    }
    if (!out->region)
        out->region = strdup("us-east-1");
    if (!out->region)
        err = osp_error_out_of_memory();
out:
    for (size_t i = 0; i < 4; i++)
        free(values[i]);
    free(env_profile);
    free(cred_path);
    free(config_path);
    if (err)
        s3_credentials_destroy(out);
    return err;
}
