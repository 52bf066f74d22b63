#!/usr/bin/env python3
"""provider_proxy: an HTTP proxy that stands in for every provider host, for tests only.

router-svc is started with https_proxy/http_proxy pointing here and SSL_CERT_FILE naming the test
CA. For https the proxy accepts the CONNECT, records its target, and terminates TLS itself with a
certificate (signed by the test CA) valid for every provider host; for plain http it takes the
absolute-form request. Either way it records, per request, where the request was meant to go
(the CONNECT target or the absolute URL's authority, the Host header, the path) and the
credentials it carried (Authorization, x-api-key, api-key, x-goog-api-key), one JSON line each in
the log, and answers like the provider's API would (OpenAI chat completions, streaming or not;
embeddings; Anthropic messages), so that the request succeeds end to end.

    provider_proxy.py --port-file FILE --cert CRT --key KEY --log FILE.jsonl [--direct]

With --direct it is no proxy but an HTTPS provider itself: every connection is TLS from its
first byte (the certificate given), and requests are answered as above (tunnel "direct" in the
log), for tests of how router-svc verifies a provider's certificate.

Binds 127.0.0.1 on a free port (written to --port-file). Bounded: request heads 64 KiB, bodies
4 MiB, 256 connections; anything larger is refused with 400 and the connection closed.
"""
import argparse
import os
import json
import re
import socket
import socketserver
import ssl
import threading
import urllib.parse

HEAD_MAX = 64 * 1024
BODY_MAX = 4 * 1024 * 1024
CONN_MAX = 256
AUTH_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")

log_lock = threading.Lock()
conn_sem = threading.BoundedSemaphore(CONN_MAX)


class Bad(Exception):
    pass


def read_head(f):
    lines = []
    total = 0
    while True:
        line = f.readline(HEAD_MAX + 1)
        if not line:
            if lines:
                raise Bad("eof in head")
            return None
        total += len(line)
        if total > HEAD_MAX:
            raise Bad("head too large")
        if line in (b"\r\n", b"\n"):
            if not lines:
                continue
            break
        lines.append(line.decode("latin-1").rstrip("\r\n"))
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for h in lines[1:]:
        k, _, v = h.partition(":")
        headers[k.strip().lower()] = v.strip()
    return method, target, headers


def read_body(f, headers):
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while True:
            size = int(f.readline(64).split(b";")[0].strip(), 16)
            if size == 0:
                f.readline(64)
                return out
            out += f.read(size)
            f.readline(64)
            if len(out) > BODY_MAX:
                raise Bad("body too large")
    n = int(headers.get("content-length", "0"))
    if n > BODY_MAX:
        raise Bad("body too large")
    return f.read(n)


def path_model(path):
    """The model a path names (Google's models/NAME:method, Bedrock's /model/NAME/converse),
    else ""."""
    m = re.search(r"/models/([^/:]+):", path) or re.search(r"^/model/([^/]+)/", path)
    return urllib.parse.unquote(m.group(1)) if m else ""


def answer(path, req):
    """(content type, body bytes) of the provider's answer to req at path."""
    model = req.get("model", "m")
    if path.endswith("/token"):
        # an OAuth 2.0 token endpoint (Google's JWT-bearer grant)
        return "application/json", json.dumps({
            "access_token": "proxy-token-" + path_model(path), "expires_in": 3599,
            "token_type": "Bearer"}).encode()
    if path.endswith("/converse"):
        return "application/json", json.dumps({
            "output": {"message": {"role": "assistant",
                                   "content": [{"text": "hello from the proxy"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 5, "outputTokens": 4, "totalTokens": 9}}).encode()
    if ":generateContent" in path:
        return "application/json", json.dumps({
            "candidates": [{"content": {"role": "model",
                                        "parts": [{"text": "hello from the proxy"}]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 4}}).encode()
    if path.endswith("/messages"):
        return "application/json", json.dumps({
            "id": "msg_proxy", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": "hello from the proxy"}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 4}}).encode()
    if path.endswith("/embeddings"):
        return "application/json", json.dumps({
            "object": "list", "model": model,
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
            "usage": {"prompt_tokens": 3, "total_tokens": 3}}).encode()
    if req.get("stream"):
        ev = []
        for i, word in enumerate(["hello ", "from the proxy"]):
            ev.append({"id": "chatcmpl-proxy", "object": "chat.completion.chunk", "created": 1,
                       "model": model, "choices": [{"index": 0, "delta": {"content": word},
                                                    "finish_reason": "stop" if i else None}]})
        ev.append({"id": "chatcmpl-proxy", "object": "chat.completion.chunk", "created": 1,
                   "model": model, "choices": [],
                   "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}})
        body = "".join("data: " + json.dumps(e) + "\n\n" for e in ev) + "data: [DONE]\n\n"
        return "text/event-stream", body.encode()
    return "application/json", json.dumps({
        "id": "chatcmpl-proxy", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant",
                                             "content": "hello from the proxy"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}}).encode()


class Handler(socketserver.StreamRequestHandler):
    def setup(self):
        if not conn_sem.acquire(blocking=False):
            self.request.close()
            raise ConnectionAbortedError("connection cap")
        super().setup()

    def finish(self):
        try:
            super().finish()
        finally:
            conn_sem.release()

    def handle(self):
        try:
            if self.server.direct:
                tls = self.server.tls.wrap_socket(self.request, server_side=True)
                self.serve(tls.makefile("rb"), tls.makefile("wb", buffering=0), "direct")
                return
            self.serve(self.rfile, self.wfile, None)
        except (Bad, ValueError) as e:
            try:
                self.wfile.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: " +
                                 str(len(str(e))).encode() + b"\r\nConnection: close\r\n\r\n" +
                                 str(e).encode())
            except OSError:
                pass
        except (OSError, ssl.SSLError):
            pass

    def serve(self, rf, wf, tunnel):
        while True:
            head = read_head(rf)
            if head is None:
                return
            method, target, headers = head
            if method == "CONNECT" and tunnel is None:
                wf.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                wf.flush()
                tls = self.server.tls.wrap_socket(self.request, server_side=True)
                self.serve(tls.makefile("rb"), tls.makefile("wb", buffering=0), target)
                return
            body = read_body(rf, headers)
            if tunnel is None:
                u = urllib.parse.urlsplit(target)  # absolute form (plain http proxying)
                authority, path = u.netloc, u.path + ("?" + u.query if u.query else "")
            else:
                authority, path = "", target
            try:
                req = json.loads(body) if body else {}
            except ValueError:
                req = {}
            rec = {"tunnel": tunnel or "", "authority": authority,
                   "host": headers.get("host", ""), "method": method, "path": path,
                   "model": (req.get("model", "") if isinstance(req, dict) else "") or
                            path_model(path),
                   "auth": {h: headers[h] for h in AUTH_HEADERS if h in headers}}
            with log_lock:
                with open(self.server.log_path, "a") as f:
                    f.write(json.dumps(rec) + "\n")
            ctype, out = answer(path, req if isinstance(req, dict) else {})
            wf.write(("HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" %
                      (ctype, len(out))).encode() + out)
            wf.flush()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--direct", action="store_true")
    a = ap.parse_args()
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(a.cert, a.key)
    tls.set_alpn_protocols(["http/1.1"])
    srv = Server(("127.0.0.1", 0), Handler)
    srv.tls = tls
    srv.direct = a.direct
    srv.log_path = a.log
    open(a.log, "w").close()
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
