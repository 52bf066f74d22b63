#!/usr/bin/env python3
"""cloud_fake: fakes of the cloud providers' APIs that check authentication the way the real
services do, for router-svc's integration tests only.

    cloud_fake.py --config FILE.json --port-file FILE [--log FILE.jsonl]

Binds 127.0.0.1 on a free port (written to --port-file). HTTP/1.1 with keep-alive. Every request
is recorded (path, query, the credential headers, the body's model) one JSON line each in --log.

Azure OpenAI (config "azure": {"api_key", "api_version", "deployments": [names]}):
  POST /openai/deployments/{deployment}/chat/completions?api-version=V   (stream or not)
  POST /openai/deployments/{deployment}/embeddings?api-version=V
  POST /openai/responses?api-version=V
  The api-version must be V (else 404 "Resource not found", as Azure answers); the deployment must
  be known (else 404 DeploymentNotFound); credentials: "api-key: <api_key>" or "Authorization:
  Bearer <token>" with a token this fake's Entra ID endpoint issued and that has not expired
  (else 401). Errors use Azure's shapes.
Microsoft Entra ID (config "entra": {"tenant", "client_id", "client_secret", "scope",
  "expires_in"}):
  POST /{tenant}/oauth2/v2.0/token  form grant_type=client_credentials, client_id, client_secret,
  scope: all must match (else 400/401 with an OAuth error); answers {"token_type": "Bearer",
  "expires_in": N, "access_token": T} with a fresh T each time.

Gemini API (config "gemini": {"api_key", "models": [names]}):
  POST /v1beta/models/{model}:generateContent | :streamGenerateContent?alt=sse |
  :batchEmbedContents, key in x-goog-api-key (else 400 "API key not valid", as Google answers);
  the body must be a generateContent request (contents[] with roles user/model and parts).
Vertex AI (config "vertex": {"project", "location", "models": [names]}):
  POST /v1/projects/{project}/locations/{location}/publishers/google/models/{m}:generateContent
  | :streamGenerateContent?alt=sse | :predict, and .../publishers/anthropic/models/{m}:rawPredict
  | :streamRawPredict (the body must carry anthropic_version "vertex-2023-10-16" and no model);
  "Authorization: Bearer <token>" with a token this fake's Google token endpoint issued (else
  401 UNAUTHENTICATED).
Google OAuth 2.0 (config "google": {"client_email", "kid", "public_key": PEM file,
  "expires_in"}): POST /token with grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer and a
  JWT assertion: header alg RS256 with the kid, iss the client_email, aud this endpoint's URL,
  scope cloud-platform, iat now (a minute's skew), exp at most an hour after iat and not past;
  the RS256 signature is verified against the public key (openssl dgst -verify) before a token
  is issued; else 400 invalid_grant.

Amazon Bedrock (config "bedrock": {"access_key_id", "secret", "region", "models": [ids]}):
  POST /model/{id}/converse | /converse-stream | /invoke, signed with SigV4: the signature is
  computed again here from the request as received (path encoded once more, signed headers,
  the body's SHA-256, the date scope, region, service "bedrock") with the secret, and compared
  (else 403 SignatureDoesNotMatch); x-amz-date within 5 minutes. Converse bodies must
  alternate user/assistant from the user. converse-stream answers in AWS's binary event-stream
  framing (CRC-32s). invoke: Titan embeddings.
AWS STS (config "sts": {"role_arn", "web_identity_token", "expires_in"}): POST /sts/ with
  Action=AssumeRoleWithWebIdentity: the token and role must match; answers XML credentials
  that the Bedrock fake then accepts (with their session token).

Tool calls (every chat-like API above: Azure chat completions, Gemini and Vertex
generateContent, Vertex Claude, Bedrock Converse; streaming and not, in the API's own shape):
with tools declared and a user turn last, the answer calls the first tool, or the one tool_choice
names (any/required: the first), or the first two when the user's text carries "[parallel]"
and parallel calls are not disabled (OpenAI parallel_tool_calls false, Anthropic
tool_choice.disable_parallel_tool_use)
("[preamble]": the text "Let me check." first, as a text block or part before the calls);
the arguments come from the tool's schema (strings "Paris", integers 3, numbers 2.5, booleans
true). With tool results last, the answer is the text "the tool said: " + the results' strings
joined by "; ". Streams carry the arguments in several deltas where the API streams them
(OpenAI, Anthropic input_json_delta after an empty first one, Bedrock toolUse.input; an input
without members streams no piece); Gemini streams a call per chunk; an OpenAI-shaped stream
sends every call whole in one chunk when the prompt carries "[oneshot]" (as vLLM and Groq do).
The request's tools, tool choice, calls and results are checked as the service checks them
(Anthropic: tools[].input_schema, each tool_result answering a tool_use of the turn before
and each tool_use answered; Gemini: functionDeclarations, as many functionResponse parts as
functionCall parts before; Bedrock: toolConfig.tools[].toolSpec.inputSchema.json, toolConfig
present with toolUse/toolResult blocks, toolResult answering a toolUse; OpenAI: tools[].function,
tool messages answering tool_calls): otherwise 400 in the API's error shape, naming the problem.

Faults per deployment or model name: POST /_control/fault/{name} with {"status": 429,
"retry_after": 3} or {"error": "content_filter" | "context_window"}; {} clears. GET /_stats:
{"tokens_issued": N, "requests": N, "rejected": N}.

Bounded: bodies 4 MiB, 1024 recorded tokens.
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import struct
import subprocess
import tempfile
import threading
import time
import urllib.parse
import zlib
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY_MAX = 4 * 1024 * 1024
TOKENS_MAX = 1024

lock = threading.Lock()
state = {"tokens": {}, "faults": {}, "tokens_issued": 0, "requests": 0, "rejected": 0}


def chat_answer(model, req, plan=None):
    words = ["hello ", "from ", "the ", "cloud ", "fake"]
    usage = {"prompt_tokens": 11, "completion_tokens": len(words), "total_tokens": 11 + len(words)}
    if plan is not None and plan[0] == "text":
        words = [w + " " for w in plan[1].split(" ")]
        words[-1] = words[-1][:-1]
    if plan is not None and plan[0] == "calls":
        return chat_tool_answer(model, req, plan[1], usage, plan[2])
    if not req.get("stream"):
        return "application/json", json.dumps({
            "id": "chatcmpl-cloud", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(words)},
                         "finish_reason": "stop"}],
            "usage": usage}).encode()
    ev = []
    for i, w in enumerate(words):
        ev.append({"id": "chatcmpl-cloud", "object": "chat.completion.chunk", "created": 1,
                   "model": model,
                   "choices": [{"index": 0, "delta": {"content": w},
                                "finish_reason": "stop" if i == len(words) - 1 else None}]})
    if (req.get("stream_options") or {}).get("include_usage"):
        ev.append({"id": "chatcmpl-cloud", "object": "chat.completion.chunk", "created": 1,
                   "model": model, "choices": [], "usage": usage})
    return "text/event-stream", ("".join("data: " + json.dumps(e) + "\n\n" for e in ev) +
                                 "data: [DONE]\n\n").encode()


def last_user_text(req):
    """The text of a chat request's last message when it is the user's."""
    msgs = req.get("messages") or [{}]
    c = msgs[-1].get("content") if msgs[-1].get("role") == "user" else ""
    return c if isinstance(c, str) else "".join(
        p.get("text", "") for p in c or [] if isinstance(p, dict))


def chat_tool_answer(model, req, calls, usage, pre):
    """Tool calls in the chat completions shape (pre: text before them, or None); streamed as
    OpenAI does: the call's id, type and name first with empty arguments, then the arguments
    in pieces, by index."""
    tcs = [{"id": "call_az_%d" % (i + 1), "type": "function",
            "function": {"name": n, "arguments": compact(a)}} for i, (n, a) in enumerate(calls)]
    if not req.get("stream"):
        return "application/json", json.dumps({
            "id": "chatcmpl-cloud", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": pre,
                                                 "tool_calls": tcs},
                         "finish_reason": "tool_calls"}],
            "usage": usage}).encode()

    def chunk(delta, finish=None):
        return {"id": "chatcmpl-cloud", "object": "chat.completion.chunk", "created": 1,
                "model": model, "choices": [{"index": 0, "delta": delta,
                                             "finish_reason": finish}]}
    ev = [chunk({"role": "assistant", "content": None})]
    if pre:
        ev.append(chunk({"content": pre}))
    if ONESHOT_MARKER in last_user_text(req):
        # as vLLM, Groq and others stream them: every call whole, in one chunk
        ev.append(chunk({"tool_calls": [dict(tc, index=i) for i, tc in enumerate(tcs)]}))
        tcs = []
    for i, tc in enumerate(tcs):
        ev.append(chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                         "function": {"name": tc["function"]["name"],
                                                      "arguments": ""}}]}))
        for piece in split3(tc["function"]["arguments"]):
            ev.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    ev.append(chunk({}, "tool_calls"))
    if (req.get("stream_options") or {}).get("include_usage"):
        ev.append({"id": "chatcmpl-cloud", "object": "chat.completion.chunk", "created": 1,
                   "model": model, "choices": [], "usage": usage})
    return "text/event-stream", ("".join("data: " + json.dumps(e) + "\n\n" for e in ev) +
                                 "data: [DONE]\n\n").encode()


def embeddings_answer(model, req):
    inp = req.get("input")
    n = len(inp) if isinstance(inp, list) else 1
    vec = [0.5, 0.25]
    if req.get("encoding_format") == "base64":
        # as OpenAI and Azure answer it: little-endian float32, base64
        vec = base64.b64encode(struct.pack("<%df" % len(vec), *vec)).decode()
    return "application/json", json.dumps({
        "object": "list", "model": model,
        "data": [{"object": "embedding", "index": i, "embedding": vec} for i in range(n)],
        "usage": {"prompt_tokens": 3 * n, "total_tokens": 3 * n}}).encode()


def responses_answer(model, req):
    out = {"id": "resp_cloud", "object": "response", "created_at": 1, "status": "completed",
           "model": model,
           "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": "hello from the cloud fake",
                                    "annotations": []}]}],
           "usage": {"input_tokens": 9, "output_tokens": 5, "total_tokens": 14}}
    if not req.get("stream"):
        return "application/json", json.dumps(out).encode()
    ev = [("response.created", {"type": "response.created",
                                "response": dict(out, status="in_progress", output=[])}),
          ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_1",
                                          "output_index": 0, "content_index": 0,
                                          "delta": "hello from the cloud fake"}),
          ("response.completed", {"type": "response.completed", "response": out})]
    return "text/event-stream", "".join("event: %s\ndata: %s\n\n" % (n, json.dumps(d))
                                        for n, d in ev).encode()


def gemini_check(req):
    """None when req is a generateContent request, else the problem."""
    if not isinstance(req, dict) or "model" in req:
        return "not a generateContent request"
    contents = req.get("contents")
    if not isinstance(contents, list) or not contents:
        return "contents must be a non-empty array"
    for c in contents:
        if c.get("role") not in ("user", "model") or not isinstance(c.get("parts"), list):
            return "each content needs role user|model and parts"
        for p in c["parts"]:
            if not isinstance(p, dict) or not (set(p) & {"text", "inlineData", "fileData",
                                                         "functionCall", "functionResponse"}):
                return "unknown part"
    return None


def gemini_answer(req, stream, plan=None):
    usage = {"promptTokenCount": 13, "candidatesTokenCount": 6, "thoughtsTokenCount": 2,
             "totalTokenCount": 21}
    words = ["hello ", "from ", "gemini"]
    if plan is not None and plan[0] == "text":
        words = [w + " " for w in plan[1].split(" ")]
        words[-1] = words[-1][:-1]
    calls = plan[1] if plan is not None and plan[0] == "calls" else []
    pre = plan[2] if calls else None
    parts = ([{"text": pre}] if pre else []) + (
        [{"functionCall": {"name": n, "args": a}} for n, a in calls] if calls
        else [{"text": "".join(words)}])
    if not stream:
        return "application/json", json.dumps({
            "candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage, "modelVersion": "fake", "responseId": "resp-1"}).encode()
    # Gemini streams a call whole, one part per chunk; the last chunk has the finish reason.
    pieces = [[p] for p in parts] if calls else [[{"text": w}] for w in words]
    chunks = []
    for i, ps in enumerate(pieces):
        c = {"candidates": [{"content": {"role": "model", "parts": ps}, "index": 0}],
             "usageMetadata": {"promptTokenCount": 13}}
        if i == len(pieces) - 1:
            c["candidates"][0]["finishReason"] = "STOP"
            c["usageMetadata"] = usage
        chunks.append(c)
    return "text/event-stream", "".join("data: " + json.dumps(c) + "\r\n\r\n"
                                        for c in chunks).encode()


def anthropic_answer(model, req, plan=None):
    usage = {"input_tokens": 17, "output_tokens": 5}
    text = "hello from claude on vertex"
    if plan is not None and plan[0] == "text":
        text = plan[1]
    calls = plan[1] if plan is not None and plan[0] == "calls" else []
    pre = plan[2] if calls else None
    stop = "tool_use" if calls else "end_turn"
    blocks = ([{"type": "text", "text": pre}] if pre else []) + (
        [{"type": "tool_use", "id": "toolu_vrtx_%02d" % (i + 1), "name": n, "input": a}
         for i, (n, a) in enumerate(calls)] if calls else [{"type": "text", "text": text}])
    if not req.get("stream"):
        return "application/json", json.dumps({
            "id": "msg_vertex", "type": "message", "role": "assistant", "model": model,
            "content": blocks, "stop_reason": stop, "stop_sequence": None,
            "usage": usage}).encode()
    ev = [("message_start", {"type": "message_start", "message": {
              "id": "msg_vertex", "type": "message", "role": "assistant", "model": model,
              "content": [], "stop_reason": None, "stop_sequence": None,
              "usage": {"input_tokens": 17, "output_tokens": 1}}})]
    for i, b in enumerate(blocks):
        if b["type"] == "tool_use":
            ev.append(("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": dict(b, input={})}))
            # as Claude streams: an empty first delta; an empty input has no other
            for piece in [""] + (split3(compact(b["input"])) if b["input"] else []):
                ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": "input_json_delta",
                                                             "partial_json": piece}}))
        else:
            ev += [("content_block_start", {"type": "content_block_start", "index": i,
                                            "content_block": {"type": "text", "text": ""}}),
                   ("content_block_delta", {"type": "content_block_delta", "index": i,
                                            "delta": {"type": "text_delta", "text": b["text"]}})]
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    ev += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop,
                                                                 "stop_sequence": None},
                              "usage": {"output_tokens": 5}}),
           ("message_stop", {"type": "message_stop"})]
    return "text/event-stream", "".join("event: %s\ndata: %s\n\n" % (n, json.dumps(d))
                                        for n, d in ev).encode()


# ---- Tool calls: one deterministic behaviour, answered in each provider's own shape.
# With tools declared and a user turn last, the answer calls the first tool (the tool that
# tool_choice names, when it names one; the first two when the user's text carries
# PARALLEL_MARKER and two or more tools are declared), its arguments made from the tool's
# schema by sample_args(). With tool results last, the answer is text that echoes them
# (TOOL_ECHO + the results' strings), so a test sees that the result reached the provider.
# With PREAMBLE_MARKER in the user's text, PREAMBLE_TEXT comes first, as a text block or part
# before the calls (as Claude often answers).
# Every request is checked the way the service checks it first; a shape it would refuse is a
# 400 naming what is wrong, so a translation defect fails the test that sent it.
PARALLEL_MARKER = "[parallel]"
TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")  # Anthropic's and Bedrock's tool use ids
PREAMBLE_MARKER = "[preamble]"
ONESHOT_MARKER = "[oneshot]"  # chat streams: all the calls whole in one chunk
PREAMBLE_TEXT = "Let me check."
TOOL_ECHO = "the tool said: "


def sample_args(schema):
    """Arguments for a call of a tool with this JSON schema: strings "Paris", integers 3,
    numbers 2.5, booleans true, arrays [], objects {} (per top-level property)."""
    out = {}
    for k, p in ((schema or {}).get("properties") or {}).items():
        t = (p or {}).get("type") if isinstance(p, dict) else None
        if isinstance(t, list):
            t = next((x for x in t if x != "null"), None)
        if isinstance(t, str):
            t = t.lower()  # Gemini's schema types are upper case (OBJECT, STRING)
        out[k] = {"string": "Paris", "integer": 3, "number": 2.5, "boolean": True,
                  "array": [], "object": {}}.get(t)
    return out


def strings_in(v):
    """Every string inside a JSON value, in order, members named "type" left out (the echo of
    a tool result)."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, list):
        return [s for x in v for s in strings_in(x)]
    if isinstance(v, dict):  # a block's "type" is not part of the result
        return [s for k, x in v.items() if k != "type" for s in strings_in(x)]
    if v is None or isinstance(v, bool):
        return []
    return [json.dumps(v)]


