/* openai_compat: the named OpenAI-compatible providers, one row each: the litellm_params.model
 * prefix, the documented default base URL, the environment variables LiteLLM reads for the key
 * and the base when the config gives none (provider.h has the rules), and flags. They are spoken
 * to exactly like OpenAI (openai.c's functions): chat completions, embeddings and responses as
 * sent, /v1/messages through the chat translation, Authorization: Bearer. /v1/responses is
 * bridged through the chat translation (RT_PROVIDER_NO_RESPONSES on every row), as LiteLLM does
 * for named OpenAI-compatible providers (docs.litellm.ai, "Native /v1/responses Passthrough for
 * OpenAI-Compatible Providers"): several have no Responses API (Mistral, DeepSeek, Cerebras,
 * ...), and those that have one serve it for some models only. A deployment whose
 * model_info.supported_endpoints lists /v1/responses gets it as sent (LiteLLM's opt-in).
 *
 * Sources of the facts (base URLs and variable names), read from LiteLLM's source
 * (litellm/litellm_core_utils/get_llm_provider_logic.py, _get_openai_compatible_provider_info,
 * and the per-provider configs it calls: litellm/llms/<provider>/chat/transformation.py) and
 * checked against the providers' own documentation:
 *   groq          https://api.groq.com/openai/v1         GROQ_API_KEY         GROQ_API_BASE
 *   mistral       https://api.mistral.ai/v1              MISTRAL_API_KEY      MISTRAL_API_BASE
 *                 (LiteLLM adds /v1 to a base without it; it also reads MISTRAL_AZURE_API_KEY
 *                 first, a key for Azure's Mistral deployments, not read here)
 *   deepseek      https://api.deepseek.com/v1            DEEPSEEK_API_KEY     DEEPSEEK_API_BASE
 *                 (LiteLLM's default is .../beta; DeepSeek documents https://api.deepseek.com
 *                 and its /v1 form for OpenAI clients, and LiteLLM's endpoint list has /v1)
 *   together_ai   https://api.together.xyz/v1            TOGETHER_API_KEY, TOGETHER_AI_API_KEY,
 *                 TOGETHERAI_API_KEY, TOGETHER_AI_TOKEN  TOGETHER_AI_API_BASE
 *   fireworks_ai  https://api.fireworks.ai/inference/v1  FIREWORKS_API_KEY, FIREWORKS_AI_API_KEY,
 *                 FIREWORKSAI_API_KEY, FIREWORKS_AI_TOKEN  FIREWORKS_AI_API_BASE
 *   openrouter    https://openrouter.ai/api/v1           OPENROUTER_API_KEY   OPENROUTER_API_BASE
 *   perplexity    https://api.perplexity.ai              PERPLEXITYAI_API_KEY, PERPLEXITY_API_KEY
 *                                                        PERPLEXITY_API_BASE
 *   xai           https://api.x.ai/v1                    XAI_API_KEY          XAI_API_BASE
 *   cerebras      https://api.cerebras.ai/v1             CEREBRAS_API_KEY     CEREBRAS_API_BASE
 *   deepinfra     https://api.deepinfra.com/v1/openai    DEEPINFRA_API_KEY    DEEPINFRA_API_BASE
 *   nvidia_nim    https://integrate.api.nvidia.com/v1    NVIDIA_NIM_API_KEY   NVIDIA_NIM_API_BASE
 *   ollama, ollama_chat  http://localhost:11434 (+ /v1)  OLLAMA_API_KEY       OLLAMA_API_BASE
 *                 (LiteLLM speaks Ollama's own /api/generate and /api/chat; Tollgate speaks its
 *                 OpenAI-compatible API, documented under /v1 of the same server)
 *   hosted_vllm   no default (a vLLM server of the user's) HOSTED_VLLM_API_KEY HOSTED_VLLM_API_BASE
 *   lm_studio     http://localhost:1234/v1 (LM Studio's documented local server; LiteLLM has no
 *                 default)                               LM_STUDIO_API_KEY    LM_STUDIO_API_BASE
 */
#include "providers/provider.h"

