#!/usr/bin/env python3
"""Writes the proto golden vectors (tests/golden/valid, tests/golden/invalid).

The expected canonical encodings are computed here with Python's json module, independently of
the C encoder: fields in schema order, optional ones at their defaults left out, no whitespace,
UTF-8 kept as is, control characters escaped. Invalid vectors carry the exact reason the decoder must give.
Run it after changing a vector; review the diff of the generated files.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CALL_ID = "0190b3e2-7c1a-7b3e-8f00-123456789abc"
KEY_HASH = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"

ORDER = ["v", "kind", "call_id", "ts_start_ms", "ts_end_ms", "endpoint", "stream", "key_hash",
         "key_alias", "team_id", "user_id", "end_user", "model_requested", "model_group",
         "deployment_id", "provider", "model", "status", "error_class", "prompt_tokens",
         "completion_tokens", "cost_nusd", "latency_ms", "ttft_ms", "attempts", "fallbacks",
         "cache_read_tokens", "cache_creation_tokens", "reasoning_tokens", "price_unknown",
         "trail", "tags", "trace_id"]
# Members always written; every other one only when not at its default ("", 0, false, []).
REQUIRED = ("v", "kind", "call_id", "ts_start_ms", "ts_end_ms", "endpoint", "status")
DEFAULTS = {"stream": False, "trail": [], "tags": [], "trace_id": "", "price_unknown": False}
ATTEMPT_ORDER = ["group", "deployment_id", "status", "error_class", "latency_ms", "message"]


def default(name):
    if name in DEFAULTS:
        return DEFAULTS[name]
    if name in ("prompt_tokens", "completion_tokens", "cost_nusd", "latency_ms", "ttft_ms",
                "attempts", "fallbacks", "cache_read_tokens", "cache_creation_tokens",
                "reasoning_tokens"):
        return 0
    return ""


def canonical(ev):
    """The encoder's output for the event the decoder reads from ev."""
    out = {}
    for name in ORDER:
        value = ev.get(name, default(name))
        if name == "trail":
            value = [{k: a[k] for k in ATTEMPT_ORDER if a.get(k)} for a in value]
        if name not in REQUIRED and value == default(name):
            continue
        if name == "call_id":
            value = value.lower()
        out[name] = value
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def base(**kw):
    ev = {"v": 1, "kind": "request", "call_id": CALL_ID, "ts_start_ms": 1764486000000,
          "ts_end_ms": 1764486000420, "endpoint": "/v1/chat/completions", "status": 200}
    ev.update(kw)
    return ev


def full():
    return base(stream=False, key_hash=KEY_HASH, key_alias="ci-key", team_id="team-a",
                user_id="u-17", end_user="customer-9", model_requested="alias-main",
                model_group="gpt-fallback", deployment_id="fb-1", provider="openai",
                model="gpt-5.4-mini", error_class="", prompt_tokens=12, completion_tokens=8,
                cost_nusd=3800, latency_ms=420, ttft_ms=0, attempts=3, fallbacks=1,
                trail=[{"group": "gpt-main", "deployment_id": "main-1", "status": 500,
                        "error_class": "server_error", "latency_ms": 101,
                        "message": "upstream answered 500"},
                       {"group": "gpt-main", "deployment_id": "main-2", "status": 429,
                        "error_class": "rate_limit", "latency_ms": 12,
                        "message": "upstream answered 429"},
                       {"group": "gpt-fallback", "deployment_id": "fb-1", "status": 200,
                        "error_class": "", "latency_ms": 300, "message": ""}],
                tags=["prod", "batch-7", "team:a"], trace_id=TRACE_ID)


def without(ev, name):
    ev = dict(ev)
    del ev[name]
    return ev