def tool_plan(tools, forced, results, user_text):
    """What to answer. tools: [(name, schema)]; forced: a tool name or None; results: the
    tool results' strings of the last turn, or None when it holds none; user_text: the last
    turn's text. Returns ("calls", [(name, args)], preamble), ("text", str, None) or None (the
    usual answer); preamble is PREAMBLE_TEXT, the text said before the calls, when user_text
    carries PREAMBLE_MARKER, else None. Raises ValueError for a forced tool that is not
    declared."""
    if results is not None:
        return "text", TOOL_ECHO + "; ".join(results), None
    if not tools:
        return None
    schemas = dict(tools)
    if forced is not None:
        if forced not in schemas:
            raise ValueError("tool_choice names %r, which is not a declared tool" % forced)
        names = [forced]
    elif PARALLEL_MARKER in user_text and len(tools) >= 2:
        names = [tools[0][0], tools[1][0]]
    else:
        names = [tools[0][0]]
    return ("calls", [(n, sample_args(schemas[n])) for n in names],
            PREAMBLE_TEXT if PREAMBLE_MARKER in user_text else None)


def compact(v):
    """JSON without spaces, as the services write tool arguments."""
    return json.dumps(v, separators=(",", ":"))


def split3(s):
    """s cut into three pieces (streamed argument deltas)."""
    a, b = len(s) // 3, 2 * len(s) // 3
    return [p for p in (s[:a], s[a:b], s[b:]) if p]


