#include "api_error.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "mask.h"

static const char *error_type_for(int status, int anthropic)
{
    switch (status) {
    case 400:
    case 422:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return anthropic ? "not_found_error" : "invalid_request_error";
    case 408:
        return anthropic ? "timeout_error" : "timeout";
    case 413:
        return anthropic ? "request_too_large" : "invalid_request_error";
    case 431:
        return "invalid_request_error";
    case 429:
        return anthropic ? "rate_limit_error" : "rate_limit_error";
    case 503:
        return anthropic ? "overloaded_error" : "service_unavailable";
    default:
        return "api_error";
    }
}

char *rt_api_error_body(const struct rt_mask *mask, int anthropic, int status, const char *code,
                        const char *message)
{
    char masked[RT_API_ERROR_MESSAGE_MAX];
    json_t *j;
    char *s;

    rt_mask_apply(mask, message, message != NULL ? strlen(message) : 0, masked, sizeof(masked));
    if (anthropic)
        j = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                      error_type_for(status, 1), "message", masked);
    else
        j = json_pack("{s:{s:s,s:s,s:n,s:s?}}", "error", "message", masked, "type",
                      error_type_for(status, 0), "param", "code",
                      (code != NULL && code[0] != '\0') ? code : NULL);
    s = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s != NULL ? s : strdup("{\"error\":{\"message\":\"internal error\"}}");
}