#define COMPAT_ROW(n, base, keys, bases, fl)                                                       \
    {                                                                                              \
        .name = (n), .default_base = (base), .key_env = (keys), .base_env = (bases),               \
        .flags = (fl) | RT_PROVIDER_NO_RESPONSES, .wire = rt_openai_wire, .url = rt_openai_url,   \
        .headers = rt_openai_headers,                                                              \
        .classify = NULL,                                                                          \
    }
#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})

const struct rt_provider rt_provider_compat[] = {
    COMPAT_ROW("groq", "https://api.groq.com/openai/v1", ENV("GROQ_API_KEY"), ENV("GROQ_API_BASE"),
               0),
    COMPAT_ROW("mistral", "https://api.mistral.ai/v1", ENV("MISTRAL_API_KEY"),
               ENV("MISTRAL_API_BASE"), RT_PROVIDER_BASE_V1),
    COMPAT_ROW("deepseek", "https://api.deepseek.com/v1", ENV("DEEPSEEK_API_KEY"),
               ENV("DEEPSEEK_API_BASE"), 0),
    COMPAT_ROW(
        "together_ai", "https://api.together.xyz/v1",
        ENV("TOGETHER_API_KEY", "TOGETHER_AI_API_KEY", "TOGETHERAI_API_KEY", "TOGETHER_AI_TOKEN"),
        ENV("TOGETHER_AI_API_BASE"), 0),
    COMPAT_ROW("fireworks_ai", "https://api.fireworks.ai/inference/v1",
               ENV("FIREWORKS_API_KEY", "FIREWORKS_AI_API_KEY", "FIREWORKSAI_API_KEY",
                   "FIREWORKS_AI_TOKEN"),
               ENV("FIREWORKS_AI_API_BASE"), 0),
    COMPAT_ROW("openrouter", "https://openrouter.ai/api/v1", ENV("OPENROUTER_API_KEY"),
               ENV("OPENROUTER_API_BASE"), 0),
    COMPAT_ROW("perplexity", "https://api.perplexity.ai",
               ENV("PERPLEXITYAI_API_KEY", "PERPLEXITY_API_KEY"), ENV("PERPLEXITY_API_BASE"), 0),
    COMPAT_ROW("xai", "https://api.x.ai/v1", ENV("XAI_API_KEY"), ENV("XAI_API_BASE"), 0),
    COMPAT_ROW("cerebras", "https://api.cerebras.ai/v1", ENV("CEREBRAS_API_KEY"),
               ENV("CEREBRAS_API_BASE"), 0),
    COMPAT_ROW("deepinfra", "https://api.deepinfra.com/v1/openai", ENV("DEEPINFRA_API_KEY"),
               ENV("DEEPINFRA_API_BASE"), 0),
    COMPAT_ROW("nvidia_nim", "https://integrate.api.nvidia.com/v1", ENV("NVIDIA_NIM_API_KEY"),
               ENV("NVIDIA_NIM_API_BASE"), 0),
    COMPAT_ROW("ollama", "http://localhost:11434", ENV("OLLAMA_API_KEY"), ENV("OLLAMA_API_BASE"),
               RT_PROVIDER_SELF_HOSTED | RT_PROVIDER_BASE_V1),
    COMPAT_ROW("ollama_chat", "http://localhost:11434", ENV("OLLAMA_API_KEY"),
               ENV("OLLAMA_API_BASE"), RT_PROVIDER_SELF_HOSTED | RT_PROVIDER_BASE_V1),
    COMPAT_ROW("hosted_vllm", NULL, ENV("HOSTED_VLLM_API_KEY"), ENV("HOSTED_VLLM_API_BASE"),
               RT_PROVIDER_SELF_HOSTED),
    COMPAT_ROW("lm_studio", "http://localhost:1234/v1", ENV("LM_STUDIO_API_KEY"),
               ENV("LM_STUDIO_API_BASE"), RT_PROVIDER_SELF_HOSTED),
};

const size_t rt_provider_compat_count = sizeof(rt_provider_compat) / sizeof(rt_provider_compat[0]);
