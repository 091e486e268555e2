/* Answers to single requests of a batch (request_answer.h). */
#include "request_answer.h"

#include <stdlib.h>
#include <string.h>

void sent_response_free_buffers(osp_sent_response *r) {
    if (!r)
        return;
    for (size_t i = 0; i < r->n_outputs; i++) {
        osp_buffer_free(r->outputs[i].data);
        r->outputs[i].data = NULL;
    }
    osp_error_free(r->error);
    r->error = NULL;
}

void request_answer_clear(request_answer *a) {
    sent_response_free_buffers(&a->sent);
    for (size_t i = 0; i < a->sent.n_outputs; i++)
        free(a->sent.outputs[i].name);
    free(a->sent.outputs);
    memset(a, 0, sizeof *a);
}

osp_error *request_answer_store(request_answer *a, osp_sent_response *sent) {
    osp_infer_output *outputs =
        calloc(sent->n_outputs + 1, sizeof *sent->outputs);
    if (!outputs) {
        sent_response_free_buffers(sent);
        return osp_error_out_of_memory();
    }
    a->sent.outputs = outputs;
    for (size_t i = 0; i < sent->n_outputs; i++) {
        outputs[i] = sent->outputs[i];
        outputs[i].name = strdup(sent->outputs[i].name);
        sent->outputs[i].data = NULL;
        a->sent.n_outputs = i + 1;
        if (!outputs[i].name) {
            sent_response_free_buffers(sent);
            request_answer_clear(a);
            return osp_error_out_of_memory();
        }
    }
    a->sent.error = sent->error;
    sent->error = NULL;
    a->given = true;
    return NULL;
}