# The fields of Gemini's Schema object (an OpenAPI subset): anything else in a function's
# parameters is refused, as the API refuses it ("Invalid JSON payload received. Unknown name").
GEMINI_SCHEMA_KEYS = {"type", "format", "title", "description", "nullable", "enum", "maxItems",
                      "minItems", "properties", "required", "minProperties", "maxProperties",
                      "minLength", "maxLength", "pattern", "example", "anyOf", "propertyOrdering",
                      "default", "items", "minimum", "maximum"}


def gemini_schema_problem(s, where, depth=0):
    """None when s is a schema Gemini accepts, else the problem (at where)."""
    if depth > 32:
        return "%s: nested too deeply" % where
    if not isinstance(s, dict):
        return "%s: a schema must be an object" % where
    for k in s:
        if k not in GEMINI_SCHEMA_KEYS:
            return "Invalid JSON payload received. Unknown name \"%s\" at '%s'" % (k, where)
    if "type" in s and not isinstance(s["type"], str):
        return ("Invalid JSON payload received. Proto field is not repeating, cannot start "
                "list at '%s.type'" % where)
    subs = [("%s.properties[%s].value" % (where, k), v)
            for k, v in (s.get("properties") or {}).items()]
    if "items" in s:
        subs.append((where + ".items", s["items"]))
    subs += [("%s.any_of[%d]" % (where, i), v) for i, v in enumerate(s.get("anyOf") or [])]
    for w, v in subs:
        problem = gemini_schema_problem(v, w, depth + 1)
        if problem:
            return problem
    return None


