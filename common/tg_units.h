/* tg_units: money and durations as both services read them (config files, the key API, control
 * records), one grammar each.
 *
 * Money: a non-negative decimal ("0.00000005", "5e-8", "1.5E-06", "3") parsed exactly, then
 * scaled to integer femto-USD (10^-15 USD), rounded half up.
 * Durations (LiteLLM's budget_duration and friends): a non-negative whole number with a unit —
 * "s" (or none), "m", "h", "d", "w" (7 days), "mo" (30 days). */
#ifndef TG_UNITS_H
#define TG_UNITS_H

#include <stdint.h>

/* tg_parse_u64: a whole number ("+" allowed, digits only). Returns 0, TG_EINVAL or TG_ERANGE. */
int tg_parse_u64(const char *text, uint64_t *out);

/* tg_parse_decimal: text as mant * 10^exp10, exactly (36 significant digits at most; digits
 * beyond are below any unit used here). Returns 0, TG_EINVAL (not a non-negative decimal) or
 * TG_ERANGE. */
int tg_parse_decimal(const char *text, unsigned __int128 *mant, int *exp10);

/* tg_scale_round: mant * 10^shift rounded half up into *out. Returns 0 or TG_ERANGE (over
 * INT64_MAX). */
int tg_scale_round(unsigned __int128 mant, int shift, int64_t *out);

/* tg_parse_usd_fusd: USD text to femto-USD. Returns 0, TG_EINVAL or TG_ERANGE (> INT64_MAX
 * fUSD, about 9,223 USD: prices per token; budgets use tg_parse_usd_nusd). */
int tg_parse_usd_fusd(const char *text, int64_t *fusd_out);

/* tg_parse_usd_nusd: USD text to nano-USD (budgets). Returns 0, TG_EINVAL or TG_ERANGE. */
int tg_parse_usd_nusd(const char *text, int64_t *nusd_out);

/* tg_parse_duration_s: a duration to seconds. Returns 0 or TG_EINVAL (not the grammar, or over
 * INT64_MAX seconds). */
int tg_parse_duration_s(const char *text, int64_t *seconds_out);

#endif
