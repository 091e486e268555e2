/*
 * The backends compiled into Osprey, for osp_server_options.backends: the
 * server looks models' `backend:` names up in that list, so the core never
 * names a backend itself.
 */
#pragma once

#include <stddef.h>

#include "osprey/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const osp_backend *const backends_builtin[];
extern const size_t backends_builtin_count;

#ifdef __cplusplus
}
#endif