def gemini_tool_plan(req):
    """tool_plan() for a generateContent request, after checking its tools, toolConfig and
    function turns as the Gemini API does; raises ValueError naming the problem."""
    tools = []
    for t in req.get("tools") or []:
        if not isinstance(t, dict) or not (set(t) & {"functionDeclarations", "googleSearch",
                                                       "codeExecution"}):
            raise ValueError("tools[]: expected functionDeclarations")
        for d in t.get("functionDeclarations") or []:
            if not isinstance(d, dict) or not isinstance(d.get("name"), str):
                raise ValueError("functionDeclarations[].name is required")
            p = d.get("parameters")
            if p is not None and (not isinstance(p, dict) or "type" not in p):
                raise ValueError("functionDeclarations[].parameters must be a schema with a "
                                 "type")
            problem = p is not None and gemini_schema_problem(
                p, "tools[0].function_declarations[%d].parameters" % len(tools))
            if problem:
                raise ValueError(problem)
            tools.append((d["name"], p))
    fcc = (req.get("toolConfig") or {}).get("functionCallingConfig") or {}
    forced = None
    if fcc.get("mode") == "NONE":
        tools = []
    allowed = fcc.get("allowedFunctionNames")
    if allowed is not None:
        if fcc.get("mode") != "ANY" or not isinstance(allowed, list) or len(allowed) != 1:
            raise ValueError("allowedFunctionNames needs mode ANY")
        forced = allowed[0]
    elif fcc.get("mode") == "ANY" and tools:
        forced = tools[0][0]
    contents = req["contents"]
    for i, c in enumerate(contents):
        calls = [p["functionCall"] for p in c["parts"] if "functionCall" in p]
        resps = [p["functionResponse"] for p in c["parts"] if "functionResponse" in p]
        for fc in calls:
            if c["role"] != "model" or not isinstance(fc.get("name"), str) or \
                    not isinstance(fc.get("args", {}), dict):
                raise ValueError("functionCall needs role model, a name and args")
        if resps:
            prev = [p["functionCall"]["name"] for p in contents[i - 1]["parts"]
                    if "functionCall" in p] if i > 0 and contents[i - 1]["role"] == "model" else []
            if c["role"] != "user":
                raise ValueError("functionResponse parts belong in a user turn")
            if sorted(r.get("name") for r in resps) != sorted(prev):
                raise ValueError("Please ensure that the number of function response parts is "
                                 "equal to the number of function call parts of the function "
                                 "call turn.")
            if any(not isinstance(r.get("response"), dict) for r in resps):
                raise ValueError("functionResponse.response must be an object")
    last = contents[-1]
    resps = [p["functionResponse"] for p in last["parts"] if "functionResponse" in p]
    text = "".join(p.get("text", "") for p in last["parts"])
    return tool_plan(tools, forced, [s for r in resps for s in strings_in(r["response"])]
                     if resps else None, text)


def anthropic_tool_plan(req):
    """tool_plan() for an Anthropic messages request, after checking tools (input_schema),
    tool_choice, and that every tool_result answers a tool_use of the assistant turn just
    before it (and every tool_use is answered), as the Messages API does."""
    tools = []
    for i, t in enumerate(req.get("tools") or []):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise ValueError("tools.%d.name: Field required" % i)
        if not isinstance(t.get("input_schema"), dict):
            raise ValueError("tools.%d.input_schema: Field required" % i)
        if t["input_schema"].get("type") != "object":
            raise ValueError("tools.%d.input_schema.type: Input should be 'object'" % i)
        tools.append((t["name"], t["input_schema"]))
    choice = req.get("tool_choice")
    forced = None
    if choice is not None:
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind not in ("auto", "any", "tool", "none"):
            raise ValueError("tool_choice.type: expected auto, any, tool or none")
        if kind == "tool":
            forced = choice.get("name")
        elif kind == "any" and tools:
            forced = tools[0][0]
        elif kind == "none":
            tools = []
    msgs = req.get("messages") or []
    if req.get("tools") is None and any(
            isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result")
            for m in msgs if isinstance(m.get("content"), list) for b in m["content"]):
        raise ValueError("Requests which include `tool_use` or `tool_result` blocks must "
                         "define tools.")
    pending = set()
    for i, m in enumerate(msgs):
        blocks = m.get("content") if isinstance(m.get("content"), list) else []
        uses = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        if m.get("role") == "assistant":
            if pending:
                raise ValueError("messages.%d: tool_use ids were found without tool_result "
                                 "blocks immediately after: %s" % (i, ", ".join(sorted(pending))))
            for u in uses:
                if not isinstance(u.get("id"), str) or not isinstance(u.get("name"), str) or \
                        not isinstance(u.get("input"), dict):
                    raise ValueError("messages.%d: tool_use needs id, name and an input object"
                                     % i)
                if not TOOL_ID.match(u["id"]):
                    raise ValueError("messages.%d.content.tool_use.id: String should match "
                                     "pattern '^[a-zA-Z0-9_-]+$'" % i)
            pending = {u["id"] for u in uses}
            continue
        for r in results:
            if r.get("tool_use_id") not in pending:
                raise ValueError("messages.%d: unexpected `tool_use_id` found in `tool_result` "
                                 "blocks: %s. Each `tool_result` block must have a "
                                 "corresponding `tool_use` block in the previous message."
                                 % (i, r.get("tool_use_id")))
            pending.discard(r["tool_use_id"])
        if pending:
            raise ValueError("messages.%d: tool_use ids were found without tool_result blocks "
                             "immediately after: %s" % (i, ", ".join(sorted(pending))))
    last = msgs[-1] if msgs else {}
    content = last.get("content")
    one = isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True
    if isinstance(content, str):
        return tool_plan(tools, forced, None, content.replace(PARALLEL_MARKER, "") if one
                         else content)
    blocks = [b for b in content or [] if isinstance(b, dict)]
    results = [b for b in blocks if b.get("type") == "tool_result"]
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    if one:
        text = text.replace(PARALLEL_MARKER, "")
    return tool_plan(tools, forced, [s for r in results for s in strings_in(r.get("content"))]
                     if results else None, text)


def bedrock_tool_plan(req):
    """tool_plan() for a Converse request, after checking toolConfig and the toolUse /
    toolResult blocks as Bedrock does."""
    tc = req.get("toolConfig")
    tools = []
    forced = None
    if tc is not None:
        if not isinstance(tc.get("tools"), list) or not tc["tools"]:
            raise ValueError("toolConfig.tools must be a non-empty list")
        for i, t in enumerate(tc["tools"]):
            spec = t.get("toolSpec") if isinstance(t, dict) else None
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                raise ValueError("toolConfig.tools.%d.toolSpec.name is required" % i)
            js = (spec.get("inputSchema") or {}).get("json")
            if not isinstance(js, dict):
                raise ValueError("toolConfig.tools.%d.toolSpec.inputSchema.json is required" % i)
            tools.append((spec["name"], js))
        choice = tc.get("toolChoice")
        if choice is not None:
            if not isinstance(choice, dict) or len(choice) != 1 or \
                    next(iter(choice)) not in ("auto", "any", "tool"):
                raise ValueError("toolConfig.toolChoice: expected one of auto, any, tool")
            if "tool" in choice:
                forced = (choice["tool"] or {}).get("name")
            elif "any" in choice:
                forced = tools[0][0]
    msgs = req["messages"]
    pending = set()
    for i, m in enumerate(msgs):
        uses = [b["toolUse"] for b in m["content"] if isinstance(b, dict) and "toolUse" in b]
        results = [b["toolResult"] for b in m["content"]
                   if isinstance(b, dict) and "toolResult" in b]
        if (uses or results) and tc is None:
            raise ValueError("The toolConfig field must be defined when using toolUse and "
                             "toolResult content blocks.")
        if m["role"] == "assistant":
            for u in uses:
                if not isinstance(u.get("toolUseId"), str) or not isinstance(u.get("name"), str) \
                        or not isinstance(u.get("input"), dict):
                    raise ValueError("messages.%d: toolUse needs toolUseId, name and input" % i)
                if not TOOL_ID.match(u["toolUseId"]) or len(u["toolUseId"]) > 64:
                    raise ValueError("messages.%d.toolUse.toolUseId: Member must satisfy "
                                     "regular expression pattern: [a-zA-Z0-9_-]+ (at most 64)"
                                     % i)
            pending = {u["toolUseId"] for u in uses}
            continue
        for r in results:
            if r.get("toolUseId") not in pending:
                raise ValueError("messages.%d: toolResult %s answers no toolUse of the previous "
                                 "turn" % (i, r.get("toolUseId")))
            pending.discard(r["toolUseId"])
            c = r.get("content")
            if not isinstance(c, list) or not c or any(
                    not isinstance(x, dict) or len(set(x) & {"text", "json", "image",
                                                             "document"}) != 1 for x in c):
                raise ValueError("messages.%d: toolResult.content must be a non-empty list of "
                                 "text or json blocks" % i)
        if pending:
            raise ValueError("messages.%d: the toolUse blocks %s have no toolResult"
                             % (i, ", ".join(sorted(pending))))
        pending = set()
    last = msgs[-1]
    results = [b["toolResult"] for b in last["content"] if isinstance(b, dict) and
               "toolResult" in b]
    text = "".join(b.get("text", "") for b in last["content"] if isinstance(b, dict))
    return tool_plan(tools, forced, [s for r in results for s in strings_in(r["content"])]
                     if results else None, text)


