/* rt_metrics_litellm: LiteLLM's Prometheus series beside Tollgate's own (rt_metrics.h), so
 * that dashboards built for a LiteLLM proxy work unchanged. Names, types and label names are
 * LiteLLM's (https://docs.litellm.ai/docs/proxy/prometheus, and the metric definitions of its
 * Prometheus logger, litellm/integrations/prometheus.py):
 *
 *   litellm_requests_metric_total       counter  end_user hashed_api_key api_key_alias model team
 *                                                 team_alias user user_email
 *   litellm_spend_metric_total          counter  end_user hashed_api_key api_key_alias model team
 *                                                 team_alias user
 *   litellm_total_tokens_total,         counter  end_user hashed_api_key api_key_alias
 *   litellm_input_tokens_total,                   requested_model team team_alias user model
 *   litellm_output_tokens_total
 *   litellm_deployment_success_responses_total,   counter  requested_model litellm_model_name
 *   litellm_deployment_total_requests_total       model_id api_base api_provider hashed_api_key
 *                                                 api_key_alias team team_alias
 *   litellm_deployment_failure_responses_total    counter  the same + exception_status
 *                                                 exception_class
 *   litellm_deployment_latency_per_output_token   histogram litellm_model_name model_id api_base
 *                                                 api_provider hashed_api_key api_key_alias team
 *                                                 team_alias
 *
 * Fed from the data Tollgate's own series use: the spend event of each request
 * (rt_metrics_litellm_request) and each upstream attempt (rt_metrics_litellm_attempt). Label
 * values come from the key's record (hash, alias, team, user) and the configuration (model
 * group, deployment id, model, api_base, provider) or fixed tables (status, exception class);
 * end_user, team_alias and user_email are always "" (LiteLLM leaves end_user out by default for
 * cardinality; Tollgate has no team aliases or user emails).
 *
 * Bounds: at most RT_METRICS_LITELLM_KEY_SERIES label sets of (key, deployment), taken first
 * come. Once they are used, a new (key, deployment) is counted in its deployment's overflow set
 * (hashed_api_key "__overflow__", alias, team and user ""): totals and per-deployment figures
 * stay exact, only the per-key split is lost, and tollgate_router_litellm_overflow_total counts
 * the observations folded so. The sets never change once taken (a process restart empties them).
 *
 * Threads: observations are lock-free once a set exists (a new set takes a mutex); the writer
 * runs on the thread serving /metrics. */
#ifndef RT_METRICS_LITELLM_H
#define RT_METRICS_LITELLM_H

#include <stdint.h>

#include "config.h"
#include "keys.h"
#include "proto_event.h"
#include "router.h"
#include "tg_buf.h"

#define RT_METRICS_LITELLM_KEY_SERIES 64 /* (key, deployment) label sets before overflow */

struct rt_metrics_litellm;

/* rt_metrics_litellm_create: the series for the deployments of cfg (borrowed; outlives it).
 * New (rt_metrics_litellm_destroy) or NULL. Main thread. */
struct rt_metrics_litellm *rt_metrics_litellm_create(const struct rt_config *cfg);

/* rt_metrics_litellm_destroy: free; sets *m to NULL; accepts NULL. After every user stopped. */
void rt_metrics_litellm_destroy(struct rt_metrics_litellm **m);

/* rt_metrics_litellm_request: one request answered (ev borrowed for the call) at deployment,
 * the index in cfg->deployments of ev->deployment_id (-1: none; the caller has looked it up): a
 * 2xx counts in litellm_requests_metric; its cost, tokens and (2xx with output tokens and a
 * deployment) its latency per output token in the others. Any thread. */
void rt_metrics_litellm_request(struct rt_metrics_litellm *m, const struct proto_event *ev,
                                int deployment);

/* rt_metrics_litellm_attempt: one upstream attempt of key (borrowed, NULL = no virtual key) on
 * the deployment of that index (-1, an unknown id, is not counted), answered http_status (0 =
 * none) with outcome o. Any thread. */
void rt_metrics_litellm_attempt(struct rt_metrics_litellm *m, const struct rt_key *key,
                                int deployment, int http_status, enum rt_error_class o);

/* rt_metrics_litellm_write: every series into b. The /metrics thread. */
void rt_metrics_litellm_write(struct rt_metrics_litellm *m, struct tg_buf *b);

#endif