VALID = {
    "minimal": json.dumps(base()),
    "full": json.dumps(full()),
    "unicode": None,  # written raw below (escapes and raw UTF-8 mixed)
    "stream": json.dumps(base(stream=True, ttft_ms=85, latency_ms=900, prompt_tokens=30,
                              completion_tokens=200, model_group="gpt-main",
                              provider="anthropic", model="claude-sonnet",
                              endpoint="/v1/messages")),
    "cooldown": json.dumps(base(kind="cooldown", status=0, deployment_id="main-1",
                                model_group="gpt-main", error_class="server_error",
                                endpoint="")),
    "unknown_field": json.dumps(dict(full(), future_field={"nested": [1, 2, {"x": None}]},
                                     another=1.5, zz="ignored")),
    "pretty_reordered": json.dumps(dict(reversed(list(full().items()))), indent=2),
    "max_caps": json.dumps(base(key_alias="k" * 64, team_id="t" * 64, user_id="u" * 64,
                                end_user="e" * 64, model_requested="r" * 128,
                                model_group="g" * 128, deployment_id="d" * 64,
                                provider="p" * 32, model="m" * 128, error_class="c" * 32,
                                endpoint="/" * 31, attempts=2147483647, fallbacks=2147483647,
                                prompt_tokens=9223372036854775807, status=999,
                                trail=[{"group": "G" * 128, "deployment_id": "D" * 64,
                                        "status": 999, "error_class": "C" * 32,
                                        "latency_ms": 4294967295, "message": "M" * 160}] * 4,
                                tags=["x" * 64] * 8)),
    "uppercase_uuid": json.dumps(base(call_id=CALL_ID.upper())),
    "cached_usage": json.dumps(base(prompt_tokens=5100, completion_tokens=50, cost_nusd=6000000,
                                    cache_read_tokens=4000, cache_creation_tokens=1000,
                                    reasoning_tokens=20)),
    "price_unknown": json.dumps(base(prompt_tokens=12, completion_tokens=8, price_unknown=True,
                                     cache_read_tokens=0)),
}

UNICODE_RAW = ('{"v":1,"kind":"request","call_id":"%s","ts_start_ms":1,"ts_end_ms":2,'
               '"endpoint":"/v1/chat/completions","status":200,'
               '"end_user":"Zo\\u00eb \\ud83d\\ude00 caf\u00e9",'
               '"model":"\u6a21\u578b-\U0001F680","key_alias":"tab\\there \\"q\\" back\\\\slash",'
               '"trail":[{"group":"g\u00fc","message":"line1\\nline2\\u0001\\u001f\\/"}],'
               '"tags":["\u00e9t\u00e9","\\u2028"]}') % CALL_ID

BASE = json.dumps(base())
DUP = BASE.replace("}", ",\"status\":500}")
BAD_UTF8 = json.dumps(base(model="x")).encode().replace(b'"x"', b'"\xc3\x28"')