def openai_tool_plan(req):
    """tool_plan() for a chat completions request, after checking tools, tool_choice and that
    every tool message answers a tool call of the assistant message before it."""
    tools = []
    for i, t in enumerate(req.get("tools") or []):
        fn = t.get("function") if isinstance(t, dict) else None
        if t.get("type") != "function" or not isinstance(fn, dict) or \
                not isinstance(fn.get("name"), str):
            raise ValueError("tools[%d]: expected {type: function, function: {name}}" % i)
        if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
            raise ValueError("tools[%d].function.parameters must be an object" % i)
        tools.append((fn["name"], fn.get("parameters")))
    choice = req.get("tool_choice")
    forced = None
    if isinstance(choice, dict):
        forced = (choice.get("function") or {}).get("name")
        if choice.get("type") != "function" or forced is None:
            raise ValueError("tool_choice: expected {type: function, function: {name}}")
    elif choice == "required" and tools:
        forced = tools[0][0]
    elif choice == "none":
        tools = []
    elif choice not in (None, "auto", "required"):
        raise ValueError("tool_choice: expected none, auto, required or a function")
    msgs = req.get("messages") or []
    pending = set()
    for i, m in enumerate(msgs):
        if m.get("role") == "assistant":
            if pending:
                raise ValueError("messages.[%d]: an assistant message with 'tool_calls' must be "
                                 "followed by tool messages responding to each 'tool_call_id'"
                                 % (i - 1))
            pending = set()
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                try:
                    json.loads(fn.get("arguments"))
                except (TypeError, ValueError):
                    raise ValueError("messages.[%d].tool_calls: arguments must be a JSON string"
                                     % i)
                if not isinstance(c.get("id"), str) or not isinstance(fn.get("name"), str):
                    raise ValueError("messages.[%d].tool_calls: id and function.name required" % i)
                pending.add(c["id"])
        elif m.get("role") == "tool":
            if m.get("tool_call_id") not in pending:
                raise ValueError("messages.[%d].role: messages with role 'tool' must be a "
                                 "response to a preceeding message with 'tool_calls'." % i)
            pending.discard(m["tool_call_id"])
        elif pending:
            raise ValueError("messages.[%d]: tool calls without tool messages: %s"
                             % (i, ", ".join(sorted(pending))))
    results, text = [], ""
    for m in reversed(msgs):
        if m.get("role") != "tool":
            break
        results[:0] = strings_in(m.get("content"))
    if msgs and msgs[-1].get("role") == "user":
        c = msgs[-1].get("content")
        text = c if isinstance(c, str) else "".join(
            p.get("text", "") for p in c or [] if isinstance(p, dict))
    if req.get("parallel_tool_calls") is False:
        text = text.replace(PARALLEL_MARKER, "")
    return tool_plan(tools, forced, results if msgs and msgs[-1].get("role") == "tool" else None,
                     text)


def evs_frame(event_type, payload, message_type="event"):
    """One AWS event-stream frame (CRC-32s as zlib computes them)."""
    def header(name, value):
        n, v = name.encode(), value.encode()
        return bytes([len(n)]) + n + bytes([7]) + len(v).to_bytes(2, "big") + v
    kind = ":event-type" if message_type == "event" else ":exception-type"
    headers = (header(":message-type", message_type) + header(kind, event_type) +
               header(":content-type", "application/json"))
    body = json.dumps(payload).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = total.to_bytes(4, "big") + len(headers).to_bytes(4, "big")
    prelude += zlib.crc32(prelude).to_bytes(4, "big")
    msg = prelude + headers + body
    return msg + zlib.crc32(msg).to_bytes(4, "big")


