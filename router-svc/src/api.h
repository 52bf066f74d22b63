/* api: the client-facing APIs router-svc serves, which are also the wire dialects providers are
 * spoken to in (a provider speaks one of them, or is translated to and from one). */
#ifndef RT_API_H
#define RT_API_H

enum rt_api {
    RT_API_CHAT = 0,       /* OpenAI /v1/chat/completions (also legacy completions) */
    RT_API_EMBEDDINGS = 1, /* OpenAI /v1/embeddings */
    RT_API_RESPONSES = 2,  /* OpenAI /v1/responses */
    RT_API_MESSAGES = 3,   /* Anthropic /v1/messages */
};

#endif
