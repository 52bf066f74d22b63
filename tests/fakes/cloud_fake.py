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

Faults per deployment or model name: POST /_control/fault/{name} with {"status": 429,
"retry_after": 3} or {"error": "content_filter" | "context_window"}; {} clears. GET /_stats:
{"tokens_issued": N, "requests": N, "rejected": N}.

Bounded: bodies 4 MiB, 1024 recorded tokens.
"""
import argparse
import json
import os
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY_MAX = 4 * 1024 * 1024
TOKENS_MAX = 1024

lock = threading.Lock()
state = {"tokens": {}, "faults": {}, "tokens_issued": 0, "requests": 0, "rejected": 0}


def chat_answer(model, req):
    words = ["hello ", "from ", "the ", "cloud ", "fake"]
    usage = {"prompt_tokens": 11, "completion_tokens": len(words), "total_tokens": 11 + len(words)}
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


def embeddings_answer(model, req):
    inp = req.get("input")
    n = len(inp) if isinstance(inp, list) else 1
    return "application/json", json.dumps({
        "object": "list", "model": model,
        "data": [{"object": "embedding", "index": i, "embedding": [0.5, 0.25]} for i in range(n)],
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
                self.json_reply(200, {k: state[k] for k in ("tokens_issued", "requests",
                                                            "rejected")})
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
            ctype, out = chat_answer(name, req)
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