def sigv4_check(handler, body, keys):
    """None when handler's request is signed by one of keys {akid: (secret, session)} for
    bedrock in its region, else the reason."""
    auth = handler.headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "no SigV4 Authorization"
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    try:
        akid, date, region, service, term = fields["Credential"].split("/")
        signed = fields["SignedHeaders"].split(";")
        given = fields["Signature"]
    except (KeyError, ValueError):
        return "malformed Authorization"
    amz = handler.headers.get("X-Amz-Date", "")
    if akid not in keys:
        return "unknown access key"
    secret, session = keys[akid]
    if session is not None and handler.headers.get("X-Amz-Security-Token") != session:
        return "missing or wrong session token"
    if (term != "aws4_request" or service != "bedrock" or
            region != handler.server.cfg["bedrock"]["region"] or amz[:8] != date):
        return "wrong scope"
    try:
        when = datetime.strptime(amz, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return "bad x-amz-date"
    if abs(datetime.now(timezone.utc) - when) > timedelta(minutes=5):
        return "request time too skewed"
    for h in ("host", "x-amz-date", "content-type"):
        if h not in signed:
            return "%s not signed" % h
    if session is not None and "x-amz-security-token" not in signed:
        return "session token not signed"
    path, _, query = handler.path.partition("?")
    pairs = sorted((urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~"))
                   for k, _, v in (q.partition("=") for q in query.split("&") if q))
    canon = "\n".join([
        handler.command,
        urllib.parse.quote(path, safe="/-_.~"),
        "&".join("%s=%s" % kv for kv in pairs),
        "".join("%s:%s\n" % (h, " ".join(handler.headers.get(h, "").split())) for h in signed),
        ";".join(signed),
        hashlib.sha256(body).hexdigest()])
    sts = "\n".join(["AWS4-HMAC-SHA256", amz, "%s/%s/%s/aws4_request" % (date, region, service),
                     hashlib.sha256(canon.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    want = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, given):
        return "signature mismatch"
    return None


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, ctype, body, headers=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def json_reply(self, status, obj, headers=None):
        self.reply(status, "application/json", json.dumps(obj).encode(), headers)

    def azure_error(self, status, code, message, headers=None):
        with lock:
            state["rejected"] += 1
        self.json_reply(status, {"error": {"code": code, "message": message}}, headers)

    def record(self, path, query, body):
        try:
            model = json.loads(body).get("model", "")
        except (ValueError, AttributeError):
            model = ""
        rec = {"path": path, "query": query, "model": model,
               "auth": {h: self.headers[h] for h in ("authorization", "api-key", "x-api-key",
                                                      "x-goog-api-key") if self.headers[h]}}
        with lock:
            state["requests"] += 1
            if self.server.log_path:
                with open(self.server.log_path, "a") as f:
                    f.write(json.dumps(rec) + "\n")

    def do_GET(self):
        if self.path == "/_stats":
            with lock:
                self.json_reply(200, {k: state.get(k, 0)
                                      for k in ("tokens_issued", "requests", "rejected",
                                                "jwt_verified", "jwt_refused", "sig_verified",
                                                "sig_refused")})
        else:
            self.json_reply(404, {"error": "not found"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > BODY_MAX:
            self.json_reply(413, {"error": "too large"})
            self.close_connection = True
            return
        body = self.rfile.read(n)
        u = urllib.parse.urlsplit(self.path)
        path, query = u.path, urllib.parse.parse_qs(u.query)
        if path.startswith("/_control/fault/"):
            with lock:
                state["faults"][path[len("/_control/fault/"):]] = json.loads(body or b"{}")
            self.json_reply(200, {"ok": True})
            return
        self.record(path, u.query, body)
        cfg = self.server.cfg
        if "entra" in cfg and path == "/%s/oauth2/v2.0/token" % cfg["entra"]["tenant"]:
            self.entra_token(body)
        elif "azure" in cfg and path.startswith("/openai/"):
            self.azure(path, query, body)
        elif "google" in cfg and path == "/token":
            self.google_token(body)
        elif "gemini" in cfg and path.startswith("/v1beta/models/"):
            self.gemini(path, query, body)
        elif "vertex" in cfg and path.startswith("/v1/projects/"):
            self.vertex(path, query, body)
        elif "bedrock" in cfg and path.startswith("/model/"):
            self.bedrock(path, body)
        elif "sts" in cfg and path == "/sts/":
            self.sts(body)
        else:
            self.json_reply(404, {"error": {"code": "404", "message": "Resource not found"}})

    # ---- Microsoft Entra ID: client credentials grant
    def entra_token(self, body):
        e = self.server.cfg["entra"]
        form = urllib.parse.parse_qs(body.decode(), keep_blank_values=True)
        one = {k: v[0] for k, v in form.items() if len(v) == 1}
        ctypes = self.headers.get_all("Content-Type") or []
        if len(ctypes) != 1 or ctypes[0].split(";")[0] != "application/x-www-form-urlencoded":
            # exactly one Content-Type, the form's (a second one makes the request ambiguous)
            self.json_reply(400, {"error": "invalid_request"})
        elif one.get("grant_type") != "client_credentials":
            self.json_reply(400, {"error": "unsupported_grant_type"})
        elif one.get("client_id") != e["client_id"] or one.get("client_secret") != e["client_secret"]:
            with lock:
                state["rejected"] += 1
            self.json_reply(401, {"error": "invalid_client",
                                  "error_description": "AADSTS7000215: Invalid client secret"})
        elif one.get("scope") != e.get("scope", "https://cognitiveservices.azure.com/.default"):
            self.json_reply(400, {"error": "invalid_scope"})
        else:
            tok = "entra-" + secrets.token_hex(24)
            exp = int(e.get("expires_in", 3600))
            with lock:
                state["tokens_issued"] += 1
                if len(state["tokens"]) >= TOKENS_MAX:
                    state["tokens"].pop(next(iter(state["tokens"])))
                state["tokens"][tok] = time.monotonic() + exp
            self.json_reply(200, {"token_type": "Bearer", "expires_in": exp,
                                  "ext_expires_in": exp, "access_token": tok})

    # ---- Google: errors in google.rpc.Status's shape
    def google_error(self, status, code_name, message, details=None):
        with lock:
            state["rejected"] += 1
        err = {"code": status, "message": message, "status": code_name}
        if details:
            err["details"] = details
        self.json_reply(status, {"error": err})

    def google_faults(self, name):
        """True when a fault for name was answered."""
        with lock:
            fault = dict(state["faults"].get(name, {}))
        if fault.get("status") == 429:
            self.google_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. "
                              "check quota).", [{"@type": "type.googleapis.com/google.rpc."
                                                 "RetryInfo",
                                                 "retryDelay": "%ds" % fault.get("retry_after",
                                                                                 1)}])
        elif fault.get("status"):
            self.google_error(fault["status"], "INTERNAL", "Internal error encountered.")
        elif fault.get("error") == "block":
            self.json_reply(200, {"promptFeedback": {"blockReason": "SAFETY"},
                                  "usageMetadata": {"promptTokenCount": 9,
                                                    "totalTokenCount": 9}})
        elif fault.get("error") == "context_window":
            self.google_error(400, "INVALID_ARGUMENT", "The input token count (1200000) exceeds "
                              "the maximum number of tokens allowed (1048576).")
        else:
            return False
        return True

    # ---- Google OAuth 2.0: JWT-bearer grant, the assertion verified before a token is issued
    def google_token(self, body):
        g = self.server.cfg["google"]
        form = urllib.parse.parse_qs(body.decode(), keep_blank_values=True)
        one = {k: v[0] for k, v in form.items() if len(v) == 1}
        ctypes = self.headers.get_all("Content-Type") or []

        def refuse(why):
            with lock:
                state["rejected"] += 1
                state["jwt_refused"] = state.get("jwt_refused", 0) + 1
            self.json_reply(400, {"error": "invalid_grant", "error_description": why})

        if len(ctypes) != 1 or ctypes[0].split(";")[0] != "application/x-www-form-urlencoded":
            return refuse("bad content type")
        if one.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return self.json_reply(400, {"error": "unsupported_grant_type"})
        parts = one.get("assertion", "").split(".")
        if len(parts) != 3:
            return refuse("Invalid JWT.")
        try:
            head = json.loads(b64url_decode(parts[0]))
            claims = json.loads(b64url_decode(parts[1]))
            sig = b64url_decode(parts[2])
        except (ValueError, TypeError):
            return refuse("Invalid JWT.")
        now = time.time()
        aud = "http://127.0.0.1:%d/token" % self.server.server_address[1]
        if head.get("alg") != "RS256" or head.get("kid") != g["kid"]:
            return refuse("Invalid JWT header.")
        if (claims.get("iss") != g["client_email"] or claims.get("aud") != aud or
                "https://www.googleapis.com/auth/cloud-platform" not in
                str(claims.get("scope", "")).split()):
            return refuse("Invalid JWT claims.")
        iat, exp = claims.get("iat"), claims.get("exp")
        if (not isinstance(iat, int) or not isinstance(exp, int) or abs(iat - now) > 60 or
                exp <= now or exp - iat > 3600):
            return refuse("Invalid JWT: Token must be a short-lived token (60 minutes).")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "in"), "wb") as f:
                f.write((parts[0] + "." + parts[1]).encode())
            with open(os.path.join(d, "sig"), "wb") as f:
                f.write(sig)
            r = subprocess.run(["openssl", "dgst", "-sha256", "-verify", g["public_key"],
                                "-signature", os.path.join(d, "sig"), os.path.join(d, "in")],
                               capture_output=True)
        if r.returncode != 0:
            return refuse("Invalid JWT Signature.")
        tok = "ya29.fake-" + secrets.token_hex(24)
        expires = int(g.get("expires_in", 3599))
        with lock:
            state["tokens_issued"] += 1
            state["jwt_verified"] = state.get("jwt_verified", 0) + 1
            if len(state["tokens"]) >= TOKENS_MAX:
                state["tokens"].pop(next(iter(state["tokens"])))
            state["tokens"][tok] = time.monotonic() + expires
        self.json_reply(200, {"access_token": tok, "expires_in": expires,
                              "token_type": "Bearer"})

    # ---- Gemini API
    def gemini(self, path, query, body):
        g = self.server.cfg["gemini"]
        if self.headers.get("x-goog-api-key") != g["api_key"]:
            self.google_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid "
                              "API key.")
            return
        model, _, method = path[len("/v1beta/models/"):].partition(":")
        if model not in g["models"]:
            self.google_error(404, "NOT_FOUND", "models/%s is not found for API version v1beta"
                              % model)
            return
        try:
            req = json.loads(body)
        except ValueError:
            self.google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
            return
        if self.google_faults(model):
            return
        self.generate(method, query, req, embed="batchEmbedContents")

    def generate(self, method, query, req, embed):
        if method == embed and embed == "batchEmbedContents":
            reqs = req.get("requests")
            if not isinstance(reqs, list) or not reqs:
                self.google_error(400, "INVALID_ARGUMENT", "requests must be non-empty")
                return
            self.json_reply(200, {"embeddings": [{"values": [0.5, 0.25, 0.125]} for _ in reqs]})
            return
        if method == embed and embed == "predict":
            inst = req.get("instances")
            if not isinstance(inst, list) or not inst:
                self.google_error(400, "INVALID_ARGUMENT", "instances must be non-empty")
                return
            self.json_reply(200, {"predictions": [
                {"embeddings": {"values": [0.5, 0.25], "statistics": {"token_count": 4,
                                                                      "truncated": False}}}
                for _ in inst]})
            return
        problem = gemini_check(req)
        if problem:
            self.google_error(400, "INVALID_ARGUMENT", problem)
            return
        try:
            plan = gemini_tool_plan(req)
        except ValueError as e:
            self.google_error(400, "INVALID_ARGUMENT", str(e))
            return
        if method == "generateContent":
            ctype, out = gemini_answer(req, False, plan)
        elif method == "streamGenerateContent" and query.get("alt") == ["sse"]:
            ctype, out = gemini_answer(req, True, plan)
        else:
            self.google_error(404, "NOT_FOUND", "unknown method")
            return
        self.reply(200, ctype, out)

    # ---- Vertex AI
    def vertex(self, path, query, body):
        v = self.server.cfg["vertex"]
        bearer = self.headers.get("Authorization", "")
        with lock:
            exp = state["tokens"].get(bearer[7:]) if bearer.startswith("Bearer ") else None
        if exp is None or exp <= time.monotonic():
            self.google_error(401, "UNAUTHENTICATED", "Request had invalid authentication "
                              "credentials. Expected OAuth 2 access token.")
            return
        prefix = "/v1/projects/%s/locations/%s/publishers/" % (v["project"], v["location"])
        if not path.startswith(prefix):
            self.google_error(404, "NOT_FOUND", "unknown project or location")
            return
        publisher, _, rest = path[len(prefix):].partition("/models/")
        model, _, method = rest.partition(":")
        if model not in v["models"]:
            self.google_error(404, "NOT_FOUND", "Publisher Model %s was not found" % model)
            return
        try:
            req = json.loads(body)
        except ValueError:
            self.google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
            return
        if self.google_faults(model):
            return
        if publisher == "google":
            self.generate(method, query, req, embed="predict")
        elif publisher == "anthropic" and method in ("rawPredict", "streamRawPredict"):
            if req.get("anthropic_version") != "vertex-2023-10-16" or "model" in req:
                self.json_reply(400, {"type": "error", "error": {
                    "type": "invalid_request_error",
                    "message": "anthropic_version: vertex-2023-10-16 required; model: Extra "
                               "inputs are not permitted"}})
                return
            if bool(req.get("stream")) != (method == "streamRawPredict"):
                self.json_reply(400, {"type": "error", "error": {
                    "type": "invalid_request_error", "message": "stream and method disagree"}})
                return
            try:
                plan = anthropic_tool_plan(req)
            except ValueError as e:
                self.json_reply(400, {"type": "error", "error": {
                    "type": "invalid_request_error", "message": str(e)}})
                return
            ctype, out = anthropic_answer(model, req, plan)
            self.reply(200, ctype, out)
        else:
            self.google_error(404, "NOT_FOUND", "unknown publisher or method")

    # ---- Amazon Bedrock
    def aws_error(self, status, kind, message):
        with lock:
            state["rejected"] += 1
        self.json_reply(status, {"message": message},
                        {"x-amzn-ErrorType": kind + ":http://internal.amazon.com/coral/"})

    def bedrock(self, path, body):
        b = self.server.cfg["bedrock"]
        keys = {b["access_key_id"]: (b["secret"], b.get("session_token"))}
        with lock:
            keys.update(state.get("sts_keys", {}))
        why = sigv4_check(self, body, keys)
        if why:
            with lock:
                state["sig_refused"] = state.get("sig_refused", 0) + 1
            self.aws_error(403, "SignatureDoesNotMatch", "The request signature we calculated "
                           "does not match the signature you provided. (%s)" % why)
            return
        with lock:
            state["sig_verified"] = state.get("sig_verified", 0) + 1
        model_enc, _, action = path[len("/model/"):].partition("/")
        model = urllib.parse.unquote(model_enc)
        if model not in b["models"]:
            self.aws_error(404, "ResourceNotFoundException", "Model not found")
            return
        try:
            req = json.loads(body)
        except ValueError:
            self.aws_error(400, "ValidationException", "Malformed input request")
            return
        with lock:
            fault = dict(state["faults"].get(model, {}))
        if fault.get("status") == 429:
            self.aws_error(429, "ThrottlingException", "Too many requests, please wait before "
                           "trying again.")
            return
        if fault.get("error") == "context_window":
            self.aws_error(400, "ValidationException", "Input is too long for requested model.")
            return
        if action == "invoke":
            if not isinstance(req.get("inputText"), str):
                self.aws_error(400, "ValidationException", "inputText is required")
                return
            self.json_reply(200, {"embedding": [0.5, 0.25, 0.125], "inputTextTokenCount": 3})
            return
        msgs = req.get("messages")
        if (not isinstance(msgs, list) or not msgs or "model" in req or
                any(m.get("role") != ("user", "assistant")[i % 2] for i, m in enumerate(msgs)) or
                any(not m.get("content") for m in msgs)):
            self.aws_error(400, "ValidationException", "A conversation must start with a user "
                           "message and alternate between user and assistant roles.")
            return
        try:
            plan = bedrock_tool_plan(req)
        except ValueError as e:
            self.aws_error(400, "ValidationException", str(e))
            return
        calls = plan[1] if plan is not None and plan[0] == "calls" else []
        words = ["hello ", "from ", "bedrock"]
        if plan is not None and plan[0] == "text":
            words = [w + " " for w in plan[1].split(" ")]
            words[-1] = words[-1][:-1]
        usage = {"inputTokens": 21, "outputTokens": 6, "totalTokens": 27}
        stop = "guardrail_intervened" if fault.get("error") == "guardrail" else (
            "tool_use" if calls else "end_turn")
        uses = [{"toolUseId": "tooluse_%d" % (i + 1), "name": n, "input": a}
                for i, (n, a) in enumerate(calls)]
        pre = plan[2] if calls else None
        first = 1 if pre else 0  # the index of the first toolUse block
        if action == "converse":
            content = ([{"text": pre}] if pre else []) + (
                [{"toolUse": u} for u in uses] if calls else [{"text": "".join(words)}])
            self.json_reply(200, {"output": {"message": {"role": "assistant",
                                                         "content": content}},
                                  "stopReason": stop, "usage": usage,
                                  "metrics": {"latencyMs": 12}})
            return
        if action != "converse-stream":
            self.aws_error(404, "UnknownOperationException", "unknown operation")
            return
        frames = [evs_frame("messageStart", {"role": "assistant", "p": "abcd"})]
        if pre:
            frames += [evs_frame("contentBlockDelta", {"contentBlockIndex": 0,
                                                       "delta": {"text": pre}}),
                       evs_frame("contentBlockStop", {"contentBlockIndex": 0})]
        for i, u in enumerate(uses, first):
            frames.append(evs_frame("contentBlockStart", {"contentBlockIndex": i, "start": {
                "toolUse": {"toolUseId": u["toolUseId"], "name": u["name"]}}}))
            for piece in split3(compact(u["input"])) if u["input"] else []:
                frames.append(evs_frame("contentBlockDelta", {"contentBlockIndex": i, "delta": {
                    "toolUse": {"input": piece}}}))
            if i < first + len(uses) - 1:
                frames.append(evs_frame("contentBlockStop", {"contentBlockIndex": i}))
        if not calls:
            for w in words:
                frames.append(evs_frame("contentBlockDelta", {"contentBlockIndex": 0,
                                                              "delta": {"text": w}, "p": "xy"}))
        if fault.get("error") == "stream_exception":
            frames.append(evs_frame("throttlingException", {"message": "slow down"},
                                    "exception"))
        else:
            frames += [evs_frame("contentBlockStop", {"contentBlockIndex": max(
                           first + len(uses) - 1, 0)}),
                       evs_frame("messageStop", {"stopReason": stop}),
                       evs_frame("metadata", {"usage": usage, "metrics": {"latencyMs": 9}})]
        self.reply(200, "application/vnd.amazon.eventstream", b"".join(frames))

    # ---- AWS STS: AssumeRoleWithWebIdentity
    def sts(self, body):
        c = self.server.cfg["sts"]
        form = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode()).items()}
        if (form.get("Action") != "AssumeRoleWithWebIdentity" or
                form.get("Version") != "2011-06-15"):
            self.reply(400, "text/xml", b"<ErrorResponse><Error><Code>InvalidAction</Code>"
                                        b"</Error></ErrorResponse>")
            return
        if (form.get("WebIdentityToken") != c["web_identity_token"] or
                form.get("RoleArn") != c["role_arn"]):
            with lock:
                state["rejected"] += 1
            self.reply(400, "text/xml", b"<ErrorResponse><Error><Type>Sender</Type><Code>"
                                        b"InvalidIdentityToken</Code><Message>bad token"
                                        b"</Message></Error></ErrorResponse>")
            return
        akid = "ASIA" + secrets.token_hex(8).upper()
        secret, session = secrets.token_hex(20), "FwoG" + secrets.token_hex(40)
        exp = datetime.now(timezone.utc) + timedelta(seconds=int(c.get("expires_in", 3600)))
        with lock:
            state.setdefault("sts_keys", {})[akid] = (secret, session)
            state["tokens_issued"] += 1
        xml = ("<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/"
               "2011-06-15/\"><AssumeRoleWithWebIdentityResult><Credentials>"
               "<AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey>"
               "<SessionToken>%s</SessionToken><Expiration>%s</Expiration></Credentials>"
               "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>" %
               (akid, secret, session, exp.strftime("%Y-%m-%dT%H:%M:%SZ")))
        self.reply(200, "text/xml", xml.encode())

    # ---- Azure OpenAI
    def azure(self, path, query, body):
        a = self.server.cfg["azure"]
        if query.get("api-version") != [a["api_version"]]:
            self.azure_error(404, "404", "Resource not found")
            return
        key = self.headers.get("api-key")
        bearer = self.headers.get("Authorization", "")
        ok = key is not None and key == a["api_key"]
        if not ok and key is None and bearer.startswith("Bearer "):
            with lock:
                exp = state["tokens"].get(bearer[7:])
            ok = exp is not None and exp > time.monotonic()
        if not ok:
            self.azure_error(401, "401", "Access denied due to invalid subscription key or wrong "
                             "API endpoint. Make sure to provide a valid key for an active "
                             "subscription and use a correct regional API endpoint for your "
                             "resource.")
            return
        parts = path.split("/")
        try:
            req = json.loads(body)
        except ValueError:
            self.azure_error(400, "BadRequest", "invalid JSON")
            return
        if path == "/openai/responses":
            name, kind = req.get("model", ""), "responses"
        elif len(parts) >= 5 and parts[2] == "deployments":
            name, kind = parts[3], "/".join(parts[4:])
        else:
            self.azure_error(404, "404", "Resource not found")
            return
        if name not in a["deployments"]:
            self.azure_error(404, "DeploymentNotFound", "The API deployment for this resource "
                             "does not exist.")
            return
        with lock:
            fault = dict(state["faults"].get(name, {}))
        if fault.get("status"):
            hdr = {"Retry-After": str(fault["retry_after"])} if fault.get("retry_after") else {}
            self.azure_error(fault["status"], str(fault["status"]),
                             "Requests to the ChatCompletions_Create Operation under Azure "
                             "OpenAI API version %s have exceeded token rate limit of your "
                             "current OpenAI S0 pricing tier." % a["api_version"], hdr)
            return
        if fault.get("error") == "content_filter":
            with lock:
                state["rejected"] += 1
            self.json_reply(400, {"error": {
                "message": "The response was filtered due to the prompt triggering Azure "
                           "OpenAI's content management policy.",
                "type": None, "param": "prompt", "code": "content_filter", "status": 400,
                "innererror": {"code": "ResponsibleAIPolicyViolation",
                               "content_filter_result": {"hate": {"filtered": True,
                                                                  "severity": "high"}}}}})
            return
        if fault.get("error") == "context_window":
            self.azure_error(400, "context_length_exceeded", "This model's maximum context "
                             "length is 8192 tokens. However, your messages resulted in 9000 "
                             "tokens.")
            return
        if kind == "chat/completions":
            try:
                plan = openai_tool_plan(req)
            except ValueError as e:
                self.azure_error(400, "BadRequest", str(e))
                return
            ctype, out = chat_answer(name, req, plan)
        elif kind == "embeddings":
            ctype, out = embeddings_answer(name, req)
        elif kind == "responses":
            ctype, out = responses_answer(name, req)
        else:
            self.azure_error(404, "404", "Resource not found")
            return
        self.reply(200, ctype, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", default="")
    a = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(a.config) as f:
        srv.cfg = json.load(f)
    srv.log_path = a.log
    if a.log:
        open(a.log, "w").close()
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
