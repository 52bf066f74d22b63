#include "tg_cfgtext.h"

#include <stdio.h>
#include <string.h>

int tg_cfgtext_check(const char *v, size_t yaml_len, const char *env_name, char *why, size_t whycap)
{
    if (yaml_len != (size_t)-1 && strlen(v) != yaml_len) {
        snprintf(why, whycap, "contains a NUL byte");
        return -1;
    }
    for (size_t i = 0; v[i] != '\0'; i++) {
        unsigned char ch = (unsigned char)v[i];
        int trailing;

        if (ch >= 0x20 && ch != 0x7f)
            continue;
        trailing = (ch == '\n' && v[i + 1] == '\0') ||
                   (ch == '\r' && (v[i + 1] == '\0' || (v[i + 1] == '\n' && v[i + 2] == '\0')));
        if (env_name != NULL)
            snprintf(why, whycap,
                     "the value of environment variable %.64s contains a control character "
                     "(0x%02x at byte %zu%s)",
                     env_name, ch, i, trailing ? ": a trailing newline in the secret?" : "");
        else
            snprintf(why, whycap, "contains a control character (0x%02x at byte %zu)", ch, i);
        return -1;
    }
    return 0;
}