INVALID = [
    # name, raw JSON text, exact reason
    ("not_json", "{\"v\":1,", "invalid JSON at byte 7: unexpected end of input"),
    ("empty", "", "invalid JSON at byte 0: unexpected end of input"),
    ("trailing_garbage", json.dumps(base()) + "x",
     "invalid JSON at byte %d: unexpected data after the value" % len(json.dumps(base()))),
    ("trailing_comma", json.dumps(base())[:-1] + ",}",
     "invalid JSON at byte %d: expected a string key" % len(json.dumps(base()))),
    ("top_level_array", "[1,2]", "event: not a JSON object"),
    ("missing_v", json.dumps(without(base(), "v")), "field v: missing"),
    ("v_string", json.dumps(base(v="1")), "field v: not an integer"),
    ("v_2", json.dumps(base(v=2)), "field v: unsupported version 2"),
    ("kind_unknown", json.dumps(base(kind="batch")),
     "field kind: not \"request\" or \"cooldown\""),
    ("missing_call_id", json.dumps(without(base(), "call_id")), "field call_id: missing"),
    ("call_id_not_uuid", json.dumps(base(call_id="0190b3e2-7c1a-7b3e-8f00-123456789abz")),
     "field call_id: not a UUID"),
    ("call_id_too_long", json.dumps(base(call_id=CALL_ID + "0")), "field call_id: not a UUID"),
    ("call_id_number", json.dumps(base(call_id=5)), "field call_id: not a string"),
    ("ts_start_negative", json.dumps(base(ts_start_ms=-1)), "field ts_start_ms: negative"),
    ("missing_endpoint", json.dumps(without(base(), "endpoint")), "field endpoint: missing"),
    ("missing_status", json.dumps(without(base(), "status")), "field status: missing"),
    ("status_range", json.dumps(base(status=1000)), "field status: out of range (max 999)"),
    ("stream_string", json.dumps(base(stream="yes")), "field stream: not a boolean"),
    ("prompt_tokens_negative", json.dumps(base(prompt_tokens=-5)),
     "field prompt_tokens: negative"),
    ("prompt_tokens_float", json.dumps(base(prompt_tokens=1.5)),
     "field prompt_tokens: not an integer"),
    ("cost_too_big", json.dumps(base()).replace("}", ",\"cost_nusd\":9223372036854775808}"),
     "field cost_nusd: out of range (max 9223372036854775807)"),
    ("unknown_field_big_number_ok_but_v_missing",
     json.dumps(without(base(), "v")).replace("}", ",\"future\":123456789012345678901234567890}"),
     "field v: missing"),
    ("leading_zero", json.dumps(base()).replace("\"status\": 200", "\"status\": 0200"),
     "invalid JSON at byte %d: invalid number (leading zero)"
     % (json.dumps(base()).index("\"status\": 200") + 11)),
    ("attempts_range", json.dumps(base(attempts=2147483648)),
     "field attempts: out of range (max 2147483647)"),
    ("model_over_cap", json.dumps(base(model="m" * 129)), "field model: longer than 128 bytes"),
    ("key_alias_multibyte_over_cap", json.dumps(base(key_alias="\u00e9" * 33),
                                                ensure_ascii=False),
     "field key_alias: longer than 64 bytes"),
    ("key_hash_upper", json.dumps(base(key_hash=KEY_HASH.upper())),
     "field key_hash: not a lowercase SHA-256 hex digest"),
    ("trace_id_bad", json.dumps(base(trace_id="xyz")),
     "field trace_id: not 32 lowercase hex digits"),
    ("trail_too_many", json.dumps(base(trail=[{"group": "g"}] * 5)),
     "field trail: more than 4 entries"),
    ("trail_not_array", json.dumps(base(trail={"group": "g"})), "field trail: not an array"),
    ("trail_entry_not_object", json.dumps(base(trail=[{"group": "g"}, "x"])),
     "field trail[1]: not an object"),
    ("trail_message_over_cap", json.dumps(base(trail=[{"message": "m" * 161}])),
     "field trail[0].message: longer than 160 bytes"),
    ("trail_status_negative", json.dumps(base(trail=[{"status": -1}])),
     "field trail[0].status: negative"),
    ("tags_too_many", json.dumps(base(tags=["t"] * 9)), "field tags: more than 8 entries"),
    ("tag_not_string", json.dumps(base(tags=["a", 7])), "field tags[1]: not a string"),
    ("tag_over_cap", json.dumps(base(tags=["t" * 65])), "field tags[0]: longer than 64 bytes"),
    ("duplicate_key", DUP, "invalid JSON at byte %d: duplicate key \"status\"" % len(BASE)),
    ("nul_in_string", json.dumps(base(model="a\u0000b")), "field model: contains a NUL character"),
    ("invalid_utf8", BAD_UTF8, "invalid JSON at byte %d: invalid UTF-8" % BAD_UTF8.index(b"\xc3")),
    ("lone_surrogate", json.dumps(base(model="\ud800")),
     "invalid JSON at byte %d: invalid \\u escape (lone high surrogate)"
     % json.dumps(base(model="\ud800")).index("\\ud800")),
    ("raw_control_char", json.dumps(base(model="a")).replace("\"a\"", "\"a\tb\""),
     "invalid JSON at byte %d: control character in string"
     % (json.dumps(base(model="a")).index("\"a\"") + 2)),
    ("bad_escape", json.dumps(base(model="a")).replace("\"a\"", "\"a\\qb\""),
     "invalid JSON at byte %d: invalid escape" % (json.dumps(base(model="a")).index("\"a\"") + 3)),
    ("deep_unknown_nesting", json.dumps(base()).replace("}", ",\"x\":" + "[" * 70 + "]" * 70 + "}"),
     "invalid JSON at byte %d: nesting too deep" % (len(BASE) - 1 + 5 + 64)),
    ("v_null", json.dumps(base(v=None)), "field v: not an integer"),
    ("stream_and_model_bad_reports_schema_first", json.dumps(base(model=1, stream=1)),
     "field stream: not a boolean"),
]


def write(path, text):
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))


def main():
    for d in ("valid", "invalid"):
        os.makedirs(os.path.join(HERE, d), exist_ok=True)
    for name, text in VALID.items():
        if name == "unicode":
            text = UNICODE_RAW
        write(os.path.join(HERE, "valid", name + ".json"), text + "\n")
        write(os.path.join(HERE, "valid", name + ".expected"), canonical(json.loads(text)) + "\n")
    for name, text, reason in INVALID:
        write(os.path.join(HERE, "invalid", name + ".json"), text)
        if reason is not None:
            write(os.path.join(HERE, "invalid", name + ".reason"), reason + "\n")
    big = json.dumps(base(key_alias="k" * 5000))
    write(os.path.join(HERE, "invalid", "too_large.json"), big)
    write(os.path.join(HERE, "invalid", "too_large.reason"),
          "event too large: %d bytes > 4096\n" % len(big))


if __name__ == "__main__":
    main()
