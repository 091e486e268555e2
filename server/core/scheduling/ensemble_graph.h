/*
 * The step graph of an ensemble (platform "ensemble"): Triton's load checks
 * and the plan the ensemble scheduler runs. Tensors are named in the
 * ensemble's config: its inputs, its outputs and what the steps' input_map
 * and output_map name. A step runs once every tensor it reads is ready.
 */
#pragma once

#include <stddef.h>

#include "osprey/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most tensors an ensemble may name, and input_map plus output_map
 * entries it may have: the checks stay cheap whatever a config holds. */
#define ENSEMBLE_MAX_TENSORS 4096
#define ENSEMBLE_MAX_MAP_ENTRIES 16384

typedef struct ensemble_plan_step {
    const osp_ensemble_step *config; /* borrowed from the ensemble's config */
    size_t *in_tensors;  /* per input_map entry: the tensor it reads */
    size_t *out_tensors; /* per output_map entry: the tensor it writes */
} ensemble_plan_step;

typedef struct ensemble_plan {
    const char **tensor_names; /* borrowed from the config */
    size_t n_tensors;
    ensemble_plan_step *steps; /* config order */
    size_t n_steps;
    size_t *input_tensors;  /* per config input */
    size_t *output_tensors; /* per config output */
    /* Per tensor: how many step inputs read it, and whether the ensemble
     * returns it. */
    size_t *readers;
    bool *is_output;
} ensemble_plan;

/* Triton's checks of an ensemble config on its own (its
 * ValidateEnsembleSchedulingConfig, with its messages): platform and
 * ensemble_scheduling together, no instance_group, optimization or warmup,
 * every step with model_name, input_map and output_map, each tensor
 * written once, and data flowing from the inputs to every output with no
 * tensor unused (a cycle leaves its tensors unwritten). A config that is
 * not an ensemble and has no ensemble_scheduling passes. */
osp_error *ensemble_check_config(const osp_model_config *cfg);

/* Triton's checks of the steps against their models' configs
 * (ValidateEnsembleConfig): maximum batch sizes, decoupled data flow
 * (ensemble_plan_decoupled), every mapped name an
 * input or output of the step's model, every required input mapped once,
 * data types and shapes (wildcards match; a batching and a non-batching
 * model agree when the full shapes do) consistent along each tensor.
 * step_cfgs[i] (borrowed) is the loaded config of step i's model. */
osp_error *ensemble_check_steps(const osp_model_config *cfg,
                                const osp_model_config *const *step_cfgs);

/* Builds the plan of a config that passed ensemble_check_config; it
 * borrows from cfg, which must outlive it. */
osp_error *ensemble_plan_new(const osp_model_config *cfg, ensemble_plan **out);
void ensemble_plan_free(ensemble_plan *plan);

/* Triton's decoupled data flow check, with its message: no step may read
 * tensors that descend from different decoupled steps (or from one and
 * from the ensemble's inputs). Sets *decoupled when a decoupled step
 * (step_cfgs[i]->decoupled, borrowed) feeds the graph: Triton then makes
 * the ensemble decoupled. */
osp_error *ensemble_plan_decoupled(const ensemble_plan *plan,
                                   const osp_model_config *cfg,
                                   const osp_model_config *const *step_cfgs,
                                   bool *decoupled);

#ifdef __cplusplus
}
#endif
