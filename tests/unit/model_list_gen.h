/* model_list_gen: a router configuration's model_list of many deployments, for the tests of what
 * a large model_list costs or changes (router_router_test, router_metrics_test). */
#ifndef MODEL_LIST_GEN_H
#define MODEL_LIST_GEN_H

#include <stddef.h>

/* model_list_gen: "model_list:" and n deployments, deployment i in group "g-<i / per_group>"
 * with id "d-<i>", model openai/m<i> and params (more litellm_params, e.g. "api_base: ...", or
 * ""), then tail (the rest of the file, may be ""). A malloc'd string (the caller frees it), its
 * length in *len. Fails the test when out of memory. */
char *model_list_gen(int n, int per_group, const char *params, const char *tail, size_t *len);

#endif
