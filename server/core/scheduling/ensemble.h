/*
 * The ensemble scheduler (platform "ensemble"): a request runs the steps of
 * its ensemble's graph (ensemble_graph.h), each as an ordinary request to
 * the step's model, through that model's own scheduler, as soon as the
 * tensors it reads are ready; independent steps run at the same time.
 * Tensors move from a step's response into the next step's request as
 * host buffers, without a copy when one step reads them, and are copied
 * for each reader but the last otherwise.
 */
#pragma once

#include "model_internal.h"

typedef struct ensemble ensemble;

/* Makes `model` (a shell from model_load_shell whose config is an
 * ensemble) serve its steps' models through `server` (borrowed; it
 * outlives its models). step_cfgs[i] (borrowed) is the config of step i's
 * model as loaded now; the checks of ensemble_check_steps run on them. */
osp_error *ensemble_attach(osp_model *model, osp_server *server,
                           const osp_model_config *const *step_cfgs);

/* Runs validated request p (ownership moves) on its ensemble model; its
 * completion callback is called once, possibly before this returns. */
void ensemble_start(ensemble *ens, pending_request *p);

/* Refuses new requests and waits until none of the ensemble's is running
 * (its unload). */
void ensemble_drain(ensemble *ens);
/* With the model's last reference. NULL is a no-op. */
void ensemble_free(ensemble *ens);
