#include "tg_err.h"

const char *tg_strerror(int err)
{
    switch (err) {
#define TG_ERR_TEXT(name, code, text)                                                              \
    case code:                                                                                     \
        return text;
        TG_ERRORS(TG_ERR_TEXT)
#undef TG_ERR_TEXT
    default:
        return "unknown error";
    }
}

const char *tg_errname(int err)
{
    switch (err) {
#define TG_ERR_NAME(name, code, text)                                                              \
    case code:                                                                                     \
        return #name;
        TG_ERRORS(TG_ERR_NAME)
#undef TG_ERR_NAME
    default:
        return "TG_EUNKNOWN";
    }
}
