/* A client's cancellation flag shared by a frontend and its requests
 * (osprey/server.h): an atomic flag and an atomic reference count. */
#include <stdatomic.h>
#include <stdlib.h>

#include "cancel_token.h"
#include "osprey/server.h"

struct osp_cancel_token {
    atomic_int refs;
    atomic_bool cancelled;
};

osp_cancel_token *osp_cancel_token_new(void) {
    osp_cancel_token *t = calloc(1, sizeof *t);
    if (t)
        atomic_init(&t->refs, 1);
    return t;
}

osp_cancel_token *osp_cancel_token_ref(osp_cancel_token *token) {
    if (token)
        atomic_fetch_add(&token->refs, 1);
    return token;
}

void osp_cancel_token_unref(osp_cancel_token *token) {
    if (token && atomic_fetch_sub(&token->refs, 1) == 1)
        free(token);
}

/* Tokens cancelled so far, server-wide (cancel_token.h). */
static atomic_uint_fast64_t g_cancel_epoch;

void osp_cancel_token_cancel(osp_cancel_token *token) {
    if (token && !atomic_exchange(&token->cancelled, true))
        atomic_fetch_add(&g_cancel_epoch, 1);
}

uint64_t cancel_token_epoch(void) {
    return atomic_load(&g_cancel_epoch);
}

bool osp_cancel_token_is_cancelled(const osp_cancel_token *token) {
    return token && atomic_load(&((osp_cancel_token *)token)->cancelled);
}
